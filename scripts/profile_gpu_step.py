"""Where one training step's time goes on a GPU: kernel time by kind, and the time the GPU sat idle.

The evidence behind the GPU time model's terms (dsbench/plan/gpu_time.py) on dsbench's own single-GPU runs. It
builds the model as ``dsbench.train`` does (dsbench.worker.model.build_model: random init, SDPA attention) and
steps it as one engine does at world size 1:

- ``single``: fp32 weights, bf16 autocast, torch's fused AdamW, gradient clipping at 1.0 (dsbench's native loop);
- ``zero1``/``zero2``/``zero3``: ``deepspeed.initialize`` with the DeepSpeed config dsbench rendered for the stored
  H100 runs (tests/data/runs/gpu-h100/compare-*/cells/zero*/ds_config.json, passed with --ds-config).

Two clocks, kept apart:
- ``wall_step_s``: the median wall-clock step of ``--steps`` unprofiled steps after ``--warmup`` (device
  synchronised around each step), the figure the stored runs report;
- under ``torch.profiler`` (``--profiled`` further steps): every CUDA kernel's duration summed by kind (name
  patterns below), the union of the kernel intervals (``busy``), and ``idle = span - busy``: time the GPU waited
  on the host (launch overhead, Python, hooks, synchronisation). The profiler slows the host, so its span is a
  separate, labelled figure.

Run on a GPU machine from the project root (DeepSpeed importable), one process per engine:
  python3 scripts/profile_gpu_step.py --model gpt2 --micro-batch 16 --seq-len 1024 --engine single --out a.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

KINDS = (  # first match wins; lower-case substrings of CUDA kernel names (cuBLAS/cuDNN/flash/torch/DeepSpeed)
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn")),
    ("gemm", ("gemm", "nvjet", "xmma", "cutlass", "cublas", "splitk")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("loss", ("softmax", "nll", "cross_entropy", "logsumexp")),
    ("norm", ("layer_norm", "layernorm", "rms", "norm_kernel")),
    ("reduce", ("reduce_kernel", "reduce_", "sum_")),
    ("copy", ("copy", "cast", "convert", "memcpy", "cat", "index")),
    ("nccl", ("nccl",)),
)


def kind_of(name: str) -> str:
    lowered = name.lower()
    for kind, patterns in KINDS:
        if any(pattern in lowered for pattern in patterns):
            return kind
    return "elementwise"


def union_us(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of [start, end) intervals (microseconds)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def build(args: argparse.Namespace):  # -> (step function, model)
    import torch

    from dsbench.model_config import resolve_model
    from dsbench.worker.model import build_model

    shape = resolve_model(args.model)
    model = build_model(shape, seed=1234)
    if args.engine == "single":
        model = model.cuda()
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)

        def step(batch):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=batch, labels=batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return step, shape
    import deepspeed

    for name, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                        ("MASTER_PORT", "29517")):
        os.environ.setdefault(name, value)
    deepspeed.init_distributed(dist_backend="nccl")
    with open(args.ds_config) as handle:
        config = json.load(handle)
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)

    def ds_step(batch):
        loss = engine(input_ids=batch, labels=batch).loss
        engine.backward(loss)
        engine.step()
    return ds_step, shape


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--micro-batch", type=int, required=True)
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--engine", choices=["single", "zero1", "zero2", "zero3"], required=True)
    p.add_argument("--ds-config")
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--profiled", type=int, default=2)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    step, shape = build(args)
    generator = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, shape.vocab_size, (args.micro_batch, args.seq_len), generator=generator).cuda()
               for _ in range(4)]
    walls = []
    for index in range(args.warmup + args.steps):
        torch.cuda.synchronize()  # each step timed alone: the device is idle at its start and end
        start = time.perf_counter()
        step(batches[index % 4])
        torch.cuda.synchronize()
        if index >= args.warmup:
            walls.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for index in range(args.profiled):
            step(batches[index % 4])
        torch.cuda.synchronize()
        profiled_wall = time.perf_counter() - start
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    by_kind: dict[str, float] = {}
    counts: dict[str, int] = {}
    top: dict[str, float] = {}
    for e in kernels:
        kind = kind_of(e.name)
        by_kind[kind] = by_kind.get(kind, 0.0) + e.time_range.elapsed_us()
        counts[kind] = counts.get(kind, 0) + 1
        top[e.name[:90]] = top.get(e.name[:90], 0.0) + e.time_range.elapsed_us()
    busy = union_us([(e.time_range.start, e.time_range.end) for e in kernels])
    span = (max(e.time_range.end for e in kernels) - min(e.time_range.start for e in kernels)) if kernels else 0.0
    n = args.profiled
    result = {
        "model": args.model, "engine": args.engine, "micro_batch": args.micro_batch, "seq_len": args.seq_len,
        "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "wall_step_s": {"median": statistics.median(walls), "min": min(walls), "max": max(walls), "n": len(walls),
                        "warmup": args.warmup},
        "profiled": {"steps": n, "wall_step_s": profiled_wall / n, "kernel_span_s": span / n / 1e6,
                     "busy_s": busy / n / 1e6, "idle_s": (span - busy) / n / 1e6,
                     "kernels_per_step": len(kernels) / n,
                     "by_kind_s": {k: v / n / 1e6 for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
                     "count_by_kind": {k: v / n for k, v in counts.items()},
                     "top_kernels_s": {k: v / n / 1e6 for k, v in sorted(top.items(), key=lambda kv: -kv[1])[:25]}},
        "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
        "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30,
    }
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=1)
    print(json.dumps({k: result[k] for k in ("model", "engine", "wall_step_s")}), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
