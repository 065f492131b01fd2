"""``dsbench compare``: expand a matrix of strategies into cells and run them one after another."""
