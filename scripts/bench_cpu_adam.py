"""The host's ZeRO-Offload CPU Adam rate, as a node's ranks share it: the figure `dsbench plan --cpu-adam-rate` takes.

Under ZeRO-Offload every rank of a node steps its partition with DeepSpeedCPUAdam on the same host at the same
time (after the step's last backward). This starts R processes, as a node's R ranks, each with a partition of N
parameters (fp32 weights, gradients and Adam's two moments: 16 bytes each), lets them step together S times after W
warm-up steps, and reports the node's rate: R x N parameters over the slowest rank's step, the median over the
measured steps with its p10-p90 spread. Give N about your partition (parameters / data-parallel ranks): a partition
that fits the host's caches steps faster than one that streams from memory. ``--threads T`` sets each rank's
OpenMP threads (OMP_NUM_THREADS and torch's); left out, each rank takes the default, every core, as DeepSpeed's
launcher leaves it (torchrun sets 1). ``--compare-ranks`` measures one rank first, side by side in the same run, and
prints the ratio: how much of one rank's rate R ranks keep (docs/planner.md, ZeRO-Offload on GPUs).

    DS_ACCELERATOR=cpu python scripts/bench_cpu_adam.py --ranks 8 --params 8.4e8 --compare-ranks
    DS_ACCELERATOR=cpu python scripts/bench_cpu_adam.py --ranks 2 --params 2e8 --threads 1
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import statistics
import sys
import time
from typing import Any

import script_args

COUNT = script_args.positive(int)


def node_rate(step_times: list[list[float]], params_per_rank: int) -> dict[str, float]:
    """The node's rate from each rank's step times (rank by step, the steps taken together): at each step the node
    waits for its slowest rank, so the rate is ranks x params over that step's longest time; the median over the
    steps, with the 10th and 90th percentiles of the rates."""
    if not step_times or any(len(times) != len(step_times[0]) for times in step_times) or not step_times[0]:
        raise ValueError("every rank needs the same, non-zero number of step times")
    node = [max(times) for times in zip(*step_times, strict=True)]
    rates = sorted(len(step_times) * params_per_rank / t for t in node)
    cut = statistics.quantiles(rates, n=10, method="inclusive") if len(rates) > 1 else [rates[0]] * 9
    return {"median": statistics.median(rates), "p10": cut[0], "p90": cut[-1], "steps": len(rates)}


def _rank(params: int, steps: int, warmup: int, threads: int | None, barrier: Any, out: Any) -> None:
    """One rank: its partition stepped by DeepSpeedCPUAdam, each step started with the others (a barrier: the
    sync point a node's ranks reach together after the step's last backward)."""
    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch

    if threads:
        torch.set_num_threads(threads)
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    from dsbench.worker.cpuanswer import ask_the_cpu_once

    ask_the_cpu_once()  # py-cpuinfo's answer read from beside the JIT builds, as a dsbench rank reads it (2 s a rank)

    weight = torch.nn.Parameter(torch.zeros(params))
    weight.grad = torch.full((params,), 1e-3)
    optimizer = DeepSpeedCPUAdam([weight], lr=1e-4)
    times = []
    for _ in range(warmup + steps):
        barrier.wait()  # sync point: every rank starts the step together, as after the step's last backward
        start = time.perf_counter()
        optimizer.step()
        times.append(time.perf_counter() - start)
    out.put(times[warmup:])


def measure(ranks: int, params: int, steps: int, warmup: int, threads: int | None) -> dict[str, float]:
    """Start the ranks, wait for them, and return the node's rate (:func:`node_rate`)."""
    context = mp.get_context("spawn")
    barrier, out = context.Barrier(ranks), context.Queue()
    procs = [context.Process(target=_rank, args=(params, steps, warmup, threads, barrier, out)) for _ in range(ranks)]
    for proc in procs:
        proc.start()
    times: list[list[float]] = []
    try:
        while len(times) < ranks:
            try:
                times.append(out.get(timeout=1))
            except queue.Empty:
                failed = [proc.exitcode for proc in procs if proc.exitcode]
                if failed:  # the others wait at the barrier for it: stop them
                    raise SystemExit(f"error: a rank exited with {failed[0]} (its error is above)") from None
    finally:
        for proc in procs:
            if proc.is_alive() and len(times) < ranks:
                proc.terminate()
            proc.join()
    return node_rate(times, params)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=COUNT, default=os.cpu_count() and min(8, os.cpu_count()) or 1)
    parser.add_argument("--params", type=COUNT, default=int(2e8), help="parameters per rank")
    parser.add_argument("--steps", type=COUNT, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=COUNT, help="OpenMP threads per rank [the default: every core]")
    parser.add_argument("--compare-ranks", action="store_true", help="measure one rank first, in the same run")
    args = parser.parse_args()
    if args.warmup < 0:
        parser.error("--warmup must be 0 or more")
    memory = 16 * args.params * args.ranks
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if memory > 0.8 * host:  # the ranks' fp32 weights, gradients and two moments, beside what the host runs
        parser.error(f"--ranks {args.ranks} x --params {args.params:.3g} need {memory / 2**30:.1f} GiB of fp32 states; "
                     f"the host has {host / 2**30:.1f} GiB: give fewer parameters per rank")
    print(f"{args.ranks} rank(s) x {args.params:.3g} parameters ({memory / 2**30:.1f} GiB of fp32 states), "
          f"{args.threads or 'default'} thread(s) each; {args.steps} steps after {args.warmup}")
    results = {}
    for ranks in ([1] if args.compare_ranks and args.ranks > 1 else []) + [args.ranks]:
        rate = measure(ranks, args.params, args.steps, args.warmup, args.threads)
        results[ranks] = rate
        print(f"{ranks} rank(s): {rate['median']:.3g} parameters/s for the node (p10-p90 {rate['p10']:.3g}-"
              f"{rate['p90']:.3g}, {rate['steps']} steps; wall clock of the slowest rank's DeepSpeedCPUAdam.step)")
    if len(results) == 2:
        print(f"{args.ranks} ranks keep {results[args.ranks]['median'] / results[1]['median']:.0%} of one rank's "
              "rate (medians, measured side by side)")
    print(f"dsbench plan ... --cpu-adam-rate {results[args.ranks]['median']:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
