"""What DeepSpeed ZeRO-2's gradient reductions cost on CPU ranks, taken apart (issue 27: the per-micro-step term
that the planner prices 20% low on gpt2-mini).

Start it with torchrun on 2 ranks, with the launches' environment (``DS_ACCELERATOR=cpu``, one thread per rank):

    DS_ACCELERATOR=cpu OMP_NUM_THREADS=1 torchrun --nproc-per-node 2 scripts/bench_zero_reductions.py

It measures, in interleaved rounds (each sample starts behind a barrier, median over ``--repeats`` samples):

1. **per reduction or per tensor**: a stack of 48 Linear(64, 64) (96 parameter tensors) under ZeRO-2, reduced in
   96 buckets (``reduce_bucket_size`` = 64², each tensor alone, as ``dsbench calibrate`` measures it) and in one
   bucket (``reduce_bucket_size`` 10⁸): the same tensors and bytes;
2. **the bucket's size**: the stack at width 64 and 128 (buckets of 4096 and 16384 elements, the second
   gpt2-mini's HF "auto" bucket), and at 8 and 256 rows of input (the compute between two reductions);
3. **the model**: ``--model`` under the ZeRO-2 config dsbench renders (``--micro-batch``, ``--grad-accum``), with
   every ``torch.distributed.all_reduce`` counted and timed on rank 0: calls per micro-step, and each call's median
   against the mean (a mean well above the median is time spent waiting for the other rank). The stack's
   all-reduces are timed the same way.

Each stack figure is the ZeRO-2 step less the same stack's plain forward+backward+AdamW step, over its reductions.
Prints a table; ``--out FILE`` also writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import time
from pathlib import Path
from typing import Any

import script_args

COUNT = script_args.positive(int)

DEPTH = 48
"""Linear layers in the stack: 96 parameter tensors, as many reductions when each fills its bucket."""


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=COUNT, default=9, help="samples per figure (median) [9]")
    parser.add_argument("--model", default="gpt2-mini", help="the model of part 3 [gpt2-mini]")
    parser.add_argument("--micro-batch", type=COUNT, default=2, help="part 3's micro-batch per rank [2]")
    parser.add_argument("--grad-accum", type=COUNT, default=4, help="part 3's micro-steps per step [4]")
    parser.add_argument("--seq-len", type=COUNT, default=128, help="part 3's sequence length [128]")
    parser.add_argument("--out", help="also write the figures to this JSON file (rank 0)")
    args = parser.parse_args()
    from dsbench.commands.options import check_seq_len
    from dsbench.errors import UserError

    try:  # the model resolves and has the positions, before any rank builds an engine
        check_seq_len(args.model, args.seq_len)
    except UserError as exc:
        parser.error(str(exc))
    if args.out and (Path(args.out).exists() or not Path(args.out).parent.is_dir()):  # nothing measured is replaced
        parser.error(f"--out {args.out}: give a new file in an existing folder")
    return args


class AllReduceTimer:
    """Every ``torch.distributed.all_reduce`` of this rank counted and timed while installed (DeepSpeed's torch
    backend looks the function up at each call), filed under :attr:`key`."""

    def __init__(self) -> None:
        import torch.distributed as dist

        self.dist, self.original, self.key = dist, dist.all_reduce, None
        self.calls: dict[Any, list[float]] = collections.defaultdict(list)

    def __enter__(self) -> AllReduceTimer:
        def timed(tensor: Any, *rest: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return self.original(tensor, *rest, **kwargs)
            finally:
                if self.key is not None:
                    self.calls[self.key].append(time.perf_counter() - start)

        self.dist.all_reduce = timed
        return self

    def __exit__(self, *exc: Any) -> None:
        self.dist.all_reduce = self.original

    def figures(self, key: Any, per: int) -> dict[str, float]:
        """Calls per ``per`` (a step or micro-step), the milliseconds in them, a call's median and mean."""
        calls = self.calls[key]
        return {"calls": len(calls) / per, "in_calls_ms": 1e3 * sum(calls) / per,
                "call_median_ms": 1e3 * statistics.median(calls), "call_mean_ms": 1e3 * statistics.fmean(calls)}


def _stack(width: int) -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(DEPTH)])


def _zero2(model: Any, bucket: int) -> Any:
    """The stack under ZeRO-2 as calibrate builds it (torch AdamW as the client optimizer), buckets of ``bucket``."""
    import deepspeed
    import torch

    config = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
              "zero_optimization": {"stage": 2, "reduce_bucket_size": bucket, "overlap_comm": True}}
    engine, *_ = deepspeed.initialize(model=model, config=config,
                                      optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4))
    return engine


def stack_figures(repeats: int, timer: AllReduceTimer) -> dict[str, Any]:
    """Part 1 and 2: milliseconds per reduction beyond the plain step, and the all-reduces of a step, per case."""
    import torch
    import torch.distributed as dist

    cases = {"96 buckets, width 64, 8 rows": (64, 64 * 64, 8), "1 bucket, width 64, 8 rows": (64, 10**8, 8),
             "96 buckets, width 128, 8 rows": (128, 128 * 128, 8),
             "96 buckets, width 128, 256 rows": (128, 128 * 128, 256)}
    engines = {name: _zero2(_stack(width), bucket) for name, (width, bucket, _) in cases.items()}
    plains = {}
    for width, _, rows in cases.values():
        model = _stack(width)
        plains[width, rows] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4), torch.randn(rows, width))
    samples: dict[Any, list[float]] = collections.defaultdict(list)

    def timed(key: Any, step: Any) -> None:
        dist.barrier()  # sync point: both ranks start the sample together
        timer.key, start = key, time.perf_counter()
        for _ in range(4):
            step()
        samples[key].append((time.perf_counter() - start) / 4)
        timer.key = None

    def engine_step(engine: Any, x: Any) -> Any:
        return lambda: (engine.backward(engine(x).square().mean()), engine.step())

    def plain_step(model: Any, optimizer: Any, x: Any) -> Any:
        return lambda: (model(x).square().mean().backward(), optimizer.step(), optimizer.zero_grad())

    for _ in range(repeats):  # interleaved rounds: the machine's drift falls on every case alike
        for name, (width, _, rows) in cases.items():
            timed(name, engine_step(engines[name], plains[width, rows][2]))
        for key, (model, optimizer, x) in plains.items():
            timed(key, plain_step(model, optimizer, x))
    for engine in engines.values():
        engine.destroy()
    out = {}
    for name, (width, bucket, rows) in cases.items():
        reductions = 1 if bucket > width * width * DEPTH else 2 * DEPTH
        extra = statistics.median(samples[name]) - statistics.median(samples[width, rows])
        out[name] = {"reductions": reductions, "extra_ms": 1e3 * extra, "ms_per_reduction": 1e3 * extra / reductions,
                     **timer.figures(name, 4 * repeats)}
    return out


def model_figures(args: argparse.Namespace, timer: AllReduceTimer) -> dict[str, Any]:
    """Part 3: the model's all-reduces per micro-step under dsbench's ZeRO-2 config, timed on this rank."""
    import deepspeed
    import torch
    import torch.distributed as dist

    from dsbench.configs.api import make_render_spec
    from dsbench.configs.render import render
    from dsbench.worker.model import build_model

    spec, shape = make_render_spec({"zero": 2, "micro_batch": args.micro_batch, "grad_accum": args.grad_accum,
                                    "world_size": dist.get_world_size()}, model=args.model)
    config, _ = render(spec)  # what `dsbench render --zero 2 --model M ...` writes: HF "auto" buckets for M
    model = build_model(shape, seed=1234)
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    ids = torch.randint(0, shape.vocab_size, (args.micro_batch, args.seq_len),
                        generator=torch.Generator().manual_seed(dist.get_rank()))
    steps, warmup, step_s, measured = 3 + args.repeats, 3, [], []
    for step in range(steps):
        dist.barrier()  # sync point: both ranks start the step together
        start = time.perf_counter()
        for micro in range(args.grad_accum):
            timer.key = ("model", step, micro) if step >= warmup else None  # each micro-step's calls apart
            if timer.key:
                measured.append(timer.key)
            engine.backward(engine(input_ids=ids, labels=ids).loss)
            engine.step()
        step_s.append(time.perf_counter() - start)
    timer.key = None
    engine.destroy()
    timer.calls["model"] = [call for key in measured for call in timer.calls[key]]
    # the first all-reduce of each micro-step (the backward's first bucket) against the others: where the wait sits
    first = [timer.calls[key][0] for key in measured if timer.calls[key]]
    rest = [call for key in measured for call in timer.calls[key][1:]]
    return {"model": shape.name, "micro_steps": len(measured), "step_ms": 1e3 * statistics.median(step_s[warmup:]),
            **timer.figures("model", len(measured)), "first_call_mean_ms": 1e3 * statistics.fmean(first),
            "other_calls_mean_ms": 1e3 * statistics.fmean(rest)}


def main() -> None:
    args = _parse()
    import deepspeed
    import torch.distributed as dist

    deepspeed.init_distributed(dist_backend="gloo")
    with AllReduceTimer() as timer:
        stack, model = stack_figures(args.repeats, timer), model_figures(args, timer)
    if dist.get_rank():
        return
    print("| stack under ZeRO-2 | reductions | extra ms per step | ms per reduction | all-reduces per step | "
          "ms in them | a call's median / mean ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, row in stack.items():
        print(f"| {name} | {row['reductions']} | {row['extra_ms']:.1f} | {row['ms_per_reduction']:.2f} | "
              f"{row['calls']:.0f} | {row['in_calls_ms']:.1f} | "
              f"{row['call_median_ms']:.2f} / {row['call_mean_ms']:.2f} |")
    print(f"\n{model['model']} under dsbench's ZeRO-2 config, {model['micro_steps']} micro-steps on rank 0: "
          f"{model['step_ms']:.1f} ms a step; per micro-step {model['calls']:.1f} all-reduces, "
          f"{model['in_calls_ms']:.1f} ms in them; a call's median {model['call_median_ms']:.2f} ms, its mean "
          f"{model['call_mean_ms']:.2f} ms; the first call of a micro-step {model['first_call_mean_ms']:.2f} ms on "
          f"average, the others {model['other_calls_mean_ms']:.2f} ms")
    if args.out:
        with open(args.out, "w") as file:
            json.dump({"stack": stack, "model": model, "repeats": args.repeats}, file, indent=1)


if __name__ == "__main__":
    main()
