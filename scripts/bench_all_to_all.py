"""gloo's all-to-all beside its all-gather, at the sizes of Ulysses' exchanges: is the planner's stand-in fair?

The CPU planner prices DeepSpeed Ulysses' all-to-alls at the profile's all-gather figures, since calibrate does not
measure all-to-all (dsbench/plan/comm.py ``ulysses_comm``). This times both on the same ranks, size by size: the
median of ``--samples`` calls of ``all_to_all_single`` and then of the flat all-gather calibrate times
(``all_gather_single``), each rank sending the same buffer, every call after a barrier (sync point), after 3
warm-up calls.

    torchrun --nproc-per-node 2 scripts/bench_all_to_all.py            # 4 KiB .. 1 MiB, 30 samples each
    torchrun --nproc-per-node 2 scripts/bench_all_to_all.py --samples 100
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial

import torch
import torch.distributed as dist

SIZES = (4096, 16384, 65536, 262144, 1048576)
"""Bytes per rank: llama-tiny's per-layer Ulysses buffers at seq 128 are tens of KiB."""


def median_us(call, samples: int) -> float:
    for _ in range(3):
        call()
    times = []
    for _ in range(samples):
        dist.barrier()  # sync point: every rank starts the call together
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=30)
    args = p.parse_args()
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    # the flat all-gather calibrate times (torch 2.13 renamed all_gather_into_tensor; the old name warns per call)
    gather_into = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    if dist.get_rank() == 0:
        print(f"gloo, {world} ranks, median of {args.samples} calls each (us)")
        print(f"{'bytes per rank':>15} {'all_to_all_single':>18} {'all_gather':>11} {'ratio':>6}")
    for size in SIZES:
        count = size // 4
        send, received, gathered = torch.randn(count), torch.empty(count), torch.empty(count * world)
        a2a = median_us(partial(dist.all_to_all_single, received, send), args.samples)
        gather = median_us(partial(gather_into, gathered, send), args.samples)
        if dist.get_rank() == 0:
            print(f"{size:>15,} {a2a:>18,.0f} {gather:>11,.0f} {a2a / gather:>6.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
