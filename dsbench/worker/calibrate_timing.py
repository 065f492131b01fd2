"""How ``dsbench calibrate`` times a piece of work: the device synchronised before each clock read, repeats until a
minimum duration, works interleaved so that drift of the machine falls on all, medians with their spread."""

from __future__ import annotations

import statistics
import time
from typing import Any


def sync_device(device: str) -> None:
    """Wait for queued GPU work before reading the clock (nothing to wait for on CPU)."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def rate(work: Any, device: str, repeats: int, min_s: float = 0.05, calls: int | None = None) -> dict[str, float]:
    """Seconds per call of ``work``: calls are batched so that one timed batch lasts at least ``min_s`` (or
    ``calls`` per batch, which every rank of a collective must agree on); the median (and p10/p90) over
    ``repeats`` batches after a warm-up call."""
    work()
    sync_device(device)
    if calls is None:
        started = time.perf_counter()
        work()
        sync_device(device)
        calls = max(1, int(min_s / max(time.perf_counter() - started, 1e-6)))
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(calls):
            work()
        sync_device(device)
        samples.append((time.perf_counter() - started) / calls)
    return summary_of(samples, calls)


def interleaved(works: dict[str, Any], comm: Any, device: str, repeats: int, calls: int) -> dict[str, Any]:
    """Seconds per call of each of ``works``, timed in ``repeats`` interleaved rounds (each work once per round,
    ``calls`` calls per sample) and summarised over the rounds: on shared cores the speed drifts over seconds, and a
    work timed in one burst would carry one moment's drift into a difference of two works. Each work may hold
    collectives: every rank runs the same works in the same order."""
    for work in works.values():
        work()  # warm-up: first calls allocate, build and register hooks
    sync_device(device)
    samples: dict[str, list[float]] = {name: [] for name in works}
    for _ in range(repeats):
        for name, work in works.items():
            comm.barrier()  # sync point: every rank starts the sample together
            started = time.perf_counter()
            for _ in range(calls):
                work()
            sync_device(device)
            samples[name].append((time.perf_counter() - started) / calls)
    return {name: summary_of(samples[name], calls) for name in works}


def summary_of(samples: list[float], calls: int) -> dict[str, float]:
    ordered = sorted(samples)
    return {"seconds": statistics.median(samples), "p10": ordered[len(ordered) // 10],
            "p90": ordered[-1 - len(ordered) // 10], "calls_per_sample": calls, "samples": len(samples)}
