"""The pipeline bubble, measured: one step at P stages for M = 1, 2, 4, 8 micro-batches, idle share vs (P-1)/(M+P-1).

With ``--virtual-stages V`` torch_pp runs interleaved 1F1B, each rank V chunks, and the formula is
(P-1)/(V·M+P-1) (Narayanan et al. 2021 sec. 2.2); the span predicted from the measured per-stage compute t_s
becomes sum(t_s)/V + (M - 1/V)·max(t_s) (the fill and drain pass chunks of t_s/V). With ``--zero-bubble`` the
same chunks run under torch's ScheduleInterleavedZeroBubble, whose weight-gradient halves fill part of that
bubble (Qi et al. 2024); the formula columns stay interleaved 1F1B's, the measurement says what is left.

Each M is a real `dsbench launch` on CPU ranks (torch_pp with GPipe, whose bubble is 1F1B's and which also
runs M < P; or DeepSpeed's pipeline engine with --engine deepspeed). Every rank records, per step, its
forward/backward compute time and its time inside the pipeline schedule (to the flush, without the
optimizer step); a stage's idle share is 1 - compute / span, the span being the longest stage's.

Two predictions stand beside the measurement. (P-1)/(M+P-1) (GPipe, Huang et al. 2019; ../shared/seeds/000
and 004) assumes stages of equal work. With the measured per-micro-batch compute t_s of each stage, a
schedule takes the fill and drain of one micro-batch through every stage plus M-1 slots of the slowest:
span = sum(t_s) + (M-1)·max(t_s), and stage s idles 1 - M·t_s/span (for equal t_s this is the formula
above). What the measurement holds beyond that is communication.

The model is a local Llama shape of 12 equal blocks (the last stage also computes the 4096-word head and
the loss, so it works more), built with random weights; the micro-batch size is fixed, so a step with more
micro-batches trains more samples.

    python scripts/bench_pipeline_bubble.py --stages 2 --micro-batches 1,2,4,8
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
SHAPE = {"model_type": "llama", "vocab_size": 4096, "hidden_size": 256, "num_hidden_layers": 12,
         "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 1024,
         "max_position_embeddings": 256, "tie_word_embeddings": False}


def measure(engine: str, stages: int, micro_batches: int, micro_batch: int, seq_len: int, steps: int,
            model: Path, work: Path, virtual: int = 1, zero_bubble: bool = False) -> dict:
    """Launch one run; per rank, the median idle share over its measured steps."""
    folder = work / f"{engine}-v{virtual}{'-zb' if zero_bubble else ''}-m{micro_batches}"
    strategy = (["--strategy", "torch_pp", "--launcher", "torchrun"] if engine == "torch_pp"
                else ["--zero", "1"])
    schedule = ["--pipeline-schedule", "gpipe"] if engine == "torch_pp" else []
    if virtual > 1:
        schedule = ["--pipeline-schedule", "interleaved-zb" if zero_bubble else "interleaved", "--virtual-stages",
                    str(virtual)]
    argv = [sys.executable, "-m", "dsbench", "launch", *strategy, "--pipeline-stages", str(stages),
            "--model", str(model), "--micro-batch", str(micro_batch), "--grad-accum", str(micro_batches),
            "--num-gpus", str(stages), "--run-dir", str(folder), "--", "--steps", str(steps), "--warmup", "4",
            "--seq-len", str(seq_len), "--quiet", *schedule]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"failed: {' '.join(argv)}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    steps_ = [r for r in records if r["type"] == "step" and not r["warmup"]]
    # a pipeline step lasts until its last stage is done: each stage's idle share is of the longest span (the
    # last stage leaves the schedule before the first one's final backward ends; every stage starts together,
    # lined up by the previous step's gradient-norm all-reduce and loss broadcast)
    idle = [statistics.median(1 - s["pipeline_compute_s_per_rank"][r] / max(s["pipeline_span_s_per_rank"])
                              for s in steps_) for r in range(stages)]
    span = statistics.median(max(s["pipeline_span_s_per_rank"]) for s in steps_)
    # rank r is stage r here (one replica); per-micro-batch compute of each stage
    per_micro = [statistics.median(s["pipeline_compute_s_per_rank"][r] for s in steps_) / micro_batches
                 for r in range(stages)]
    predicted_span = sum(per_micro) / virtual + (micro_batches - 1 / virtual) * max(per_micro)
    predicted = [1 - micro_batches * t / predicted_span for t in per_micro]
    return {"micro_batches": micro_batches, "theory": (stages - 1) / (virtual * micro_batches + stages - 1),
            "idle_per_stage": idle, "idle_mean": statistics.mean(idle), "predicted_per_stage": predicted,
            "predicted_mean": statistics.mean(predicted), "span_ms": span * 1e3,
            "compute_ms_per_micro": [t * 1e3 for t in per_micro], "measured_steps": len(steps_)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", choices=["torch_pp", "deepspeed"], default="torch_pp")
    p.add_argument("--stages", type=int, default=2)
    p.add_argument("--micro-batches", default="1,2,4,8", help="comma list of M")
    p.add_argument("--micro-batch", type=int, default=1, help="samples per micro-batch")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--steps", type=int, default=10, help="steps per run (4 warm-up)")
    p.add_argument("--virtual-stages", type=int, default=1, help="torch_pp: interleaved 1F1B with V chunks per rank")
    p.add_argument("--zero-bubble", action="store_true", help="with --virtual-stages: torch's "
                   "ScheduleInterleavedZeroBubble over the same chunks (the formula columns stay interleaved 1F1B's)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dsbench-bubble-"))
    model = work / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(SHAPE))
    rows = [measure(args.engine, args.stages, int(m), args.micro_batch, args.seq_len, args.steps, model, work,
                    args.virtual_stages, args.zero_bubble) for m in args.micro_batches.split(",")]
    kind = "interleaved zero-bubble" if args.zero_bubble else "interleaved 1F1B"
    schedule = f"{kind}, V={args.virtual_stages}" if args.virtual_stages > 1 else "GPipe/1F1B"
    print(f"# pipeline bubble: {args.engine} ({schedule}), {args.stages} stages, micro-batch {args.micro_batch} x seq "
          f"{args.seq_len}, medians over {rows[0]['measured_steps']} steps after 4 warm-up, CPU ranks")
    print("| M | (P-1)/(V·M+P-1) | measured idle (mean of stages) | per stage | predicted from measured stage "
          "compute (per stage) | compute ms per micro-batch (per stage) | schedule span ms |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        def pct(xs: list[float]) -> str:
            return ", ".join(f"{x:.1%}" for x in xs)

        print(f"| {row['micro_batches']} | {row['theory']:.1%} | {row['idle_mean']:.1%} | {pct(row['idle_per_stage'])}"
              f" | {row['predicted_mean']:.1%} ({pct(row['predicted_per_stage'])}) | "
              f"{', '.join(f'{t:.1f}' for t in row['compute_ms_per_micro'])} | {row['span_ms']:.1f} |")
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
