"""One module per ``dsbench`` command (as accelerate's ``commands/``); :mod:`dsbench.cli` assembles them."""
