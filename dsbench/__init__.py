"""dsbench: render, validate, launch and compare DeepSpeed / DDP / FSDP training strategies.

This module imports nothing heavy so that ``dsbench --help`` stays fast.
"""

__version__ = "0.1.0"
