"""``dsbench testbed``: several "nodes" on one machine (network namespaces + sshd) for real multi-node launches."""
