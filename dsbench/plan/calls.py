"""How many calls carry each data-parallel collective of a step, engine by engine (pure).

Calls, not only bytes: each collective call pays the link's latency, and on CPU ranks that is most of the cost
(docs/planner.md, "Calibration"). The counts follow each engine's own bucketing.
"""

from __future__ import annotations

import math
from typing import Protocol

from dsbench.models import LAYER_NORM, ModelShape
from dsbench.plan.comm import Calls, bucket_calls
from dsbench.plan.memory import Accounting


class Split(Protocol):
    """How a candidate splits the model (:class:`dsbench.plan.estimate.Candidate` is one)."""

    strategy: str
    tp: int
    pp: int

DDP_FIRST_BUCKET = 2**20
"""torch DDP's first gradient bucket, bytes (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES)."""
DDP_BUCKET = 25 * 2**20
"""torch DDP's bucket_cap_mb default, 25 MiB."""
DEEPSPEED_ALLGATHER_BUCKET = 5e8
"""DeepSpeed's allgather_bucket_size default, elements (runtime/zero/config.py)."""


def ready_order(shape: ModelShape, cand: Split) -> list[float]:
    """The busiest rank's parameter tensors in the order their gradients become ready (the reverse of the forward:
    last block first; a tied embedding is ready last). A pipeline stage holds layers/pp blocks and, on the busiest
    one, the embeddings; tensor parallelism splits every tensor tp ways (norms too, which overcounts no call)."""
    parts = shape.parts()
    front = [parts["embedding"], *([parts["positions"]] if parts["positions"] else [])]
    back = [shape.hidden] * (2 if shape.arch in LAYER_NORM else 1) + ([parts["head"]] if parts["head"] else [])
    tensors = [*front, *shape.block_tensors() * round(shape.layers / cand.pp), *back]
    return [size / cand.tp for size in reversed(tensors)]


def collective_calls(cand: Split, shape: ModelShape, held: float, reduce_bucket: float | None,
                     acc: Accounting) -> Calls:
    """How many calls carry each data-parallel collective per optimizer step:

    - DDP: gradient buckets, 1 MiB first then 25 MiB (torch DistributedDataParallel's defaults);
    - ZeRO-1/2/3: gradients packed into ``reduce_bucket_size`` buckets as they become ready, one reduction per
      bucket and per tensor larger than it (:func:`bucket_calls`; HF "auto" = h²); ZeRO-1/2 then one all-gather
      per ``allgather_bucket_size`` of updated parameters;
    - ZeRO-3: one all-gather per partitioned module in the forward and again in the backward (the block's weight
      matrices and the embeddings; norms persist);
    - FSDP2 (``fully_shard`` per block, then the root): an all-gather per unit in the forward, per block in the
      backward (the root is not resharded after forward), a reduce-scatter per unit.
    """
    layers = shape.layers / cand.pp
    reduce_bucket = reduce_bucket or shape.hidden**2  # HF "auto": hidden²
    if cand.strategy == "ddp":
        grads = held * acc.grads
        return Calls(grads=1 + math.ceil(max(0.0, grads - DDP_FIRST_BUCKET) / DDP_BUCKET))
    if cand.strategy == "zero0":
        return Calls(grads=math.ceil(held / DEEPSPEED_ALLGATHER_BUCKET))
    if cand.strategy in ("zero1", "zero2"):
        return Calls(grads=bucket_calls(ready_order(shape, cand), reduce_bucket),
                     updated_params=math.ceil(held / DEEPSPEED_ALLGATHER_BUCKET))
    if cand.strategy == "zero3":
        embeddings = (1 if shape.tied_embeddings else 2) + (1 if shape.arch == "gpt2" else 0)  # + GPT-2's wpe
        # the block's weight matrices (ModelShape.block_matrices); norms stay whole under ZeRO-3: HF "auto" sets
        # stage3_param_persistence_threshold = 10·h, above a norm's h (Qwen3's q/k norms are a head wide)
        modules = round(layers * shape.block_matrices) + embeddings
        return Calls(grads=bucket_calls(ready_order(shape, cand), reduce_bucket), gather_forward=modules,
                     gather_backward=modules)
    units = round(layers) + 1
    return Calls(grads=units, gather_forward=units, gather_backward=round(layers))


NO_LATENCY = Calls(grads=0, gather_forward=0, gather_backward=0, updated_params=0)
