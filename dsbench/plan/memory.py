"""Model-state and activation memory per rank, by strategy (pure arithmetic, bytes).

Model states follow the ZeRO paper (Rajbhandari et al., SC 2020, sec. 3.1 and 5): with Ψ parameters
and data-parallel (sharding) degree N_d, per rank

    DDP / ZeRO-0    (p + g + o + m) Ψ
    ZeRO-1 (P_os)   (p + g) Ψ + (o + m) Ψ / N_d
    ZeRO-2 (P_os+g) p Ψ + (g + o + m) Ψ / N_d
    ZeRO-3 (P_os+g+p), FSDP2 full shard: (p + g + o + m) Ψ / N_d

where p, g are the bytes per parameter of weights and gradients, o of the Adam moments and m of the
fp32 master copy. The paper's mixed-precision Adam is p = g = 2, o + m = K = 12 (16 bytes/param);
../shared/seeds/000 and 002 count 2 + 2 + 8 = 12 bytes/param (no master copy).

With tensor or pipeline parallelism Ψ is what a rank holds (:func:`held_params`), counted from the model's
parts: TP splits each block's matrices and keeps norms (and the embeddings) whole; a pipeline stage holds its
blocks, the first stage the embeddings, the last the final norm and head (and, when tied, a copy of the
embedding).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dsbench.models import ModelShape
from dsbench.strategies import PLANNER

Offload = Literal["none", "cpu", "nvme"]


@dataclass(frozen=True, slots=True)
class Accounting:
    """Bytes per parameter of each model-state component."""

    name: str
    params: float
    grads: float
    optimizer: float
    """Adam moments (m and v)."""
    master: float
    """fp32 master weights (0 where the optimizer updates the weights in place)."""
    source: str

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer + self.master


ACCOUNTINGS = {
    "mixed16": Accounting("mixed16", 2, 2, 8, 4, "ZeRO paper: fp16/bf16 weights+grads, fp32 master + Adam m, v "
                                                 "(K=12), 16 bytes/param"),
    "mixed12": Accounting("mixed12", 2, 2, 8, 0, "../shared/seeds/000 and 002: fp16 weights+grads, fp32 Adam m, v; "
                                                 "12 bytes/param"),
    "fp32": Accounting("fp32", 4, 4, 8, 0, "fp32 weights/grads, torch AdamW moments; 16 bytes/param"),
    "amp": Accounting("amp", 4, 4, 8, 0, "torch AMP (dsbench's DDP, torch_tp and torch_pp in bf16/fp16): fp32 "
                                         "weights and gradients, AdamW moments, the 16-bit casts priced with the "
                                         "activations; 16 bytes/param"),
    "fp32_deepspeed": Accounting("fp32_deepspeed", 4, 4, 8, 4, "DeepSpeed ZeRO-1/2/3 in fp32: its optimizer keeps "
                                                                "an fp32 copy of the partition; 20 bytes/param"),
    "mixed16_fp32_grads": Accounting("mixed16_fp32_grads", 2, 4, 8, 4, "DeepSpeed ZeRO-1/2/3 with 16-bit weights and "
                                                                        "data_types.grad_accum_dtype fp32: fp32 "
                                                                        "gradients; 18 bytes/param"),
}


def native_amp(strategy: str, precision: str) -> bool:
    """dsbench's DDP, torch_tp and torch_pp (the planner's ``ddp`` with its tp and pp) train fp32 weights under
    torch.autocast in bf16 or fp16 (worker/engines/native.autocast), as torch AMP does; DeepSpeed and FSDP2 train
    16-bit weights."""
    return strategy == "ddp" and precision in ("bf16", "fp16")


def accounting_for(precision: str, strategy: str, explicit: str | None = None) -> Accounting:
    """The accounting a run uses: explicit choice (``--accounting``, or what a given config's dtypes hold:
    plan/config_row.config_accounting), else from precision and strategy."""
    if explicit:
        return ACCOUNTINGS[explicit]
    if precision in ("bf16", "fp16"):
        return ACCOUNTINGS["amp" if native_amp(strategy, precision) else "mixed16"]
    return ACCOUNTINGS["fp32_deepspeed" if strategy in ("zero1", "zero2", "zero3") else "fp32"]


@dataclass(frozen=True, slots=True)
class ModelStates:
    """Bytes per rank of each component, split by where they live."""

    params: float
    grads: float
    optimizer: float
    master: float
    host: float = 0.0
    """Bytes of the above that live in CPU RAM (offload)."""
    nvme: float = 0.0
    """Bytes of the above that live on NVMe (offload)."""

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer + self.master

    @property
    def device(self) -> float:
        """Bytes on the accelerator."""
        return self.total - self.host - self.nvme


def held_params(shape: ModelShape, tp: int = 1, pp: int = 1, vocab_parallel_head: bool = False) -> int:
    """Parameters on the busiest rank of a tp x pp layout (before any ZeRO/FSDP sharding).

    Stages take equal shares of the decoder blocks, earlier stages the remainder (dsbench's torch_pp split and
    DeepSpeed's ``type:BlockPipe`` partition); the first stage adds the embeddings, the last the final norm and
    the head, or a second copy of the tied embedding. ``vocab_parallel_head``: the head's vocabulary is split
    over the TP ranks too (DeepSpeed AutoTP does; dsbench's torch_tp keeps it whole unless --loss-parallel).
    """
    p = shape.parts()
    block = p["block_split"] // tp + p["block_whole"]
    head = p["head"] // tp if vocab_parallel_head else p["head"]
    base, extra = divmod(shape.layers, pp)
    held = []
    for stage in range(pp):
        count = (base + (1 if stage < extra else 0)) * block
        if stage == 0:
            count += p["embedding"] + p["positions"]
        if stage == pp - 1:
            count += p["final_norm"] + head + (p["embedding"] if p["head"] == 0 and pp > 1 else 0)
        held.append(count)
    return max(held)


def model_states(psi: float, strategy: str, shards: int, acc: Accounting, offload: Offload = "none",
                 offload_param: Offload = "none") -> ModelStates:
    """Per-rank model-state bytes for a rank holding ``psi`` parameters (ZeRO paper sec. 5; offload per
    ZeRO-Offload / ZeRO-Infinity); ZeRO stages and FSDP shard them further over ``shards`` ranks."""
    if strategy not in PLANNER:
        raise ValueError(f"unknown strategy {strategy!r}")
    n = max(1, shards)
    # which components the strategy partitions over the sharding degree (ZeRO paper: P_os, P_os+g, P_os+g+p)
    sharded = PLANNER[strategy].sharded
    parts = {name: getattr(acc, name) * psi / (n if name in sharded else 1)
             for name in ("params", "grads", "optimizer", "master")}
    params, grads, opt, master = parts["params"], parts["grads"], parts["optimizer"], parts["master"]
    host = nvme = 0.0
    if offload != "none" and strategy in ("zero1", "zero2", "zero3"):
        # ZeRO-Offload: the optimizer (fp32 master + moments) and an fp32 copy of the gradient partition live on
        # the host; 16-bit gradients stream out bucket by bucket, so the device keeps none between steps.
        grads = 4 * psi / n
        moved = opt + master
        host += grads + (moved if offload == "cpu" else 0.0)
        nvme += moved if offload == "nvme" else 0.0
    if offload_param != "none" and strategy == "zero3":
        host += params if offload_param == "cpu" else 0.0
        nvme += params if offload_param == "nvme" else 0.0
    return ModelStates(params=params, grads=grads, optimizer=opt, master=master, host=host, nvme=nvme)


def activation_bytes(seq: int, micro: int, hidden: int, heads: int, layers: int, vocab: int, tp: int = 1,
                     pp: int = 1, checkpointing: bool = False, flash_attention: bool = True,
                     act_bytes: int = 2) -> float:
    """Activation memory per rank for one micro-batch in flight.

    Per layer, 16-bit activations, no sequence parallelism: s·b·h·(10 + 24/t + 5·a·s/(h·t)) bytes
    (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", eq. 2;
    34 + 5as/h at t = 1). Fused/flash attention keeps no s x s scores, dropping the 5as/h term. With full
    activation checkpointing a layer keeps only its 2·s·b·h-byte input, and one layer's full
    activations exist during its recomputation. The output layer adds the logits: s·b·V/t values
    in 16 bits plus their fp32 copy for the loss. ``act_bytes`` = 4 doubles everything for fp32.
    """
    scale = act_bytes / 2
    attn = 0.0 if flash_attention else 5 * heads * seq / (hidden * tp)
    per_layer = seq * micro * hidden * (10 + 24 / tp + attn) * scale
    layers_here = layers / pp
    logits = seq * micro * vocab / tp * (act_bytes + 4)
    if checkpointing:
        return layers_here * 2 * seq * micro * hidden * scale + per_layer + logits
    return layers_here * per_layer + logits


def buffer_bytes(strategy: str, tp: int, shape: ModelShape, acc: Accounting, reduce_bucket: float | None,
                 prefetch_bucket: float | None, held: float = 0.0, micro_steps: int = 1,
                 pipelined: bool = False) -> float:
    """Temporary buffers: DeepSpeed buckets (reduce_bucket_size = h², prefetch = 0.9·h² by HF "auto") or FSDP2's
    unsharded blocks (current + prefetched) of weights and one block's gradients.

    FSDP2's gradients stay unsharded, all ``held`` parameters' in fp32 (the reduce dtype), when the reduce-scatter
    waits for the last of several ``micro_steps`` (dsbench's engine: ``set_requires_gradient_sync(last_micro)``)
    or runs under torch's pipeline schedules (``pipelined``, torch_3d), whose every backward but the last also
    skips resharding (torch/distributed/pipelining/stage.py): the whole stage then stays gathered too."""
    h2 = shape.hidden ** 2
    reduce = reduce_bucket or h2
    if strategy in ("zero1", "zero2"):
        return reduce * acc.grads  # the contiguous-gradients bucket; all-gathers write into the params
    if strategy == "zero3":
        prefetch = prefetch_bucket or 0.9 * h2
        largest = shape.vocab_size * shape.hidden / tp  # the embedding is gathered whole
        return reduce * acc.grads + prefetch * acc.params + largest * acc.params
    if strategy in ("fsdp", "fsdp_hybrid"):
        block = (shape.num_params() - shape.vocab_size * shape.hidden) / shape.layers / tp
        weights = held * acc.params if pipelined else 2 * block * acc.params
        grads = held * 4 if pipelined or micro_steps > 1 else block * acc.grads
        return weights + grads
    return 0.0
