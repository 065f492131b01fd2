"""What tests/integration/engine_ranks.py and engine_resume.py build and feed their engines alike: the optimizer's
settings, one step's batches, and a rank's checksum of its weights."""

from __future__ import annotations

from typing import Any

import torch

from dsbench.worker.engines.base import EngineOptions
from dsbench.worker.state_bytes import local_shard


def engine_options(dims: Any, **overrides: Any) -> EngineOptions:
    """AdamW at lr 1e-3 (betas 0.9/0.95, weight decay 0.01), clipped at 0.5, 2 micro-batches a step, fp32, no LR
    warm-up; ``overrides`` change any of them or add an engine's own options."""
    settings = {"lr": 1e-3, "weight_decay": 0.01, "betas": (0.9, 0.95), "eps": 1e-8, "grad_clip": 0.5,
                "warmup_steps": 0, "grad_accum": 2, "precision": "fp32", **overrides}
    return EngineOptions(dims=dims, **settings)


def ds_adamw(torch_adam: bool = True) -> dict[str, Any]:
    """The DeepSpeed config's optimizer section for :func:`engine_options`' AdamW: torch's AdamW stepped by DeepSpeed
    (``torch_adam``: no JIT op, the torch engines' optimizer), or, without it, the optimizer DeepSpeed builds itself
    (DeepSpeedCPUAdam where the optimizer is offloaded)."""
    params = {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.01}
    return {"type": "AdamW", "params": {**params, "torch_adam": True} if torch_adam else params}


def step_batches(generator: torch.Generator) -> list:
    """One step's 2 micro-batches of 2 sequences of 16 tokens (the tiny models' vocabulary: 4096), the same on every
    rank for the same generator."""
    return [torch.randint(0, 4096, (2, 16), generator=generator) for _ in range(2)]


def weight_sum(engine: Any) -> float:
    """The sum of this rank's part of every weight, in float64: equal sums on the same layout, equal weights (under
    DeepSpeed's ZeRO-3 a parameter's own tensor is empty outside a gather: its partition, ``ds_tensor``)."""
    return sum(float(local_shard(getattr(p, "ds_tensor", p).detach()).double().sum())
               for p in engine.model.parameters())


def gathered_after_forward(engine: Any, batch: torch.Tensor) -> bool:
    """Whether FSDP2 keeps the first block's parameters gathered after its forward: without resharding after the
    forward (``--no-fsdp-reshard``, torch's ``reshard_after_forward=False``) they stay whole tensors until the backward;
    with it they are back to their shards (DTensors). One forward and its backward, which reshards (every rank)."""
    from torch.distributed.tensor import DTensor

    from dsbench.worker.model import transformer_blocks

    loss = engine.model(input_ids=batch, labels=batch).loss
    gathered = not isinstance(next(transformer_blocks(engine.model)[0].parameters()), DTensor)
    loss.backward()  # a collective: FSDP2 reduce-scatters the gradients on every rank of the group
    return gathered


def saved_casts_peak(engine: Any, batches: list) -> int:
    """The most bytes of 16-bit weight casts (bf16 tensors of a local weight's shape, or its transpose) that autograd
    held at once for the backward over one ``engine.train_step(batches)``: each saved tensor is counted from the
    forward that packs it (``torch.autograd.graph.saved_tensors_hooks``) until it is freed, a storage once, a
    DTensor by its local shard. Activations never take a weight's shape with 40-token sequences."""
    import weakref

    from torch.distributed.tensor import DTensor

    shapes = {tuple(local_shard(p).shape) for p in engine.model.parameters() if p.dim() == 2}
    live: dict[int, list[int]] = {}
    held = {"now": 0, "peak": 0}

    def release(ptr: int) -> None:
        live[ptr][0] -= 1
        if not live[ptr][0]:
            held["now"] -= live.pop(ptr)[1]

    def pack(saved: torch.Tensor) -> torch.Tensor:
        local = saved.to_local() if isinstance(saved, DTensor) else saved
        if local.dtype == torch.bfloat16 and {tuple(local.shape), tuple(local.shape[::-1])} & shapes:
            ptr = local.untyped_storage().data_ptr()
            if ptr not in live:
                live[ptr] = [0, local.untyped_storage().nbytes()]
                held["now"] += live[ptr][1]
                held["peak"] = max(held["peak"], held["now"])
            live[ptr][0] += 1
            weakref.finalize(saved, release, ptr)
        return saved

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda saved: saved):
        engine.train_step(batches)
    return held["peak"]
