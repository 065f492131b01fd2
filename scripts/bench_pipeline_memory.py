"""Micro-batches in flight on a pipeline's first stage, predicted vs measured (issue 28): 1F1B, interleaved 1F1B and
its zero-bubble form against GPipe, on 2 stages (a 4-layer Llama) and 4 stages (8 layers), fp32, CPU ranks.

Measured: rank 0's ``saved_activations_peak`` (the most saved-tensor bytes its autograd graph held at once in the
first step, parameters excluded: dsbench/worker/state_bytes.py) over one micro-batch's bytes,
which is GPipe's peak on the same stages over M (GPipe runs every forward before any backward: it holds all M).
Predicted: dsbench.plan.pipeline_peak.in_flight_micro_batches, nothing fitted. A second table puts every rank's
peak beside the planner's (plan/pipeline_peak.py over saved.py's inventory, the head and loss on the last stage).

    python scripts/bench_pipeline_memory.py --json tests/data/activations/pipeline_in_flight.json   # 24 runs, ~4 min
    python scripts/bench_pipeline_memory.py --from tests/data/activations/pipeline_in_flight.json  # the table only
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench_activation_memory import WIDE, measured_or_stored  # scripts/ is the script's own folder on sys.path

from dsbench.model_config import shape_from_config
from dsbench.plan.pipeline_peak import chunk_layers, in_flight_micro_batches, peaks
from dsbench.plan.saved import saved_activation_bytes

ROOT = Path(__file__).resolve().parents[1]
LLAMA = WIDE
"""bench_activation_memory.py's wide Llama (hidden 256), with 2 layers per stage: V = 2 chunks of one layer each."""
SCHEDULES = (("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("interleaved-zb", 2))
CASES = ((2, 3), (2, 4), (2, 6), (2, 8), (2, 12), (4, 8))
"""(stages, micro-batches): 3 is no multiple of the stages, so torch's one round of 3 lengthens the interleaved
warm-up; 4-12 show whether a schedule's peak grows with M; 4 stages on 4 ranks oversubscribe 2 cores, which memory
does not mind."""


def measure(out: Path) -> list[dict[str, Any]]:
    """Launch each (stages, M, schedule): one micro-batch of 1 per micro-step, 2 steps, the first one measured."""
    return [launch(out, stages, 2 * stages, LLAMA["vocab_size"], micro_batches, schedule, chunks)
            for stages, micro_batches in CASES for schedule, chunks in SCHEDULES]


def launch(out: Path, stages: int, layers: int, vocab: int, micro_batches: int, schedule: str,
           chunks: int) -> dict[str, Any]:
    """One torch_pp run of :data:`LLAMA` with ``layers`` layers and a ``vocab``-token vocabulary, and each rank's
    peak of saved tensors in its first step."""
    folder = out / f"pp{stages}-l{layers}-v{vocab}-m{micro_batches}-{schedule}"
    with tempfile.TemporaryDirectory(prefix="dsbench-pipe-llama-") as model:
        Path(model, "config.json").write_text(json.dumps({**LLAMA, "num_hidden_layers": layers,
                                                          "vocab_size": vocab}))
        argv = [sys.executable, "-m", "dsbench", "launch", "--launcher", "torchrun", "--strategy", "torch_pp",
                "--pipeline-stages", str(stages), "--num-gpus", str(stages), "--model", model,
                "--micro-batch", "1", "--grad-accum", str(micro_batches), "--pipeline-schedule", schedule,
                "--virtual-stages", str(chunks), "--run-dir", str(folder), "--", "--steps", "2", "--warmup", "1",
                "--quiet"]
        print("$ " + " ".join(argv[2:]), flush=True)
        if subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL).returncode != 0:
            sys.exit(f"{folder.name}: the launch failed (log: {folder}/launch.log)")
    summary = json.loads((folder / "summary.json").read_text())
    return {"stages": stages, "micro_batches": micro_batches, "schedule": schedule, "virtual_stages": chunks,
            "layers": layers, "vocab": vocab, "command": "dsbench " + " ".join(argv[3:]).replace(model, "LLAMA_DIR"),
            "peak_bytes_per_rank": summary["saved_activation_peak_bytes_per_rank"]}


def predicted(row: dict[str, Any]) -> float:
    return in_flight_micro_batches(row["stages"], row["micro_batches"], row["virtual_stages"],
                                   gpipe=row["schedule"] == "gpipe", zero_bubble=row["schedule"] == "interleaved-zb")


def in_flight(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], float]]:
    """Each row with its measured micro-batches in flight on rank 0: its peak over GPipe's peak / M."""
    gpipe = {(r["stages"], r["micro_batches"]): r["peak_bytes_per_rank"][0] for r in rows if r["schedule"] == "gpipe"}
    return [(r, r["peak_bytes_per_rank"][0] / (gpipe[r["stages"], r["micro_batches"]] / r["micro_batches"]))
            for r in rows]


def rank_peaks(row: dict[str, Any]) -> list[float]:
    """The planner's peak on every rank (bytes): saved.py's inventory of what each chunk keeps, the head and the
    loss on the last chunk, held in the order torch's schedule runs the passes (plan/pipeline_peak.py)."""
    shape = shape_from_config({**LLAMA, "num_hidden_layers": row["layers"],
                               "vocab_size": row.get("vocab", LLAMA["vocab_size"])}, "wide", "bench", None)
    chunks = row["stages"] * row["virtual_stages"]
    kept = [saved_activation_bytes(replace(shape, layers=n), 128, 1) for n in chunk_layers(row["layers"], chunks)]
    sizes = [k.layers + (k.head if v == chunks - 1 else 0.0) for v, k in enumerate(kept)]
    loss = [k.loss if v == chunks - 1 else 0.0 for v, k in enumerate(kept)]
    return [peak.total for peak in peaks(row["stages"], row["micro_batches"], sizes, loss, row["virtual_stages"],
                                         row["schedule"])]


def rank_table(rows: list[dict[str, Any]]) -> str:
    """Every rank's peak, measured / predicted MiB."""
    lines = ["| P | M | schedule | V | vocab | per rank: measured / predicted MiB | worst error |",
             "|---:|---:|---|---:|---:|---|---:|"]
    for row in rows:
        pairs = list(zip(row["peak_bytes_per_rank"], rank_peaks(row), strict=True))
        cells = ", ".join(f"{m / 2**20:.2f} / {p / 2**20:.2f}" for m, p in pairs)
        worst = max(((p - m) / m for m, p in pairs), key=abs)
        lines.append(f"| {row['stages']} | {row['micro_batches']} | {row['schedule']} | {row['virtual_stages']} | "
                     f"{row.get('vocab', LLAMA['vocab_size'])} | {cells} | {worst:+.1%} |")
    return "\n".join(lines)


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| P | M | schedule | V | rank 0 peak MiB | measured in flight | predicted | error |",
             "|---:|---:|---|---:|---:|---:|---:|---:|"]
    for row, measured in in_flight(rows):
        guess = predicted(row)
        lines.append(f"| {row['stages']} | {row['micro_batches']} | {row['schedule']} | {row['virtual_stages']} | "
                     f"{row['peak_bytes_per_rank'][0] / 2**20:.2f} | {measured:.2f} | {guess:.2f} | "
                     f"{(guess - measured) / measured:+.1%} |")
    return "\n".join(lines)


def main() -> None:
    rows = measured_or_stored(__doc__, "pipeline-memory", measure)
    print(table(rows) + "\n\n" + rank_table(rows))


if __name__ == "__main__":
    main()
