"""Activation memory per rank, predicted vs measured (issue 28): with and without sequence parallelism, selective and
full recompute and the vocabulary-parallel loss, on llama-tiny and a wider Llama (hidden 256, so the layers outweigh
the logits).

Measured: each run's ``saved_activations`` (the unique storages that saved-tensor hooks see in the first step,
parameters excluded, dsbench/worker/state_bytes.py), one micro-batch per step, fp32, 2 CPU ranks (torch_tp) or one
(single). Predicted: dsbench/plan/saved.py from the run header's model shape and settings, nothing fitted.

    python scripts/bench_activation_memory.py                   # launches 13 short runs (about 3 minutes)
    python scripts/bench_activation_memory.py --out runs/act --json tests/data/activations/measured.json
    python scripts/bench_activation_memory.py --from tests/data/activations/measured.json   # the table only
    python scripts/bench_activation_memory.py --only heads_single,heads_tp2,heads_tp2_sp \
        --json tests/data/activations/measured_head_dim.json   # the runs of a model whose heads are wider

The ``heads`` model (since 2026-11-30) is a Mistral whose 4 heads are 128 wide on a hidden size of 256 (Mistral-Nemo's
layout: 32 heads of 128 on 5120), so q, k, v and the attention's output are not the hidden size wide; ``qk`` is the
same as a Qwen3, which also normalises each query and key head (``--only qk_single,qk_tp2,qk_tp2_sp``); ``olmo``
(since 2026-12-01) the wide model as an OLMo-2, split by torch_tp (``--only olmo_single,olmo_tp2,olmo_tp2_sp``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsbench.models import ModelShape
from dsbench.plan.saved import saved_activation_bytes

ROOT = Path(__file__).resolve().parents[1]
WIDE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 4096, "hidden_size": 256,
        "intermediate_size": 688, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 512, "tie_word_embeddings": False, "rms_norm_eps": 1e-6}
"""A Llama wider than llama-tiny (hidden 256, FFN 688) with its 4096-token vocabulary: the layers hold more than the
loss's log-softmax here, so the parts that sequence parallelism and recompute change show."""
HEADS = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": 4096, "hidden_size": 256,
         "intermediate_size": 688, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 128, "max_position_embeddings": 512, "tie_word_embeddings": False, "rms_norm_eps": 1e-6}
"""WIDE's Mistral twin with heads of 128 (q_proj 256 -> 512, k_proj and v_proj 256 -> 256)."""
QK = {**HEADS, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "use_sliding_window": False}
"""HEADS as a Qwen3: the same heads, each query and key head normalised (q_norm, k_norm) before RoPE."""
OLMO = {"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 4096, "hidden_size": 256,
        "intermediate_size": 688, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 512, "tie_word_embeddings": False, "rms_norm_eps": 1e-6}
"""WIDE as an OLMo-2: q_norm and k_norm over the whole projections, its norms after attention and the MLP (since
2026-12-01, when torch_tp began to split it: each rank's norms reduce their mean square over the TP ranks)."""
MODELS = {"wide": (WIDE, "llama-wide-256"), "heads": (HEADS, "mistral-heads-128"), "qk": (QK, "qwen3-heads-128"),
          "olmo": (OLMO, "olmo2-wide-256")}
TP2 = ["--strategy", "torch_tp", "--tp", "2", "--num-gpus", "2"]
SINGLE = ["--strategy", "single", "--num-gpus", "1"]
RUNS = {  # name -> (model: "tiny" or "wide", launch flags)
    "single": ("tiny", SINGLE), "single_selective": ("tiny", [*SINGLE, "--recompute", "selective"]),
    "single_full": ("tiny", [*SINGLE, "--recompute", "full"]),
    "tp2": ("tiny", TP2), "tp2_sp": ("tiny", [*TP2, "--sequence-parallel"]),
    "tp2_selective": ("tiny", [*TP2, "--recompute", "selective"]),
    "tp2_sp_selective": ("tiny", [*TP2, "--sequence-parallel", "--recompute", "selective"]),
    "tp2_sp_lp": ("tiny", [*TP2, "--sequence-parallel", "--loss-parallel"]),
    "wide_single": ("wide", SINGLE), "wide_tp2": ("wide", TP2), "wide_tp2_sp": ("wide", [*TP2, "--sequence-parallel"]),
    "wide_tp2_sp_selective": ("wide", [*TP2, "--sequence-parallel", "--recompute", "selective"]),
    "wide_tp2_sp_lp": ("wide", [*TP2, "--sequence-parallel", "--loss-parallel"]),
    "heads_single": ("heads", SINGLE), "heads_tp2": ("heads", TP2),
    "heads_tp2_sp": ("heads", [*TP2, "--sequence-parallel"]),
    "qk_single": ("qk", SINGLE), "qk_tp2": ("qk", TP2), "qk_tp2_sp": ("qk", [*TP2, "--sequence-parallel"]),
    "olmo_single": ("olmo", SINGLE), "olmo_tp2": ("olmo", TP2), "olmo_tp2_sp": ("olmo", [*TP2, "--sequence-parallel"]),
}


def measure(out: Path, only: list[str] | None = None) -> list[dict[str, Any]]:
    """Launch every run (or those named in ``only``; one micro-batch of 2 per step, 2 steps) and read its header and
    saved bytes."""
    folders = {}
    for key, (config, _) in MODELS.items():
        folders[key] = Path(tempfile.mkdtemp(prefix=f"dsbench-{key}-"))
        (folders[key] / "config.json").write_text(json.dumps(config))
    rows = []
    for name, (model, flags) in RUNS.items():
        if only and name not in only:
            continue
        folder = out / name
        argv = [sys.executable, "-m", "dsbench", "launch", "--launcher", "torchrun", "--model",
                "llama-tiny" if model == "tiny" else str(folders[model]), *flags, "--micro-batch", "2", "--run-dir",
                str(folder), "--", "--steps", "2", "--warmup", "1", "--quiet"]
        print("$ " + " ".join(argv[2:]), flush=True)
        if subprocess.run(argv, cwd=ROOT).returncode != 0:
            sys.exit(f"{name}: the launch failed (log: {folder}/launch.log)")
        records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        header = records[0]
        states = next(r for r in records if r["type"] == "model_states")["per_rank"]
        shown = {"wide": "WIDE_LLAMA_DIR", "heads": "HEADS_MISTRAL_DIR", "qk": "QK_QWEN3_DIR", "olmo": "OLMO2_DIR"}
        command = " ".join(argv[3:])
        for key, folder_of in folders.items():
            command = command.replace(str(folder_of), shown[key])
        rows.append({"name": name, "command": "dsbench " + command,
                     "model": {**header["model"], "name": "llama-tiny" if model == "tiny" else MODELS[model][1],
                               "path": None, "source": "preset" if model == "tiny" else "local"},
                     "seq_len": header["seq_len"], "micro_batch": header["micro_batch"],
                     "tp": header["tp"], "sequence_parallel": header["sequence_parallel"],
                     "loss_parallel": header["loss_parallel"], "recompute": header["recompute"],
                     "measured_bytes_per_rank": [rank["saved_activations"] for rank in states]})
    return rows


def predicted(row: dict[str, Any]) -> float:
    """The model's bytes for a stored row (what the hooks see: the block being recomputed is not among them)."""
    shape = ModelShape(**{k: v for k, v in row["model"].items() if k in ModelShape.__dataclass_fields__})
    return saved_activation_bytes(shape, row["seq_len"], row["micro_batch"], tp=row["tp"],
                                  sequence_parallel=row["sequence_parallel"], loss_parallel=row["loss_parallel"],
                                  recompute=row["recompute"]).hooked


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| run | model | tp | SP | loss-parallel | recompute | measured MiB/rank | predicted MiB/rank | error |",
             "|---|---|---:|---|---|---|---:|---:|---:|"]
    for row in rows:
        measured = max(row["measured_bytes_per_rank"])
        guess = predicted(row)
        lines.append(f"| {row['name']} | {row['model']['name']} | {row['tp']} | {row['sequence_parallel']} | "
                     f"{row['loss_parallel']} | {row['recompute']} | {measured / 2**20:.3f} | {guess / 2**20:.3f} | "
                     f"{(guess - measured) / measured:+.2%} |")
    return "\n".join(lines)


def measured_or_stored(doc: str, name: str, measure: Callable[..., list[dict[str, Any]]],
                       runs: list[str] | None = None) -> list[dict[str, Any]]:
    """A bench's rows from ``--from FILE``, or measured into ``--out`` (default runs/NAME-TIME) and, with ``--json``,
    written there with the date and the script that measured them (``doc``: the script's docstring). ``runs``: the
    run names ``--only`` may choose from (passed to ``measure`` as ``only``)."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0])
    p.add_argument("--out", type=Path, help=f"run folder [runs/{name}-TIME]")
    p.add_argument("--json", type=Path, help="also write the measured rows here (a new file: never replaced)")
    p.add_argument("--from", dest="done", type=Path, help="a stored rows file: the table only, nothing run")
    if runs:
        p.add_argument("--only", help=f"comma-separated runs of {', '.join(runs)} [all]")
    args = p.parse_args()
    only = [n for n in (getattr(args, "only", None) or "").split(",") if n]
    unknown = [n for n in only if n not in (runs or [])]
    if unknown:
        sys.exit(f"--only {unknown[0]}: not a run of this bench ({', '.join(runs or [])})")
    if args.json and args.json.exists():
        sys.exit(f"--json {args.json} exists: choose a new file (stored measurements are never replaced)")
    if args.done:
        try:
            return json.loads(args.done.read_text())["rows"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"--from {args.done}: not a stored rows file ({type(e).__name__}: {e})")
    out = args.out or ROOT / "runs" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    rows = measure(out, only=only) if only else measure(out)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"measured": time.strftime("%Y-%m-%d %H:%M"),
                                         "how": f"python scripts/{Path(sys.argv[0]).name}", "rows": rows},
                                        indent=1) + "\n")
    return rows


def main() -> None:
    print(table(measured_or_stored(__doc__, "activations", measure, runs=list(RUNS))))


if __name__ == "__main__":
    main()
