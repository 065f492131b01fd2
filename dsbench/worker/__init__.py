"""The training worker: runs on every rank under deepspeed, torchrun, accelerate or alone.

torch, deepspeed and transformers are imported only inside this package.
"""
