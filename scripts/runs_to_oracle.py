"""dsbench run folders (GPU runs) as rows of the oracle schema, so that `dsbench plan --replay` predicts them.

    python scripts/runs_to_oracle.py tests/data/runs/gpu-h100/compare-*/cells/* \
        tests/data/runs/gpu-h100-20261125/compare-*/cells/* > tests/data/oracles/dsbench-h100.csv

Step time is the wall clock over the measured window divided by its steps; peak memory is the run's
``torch.cuda.max_memory_allocated`` (the replay compares dsbench's rows with the model's allocated peak). Runs the
schema cannot describe (CPU offload, CPU runs, a GPU the profiles do not know) are left out, each named on stderr.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from dsbench.plan.replay import COLUMNS
from dsbench.records import header_of, read_records
from dsbench.run_record import RunHeader, read_summary

GPUS = {"H100 80GB HBM3": "h100-sxm", "H100 PCIe": None, "A100-SXM4-80GB": "a100-80g", "A100-SXM4-40GB": "a100-40g",
        "H200": "h200"}


def _gpu(summary_device: str) -> str | None:
    return next((kind for name, kind in GPUS.items() if name in summary_device), None)


def row_of(folder: Path, gpu_name: str, index: int) -> dict[str, object] | str:
    """The oracle row of one run folder, or why it has none."""
    header = RunHeader.from_record(header_of(read_records(folder / "metrics.jsonl")))
    summary = read_summary(folder)
    if summary is None or not summary.ok or summary.throughput is None or header.shape is None:
        return "not a finished run"
    zero = (header.ds_config or {}).get("zero_optimization", {})
    if (zero.get("offload_optimizer") or {}).get("device", "none") != "none":
        return "optimizer offload: the oracle schema has no offload column"
    kind = _gpu(gpu_name)
    if kind is None or not header.device.startswith("cuda"):
        return f"not on a GPU the profiles know ({gpu_name or header.device})"
    model = header.shape
    strategy = {"single": "ddp", "ddp": "ddp", "fsdp": "fsdp"}.get(header.engine) or f"zero{zero.get('stage', 0)}"
    window = summary.throughput
    # dsbench's single and DDP engines train fp32 weights under torch.autocast (worker/engines/native.py); the
    # replay reads the word from the note
    native = header.engine in ("single", "ddp") and header.precision != "fp32"
    autocast = "; autocast over fp32 weights" if native else ""
    return {"source": f"dsbench-{kind.split('-')[0]}", "row": index, "model": model["name"],
            "arch": "gpt" if model["arch"] == "gpt2" else "llama", "layers": model["layers"], "hidden": model["hidden"],
            "heads": model["heads"], "kv_heads": model["kv_heads"], "ffn": model["intermediate"],
            "vocab": model["vocab_size"], "seq_len": header.seq_len, "gpu": kind, "gpus": header.world_size,
            "gpus_per_node": header.world_size, "strategy": "ddp" if strategy == "zero0" else strategy,
            "tp": header.tp, "pp": 1, "cp": 1, "micro_batch": header.micro_batch,
            "global_batch": header.global_batch,
            "recompute": "full" if header.activation_checkpointing else "none", "sequence_parallel": 0,
            "precision": header.precision, "compile": int(bool(header.speed.compile)),
            "measured_step_s": round(window.step_s, 6),
            "measured_tokens_per_s_per_gpu": round(window.tokens_per_s_per_rank or window.tokens_per_s
                                                   / header.world_size, 1),
            "measured_peak_mem_gib": round(max(summary.peak_memory_bytes_per_rank) / 2**30, 3),
            "note": f"dsbench run {folder.name} of {(header.started_at or '')[:10]} (wall clock"
                    f" over {window.steps} measured steps; peak = "
                    f"torch.cuda.max_memory_allocated){autocast}; {gpu_name}"}


def main(folders: list[str]) -> int:
    gpu_name = ""
    writer = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    index = 0
    for name in folders:
        folder = Path(name)
        machine = next((p / "gpu.csv" for p in folder.parents if (p / "gpu.csv").exists()), None)
        if machine is not None:  # nvidia-smi's name, kept above the runs
            gpu_name = machine.read_text().splitlines()[1].split(",")[0]
        row = row_of(folder, gpu_name, index + 1)
        if isinstance(row, str):
            print(f"{folder}: left out: {row}", file=sys.stderr)
            continue
        index += 1
        writer.writerow(row)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
