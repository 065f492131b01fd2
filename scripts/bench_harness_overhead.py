"""Harness overhead: the same ZeRO-2 config trained by a minimal DeepSpeed loop and by ``dsbench.train``.

Both run under the deepspeed launcher with the same rendered config, model and step count; runs are
interleaved (A B A B ...) so machine drift hits both alike. The figure is the ratio of median step
times, dsbench / minimal, each over the steps after warm-up of every repeat (goal: <= 1.02).

    python scripts/bench_harness_overhead.py --repeats 3 --steps 30 --model gpt2-mini
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
    return [str(Path(sys.executable).parent / "deepspeed"), "--num_gpus", str(ranks), "--master_port", str(port),
            *module_args]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--model", default="gpt2-mini")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--micro-batch", type=int, default=4)
    args = p.parse_args()
    env = {**os.environ}
    if not Path("/dev/nvidia0").exists():
        env.update(DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    work = Path(tempfile.mkdtemp(prefix="dsbench-overhead-"))
    config = work / "ds_config.json"
    subprocess.run([sys.executable, "-m", "dsbench", "render", "--zero", "2", "--world-size", str(args.ranks),
                    "--micro-batch", str(args.micro_batch), "--model", args.model, "-o", str(config)],
                   check=True, env=env, cwd=ROOT)
    minimal, harness = [], []
    for repeat in range(args.repeats):
        out = work / f"minimal-{repeat}.json"
        subprocess.run(deepspeed_cmd(29800 + repeat, [str(ROOT / "scripts" / "minimal_ds_loop.py"),
                                                       "--deepspeed_config", str(config), "--model", args.model,
                                                       "--steps", str(args.steps), "--out", str(out)], args.ranks),
                       check=True, env=env, cwd=ROOT, capture_output=True)
        minimal += json.loads(out.read_text())["step_times"][args.warmup:]
        run = work / f"dsbench-{repeat}"
        subprocess.run(deepspeed_cmd(29900 + repeat, ["--module", "dsbench.train", "--deepspeed_config", str(config),
                                                      "--model", args.model, "--steps", str(args.steps),
                                                      "--warmup", str(args.warmup), "--out", str(run), "--quiet"],
                                     args.ranks), check=True, env=env, cwd=ROOT, capture_output=True)
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        # rank 0's own step time, as the minimal loop records rank 0
        harness += [r["step_time_per_rank_s"][0] for r in records if r.get("type") == "step" and not r["warmup"]]
    a, b = statistics.median(minimal), statistics.median(harness)
    print(json.dumps({"model": args.model, "ranks": args.ranks, "zero": 2, "repeats": args.repeats,
                      "steps_per_repeat": args.steps, "warmup": args.warmup,
                      "minimal_step_ms": {"median": a * 1e3, "min": min(minimal) * 1e3, "max": max(minimal) * 1e3},
                      "dsbench_step_ms": {"median": b * 1e3, "min": min(harness) * 1e3, "max": max(harness) * 1e3},
                      "ratio_dsbench_over_minimal": b / a}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
