"""The metrics schema shared by the training worker and the report (stdlib only).

A run directory holds ``metrics.jsonl`` (one ``header`` record, one ``step`` record per step, one
``model_states`` record) and ``summary.json``. Lines are written whole and flushed per step, so a
killed run leaves a readable prefix. :func:`summarize` is the only place warm-up exclusion and
spread are computed.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

SCHEMA = 1
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"


def flops_per_token(num_params: int, layers: int, hidden: int, seq_len: int) -> int:
    """Training FLOPs per token: 6N (forward + backward matmuls) + 12·L·h·s (attention scores and values).

    Source: PaLM (Chowdhery et al. 2022), Appendix B; the same estimate as nanoGPT's ``estimate_mfu``.
    Recomputation under activation checkpointing is not counted (model FLOPs, not hardware FLOPs).
    """
    return 6 * num_params + 12 * layers * hidden * seq_len


def mfu(tokens_per_s_per_rank: float, flops_token: int, peak_tflops: float | None) -> float | None:
    """Model FLOPs utilisation: achieved FLOP/s per rank over the rank's peak FLOP/s."""
    if not peak_tflops:
        return None
    return tokens_per_s_per_rank * flops_token / (peak_tflops * 1e12)


def scaling_efficiency(throughput_n: float, n: int, throughput_1: float) -> float:
    """N-rank throughput / (N x 1-rank throughput) (1.0 = linear scaling; ../shared/seeds/000)."""
    return throughput_n / (n * throughput_1)


def spread(values: list[float]) -> dict[str, float]:
    """Median, min, max, p10/p90 and the sample count of ``values``."""
    ordered = sorted(values)
    n = len(ordered)

    def quantile(q: float) -> float:
        pos = q * (n - 1)
        lo, hi = int(pos), min(int(pos) + 1, n - 1)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)

    return {"median": statistics.median(ordered), "min": ordered[0], "max": ordered[-1], "p10": quantile(0.1),
            "p90": quantile(0.9), "n": n}


def read_records(path: Path) -> list[dict[str, Any]]:
    """All complete records of a metrics file (a torn last line from a killed run is skipped)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def summarize(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Summary of a run: medians and spread over measured (non-warm-up) steps."""
    records = list(records)
    header = next((r for r in records if r.get("type") == "header"), {})
    steps = [r for r in records if r.get("type") == "step"]
    measured = [r for r in steps if not r.get("warmup")]
    states = next((r for r in records if r.get("type") == "model_states"), None)
    out: dict[str, Any] = {"schema": SCHEMA, "strategy": header.get("strategy"), "world_size": header.get("world_size"),
                           "steps": len(steps), "measured_steps": len(measured),
                           "warmup_steps": len(steps) - len(measured)}
    if not measured:
        return {**out, "status": "no-measured-steps"}
    out.update({
        "status": "ok",
        "step_time_s": spread([r["step_time_s"] for r in measured]),
        "tokens_per_s": spread([r["tokens_per_s"] for r in measured]),
        "tokens_per_s_per_rank": statistics.median(r["tokens_per_s_per_rank"] for r in measured),
        "samples_per_s": statistics.median(r["samples_per_s"] for r in measured),
        "tflops_per_rank": statistics.median(r["tflops_per_rank"] for r in measured),
        "mfu": None if measured[0].get("mfu") is None else spread([r["mfu"] for r in measured]),
        "first_loss": steps[0]["loss"], "final_loss": steps[-1]["loss"],
        "peak_memory_bytes_per_rank": [max(r["peak_memory_bytes"][i] for r in steps)
                                       for i in range(len(steps[-1]["peak_memory_bytes"]))],
        "memory_kind": steps[-1].get("memory_kind"),
        "model_state_bytes_per_rank": states["per_rank"] if states else None,
    })
    return out
