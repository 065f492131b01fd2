"""Harness overhead, end to end: the same steps trained by a minimal DeepSpeed loop and by ``dsbench.train``.

Both run under the deepspeed launcher with the same rendered config, model, batch and step count. The
figure compares each one's wall-clock window over the same measured steps (first measured step's start
to last step's end, all ranks and the device synchronised at both ends, everything each loop does in
between included), never their own timed regions. Runs are interleaved (A B A B ...) so machine drift
hits both alike; the ratio is dsbench's median window over the minimal loop's (goal: <= 1.02).

    python scripts/bench_harness_overhead.py --repeats 3 --steps 30 --model gpt2-mini            # 2 CPU ranks
    python scripts/bench_harness_overhead.py --model gpt2 --precision bf16 --micro-batch 16 --seq-len 1024  # 1 GPU
    python scripts/bench_harness_overhead.py --strategy ddp --compile --fused-optimizer          # native, torchrun

The native strategies (``--strategy ddp|fsdp``) are measured against scripts/minimal_native_loop.py, both started
by torchrun, with the same speed options (``--compile``, ``--fused-optimizer``) on both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def deepspeed_cmd(port: int, module_args: list[str], ranks: int) -> list[str]:
    return [str(Path(sys.executable).parent / "deepspeed") if (Path(sys.executable).parent / "deepspeed").exists()
            else "deepspeed", "--num_gpus", str(ranks), "--master_port", str(port), *module_args]


def window_s(folder: Path) -> float:
    """The run's measured window by the wall clock, through dsbench's one reader of summary.json."""
    from dsbench.run_record import read_summary

    summary = read_summary(folder)
    if summary is None or summary.throughput is None:
        sys.exit(f"{folder}: no finished run's summary")
    return summary.throughput.window_s


def run(argv: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"failed ({done.returncode}): {' '.join(argv)}\n{done.stdout[-2000:]}{done.stderr[-3000:]}")


def main() -> int:
    gpu = Path("/dev/nvidia0").exists()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--model", default="gpt2-mini")
    p.add_argument("--ranks", type=int, default=1 if gpu else 2)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--zero", type=int, default=2)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--strategy", default="deepspeed", choices=["deepspeed", "ddp", "fsdp"])
    p.add_argument("--compile", action="store_true", help="torch.compile on both sides")
    p.add_argument("--fused-optimizer", action="store_true", help="torch AdamW fused=True on both sides (native)")
    args = p.parse_args()
    if args.strategy != "deepspeed" and args.precision != "fp32":
        sys.exit("--strategy ddp|fsdp is measured in fp32 (the minimal native loop has no autocast)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if not gpu:
        env.update(DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    work = Path(tempfile.mkdtemp(prefix="dsbench-overhead-"))
    if args.strategy != "deepspeed":
        return native(args, env, work)
    config = work / "ds_config.json"
    run([sys.executable, "-m", "dsbench", "render", "--zero", str(args.zero), "--world-size", str(args.ranks),
         "--micro-batch", str(args.micro_batch), "--model", args.model, "--precision", args.precision,
         "-o", str(config)], env)
    common = ["--deepspeed_config", str(config), "--model", args.model, "--steps", str(args.steps),
              "--warmup", str(args.warmup), "--seq-len", str(args.seq_len), *(["--compile"] if args.compile else [])]
    minimal, harness = [], []
    for repeat in range(args.repeats):
        out = work / f"minimal-{repeat}.json"
        run(deepspeed_cmd(29800 + repeat, [str(ROOT / "scripts" / "minimal_ds_loop.py"), *common, "--out", str(out)],
                          args.ranks), env)
        minimal.append(json.loads(out.read_text())["window_s"])
        folder = work / f"dsbench-{repeat}"
        run(deepspeed_cmd(29900 + repeat, ["--module", "dsbench.train", *common, "--out", str(folder), "--quiet"],
                          args.ranks), env)
        harness.append(window_s(folder))
    return report(args, minimal, harness)


def torchrun_cmd(port: int, ranks: int, target: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks), "--master-port", str(port),
            *target]


def native(args: argparse.Namespace, env: dict[str, str], work: Path) -> int:
    """ddp / fsdp: scripts/minimal_native_loop.py against ``dsbench.train --strategy ...``, both under torchrun."""
    options = [*(["--compile"] if args.compile else []), *(["--fused-optimizer"] if args.fused_optimizer else [])]
    common = ["--strategy", args.strategy, "--model", args.model, "--micro-batch", str(args.micro_batch),
              "--steps", str(args.steps), "--warmup", str(args.warmup), "--seq-len", str(args.seq_len), *options]
    minimal, harness = [], []
    for repeat in range(args.repeats):  # interleaved: A B A B ...
        out = work / f"minimal-{repeat}.json"
        run(torchrun_cmd(29800 + repeat, args.ranks, [str(ROOT / "scripts" / "minimal_native_loop.py"), *common,
                                                      "--out", str(out)]), env)
        minimal.append(json.loads(out.read_text())["window_s"])
        folder = work / f"dsbench-{repeat}"
        run(torchrun_cmd(29900 + repeat, args.ranks, ["-m", "dsbench.train", *common, "--out", str(folder),
                                                      "--quiet"]), env)
        harness.append(window_s(folder))
    return report(args, minimal, harness)


def report(args: argparse.Namespace, minimal: list[float], harness: list[float]) -> int:
    a, b = statistics.median(minimal), statistics.median(harness)
    print(json.dumps({"strategy": args.strategy, "compile": args.compile, "fused_optimizer": args.fused_optimizer,
                      "model": args.model, "ranks": args.ranks, "zero": args.zero, "precision": args.precision,
                      "micro_batch": args.micro_batch, "seq_len": args.seq_len, "repeats": args.repeats,
                      "measured_steps": args.steps - args.warmup, "warmup": args.warmup,
                      "clock": "wall clock over the measured window, end to end (both loops)",
                      "minimal_window_s": minimal, "dsbench_window_s": harness,
                      "per_repeat_ratio": [h / m for h, m in zip(harness, minimal, strict=True)],
                      "ratio_dsbench_over_minimal": b / a}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
