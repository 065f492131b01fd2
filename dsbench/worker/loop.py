"""The engine-agnostic training loop: fixed data order, warm-up excluded, one record per step."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from dsbench.records import mfu
from dsbench.worker.dist import all_gather_object, mean_across_ranks
from dsbench.worker.metrics import memory_now


@dataclass(frozen=True)
class LoopSettings:
    steps: int
    warmup: int
    seq_len: int
    flops_per_token: int
    peak_tflops: float | None
    tp: int = 1
    """Tensor-parallel degree: TP groups are consecutive ranks and share a batch; each does 1/tp of its FLOPs."""


def _sync(device: str) -> None:
    """Wait for queued GPU work so the clock measures it (CPU ops are already synchronous)."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def _fault(rank: int, step: int) -> None:
    """Fault injection for tests of launch failure handling: DSBENCH_FAULT="RANK:STEP" fails that rank there."""
    import os

    if os.environ.get("DSBENCH_FAULT") == f"{rank}:{step}":
        raise RuntimeError(f"injected fault at step {step} (DSBENCH_FAULT)")


def train_loop(engine: Any, plan: Any, dist_info: Any, settings: LoopSettings, emit: Any) -> None:
    """Run ``settings.steps`` optimizer steps; ``emit(record)`` is called on rank 0 per step."""
    import torch

    device, world = dist_info.device, dist_info.world_size
    ga, dp_rank = plan.grad_accum, dist_info.rank // settings.tp
    rank_tokens = plan.micro_batch * ga * settings.seq_len / settings.tp  # tokens' worth of work per rank
    global_tokens = plan.global_batch * settings.seq_len
    for step in range(settings.steps):
        batches = [plan.micro_batch_for(step, m, dp_rank).to(device) for m in range(ga)]
        _fault(dist_info.rank, step)
        engine.zero_grad()
        engine.measure_states = step == 0
        _sync(device)
        start = time.perf_counter()
        losses = [engine.forward_backward(batch, last_micro=(m == ga - 1)) for m, batch in enumerate(batches)]
        engine.step()
        _sync(device)
        step_time = time.perf_counter() - start
        # Everything below is outside the timed region.
        states = engine.model_state_bytes() if step == 0 else None
        loss = mean_across_ranks(float(torch.stack(losses).mean()), world)  # all-reduce: sync point
        current, peak, kind = memory_now(device)
        per_rank = all_gather_object((step_time, current, peak, states), world)  # sync point
        times = [r[0] for r in per_rank]
        job_time = max(times)  # the step ends when the slowest rank ends
        rank_tps = [rank_tokens / t for t in times]
        record = {
            "type": "step", "step": step, "warmup": step < settings.warmup, "loss": loss, "lr": engine.lr(),
            "step_time_s": job_time, "step_time_per_rank_s": times, "tokens_per_s": global_tokens / job_time,
            "tokens_per_s_per_rank": rank_tokens / job_time, "samples_per_s": plan.global_batch / job_time,
            "tokens_per_s_by_rank": rank_tps,
            "tflops_per_rank": rank_tokens / job_time * settings.flops_per_token / 1e12,
            "mfu": mfu(rank_tokens / job_time, settings.flops_per_token, settings.peak_tflops),
            "memory_bytes": [r[1] for r in per_rank], "peak_memory_bytes": [r[2] for r in per_rank],
            "memory_kind": kind,
        }
        if states is not None:
            emit({"type": "model_states", "step": step, "per_rank": [r[3] for r in per_rank]})
        emit(record)
