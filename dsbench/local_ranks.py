"""How many ranks this machine can start (pure): one per GPU on a GPU node; on a CPU machine as many as its memory
holds, each rank being a Python process that has imported torch, DeepSpeed and transformers before any model.

A typo such as ``--num-gpus 5000`` would otherwise start 5,000 interpreters on this machine, which swaps or meets
the kernel's OOM killer, and that kills processes the user did not ask dsbench to touch."""

from __future__ import annotations

from dsbench.errors import UserError

GIB = 2**30
CPU_RANK_FLOOR_BYTES = int(0.35 * GIB)
"""What one CPU rank holds before its model: the peak RSS of ``python -c "import torch, deepspeed, transformers;
from transformers import GPT2LMHeadModel"`` (DS_ACCELERATOR=cpu) was 359 MiB on 2026-11-30 (torch 2.13.0, the
pinned stack); a gpt2-tiny ZeRO-2 rank peaks at 452 MiB. The floor is a lower bound: a refusal is certain to be
right, a launch under it may still need more."""


def check_local_ranks(ranks: int, flag: str, *, gpus: int, memory_available: int | None) -> None:
    """Refuse ``ranks`` processes on this machine when it has ``gpus`` GPUs and fewer (DeepSpeed and torchrun give
    local rank N the GPU N: "invalid device ordinal"), or none and ``memory_available`` bytes (the kernel's
    MemAvailable; None: unknown, nothing refused) cannot hold that many CPU ranks' floor."""
    if gpus:
        if ranks > gpus:
            raise UserError(f"{flag} {ranks:,}: this node has {gpus} GPU(s) and a rank needs one of its own: give at "
                            f"most {gpus}")
        return
    if memory_available is not None and ranks * CPU_RANK_FLOOR_BYTES > memory_available:
        most, need = max(1, memory_available // CPU_RANK_FLOOR_BYTES), ranks * CPU_RANK_FLOOR_BYTES / GIB
        raise UserError(f"{flag} {ranks:,}: {ranks:,} CPU ranks need at least {need:,.0f} GiB "
                        f"({CPU_RANK_FLOOR_BYTES / GIB:.2f} GiB each for torch and DeepSpeed alone), and this "
                        f"machine has {memory_available / GIB:,.1f} GiB available: give at most {most}")


def check_ranks_here(ranks: int, flag: str) -> None:
    """:func:`check_local_ranks` with this machine's GPUs and available memory, read now."""
    from dsbench.envinfo import local_gpu_count, memory_available

    check_local_ranks(ranks, flag, gpus=local_gpu_count(), memory_available=memory_available())
