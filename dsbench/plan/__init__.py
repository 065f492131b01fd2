"""``dsbench plan``: memory, communication and pipeline-bubble estimates and a recommended strategy (pure)."""
