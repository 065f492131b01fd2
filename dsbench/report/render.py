"""Tables from report rows: terminal (rich), CSV, JSON and Markdown (pure except the rich console)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from dsbench.rows import Row

COLUMNS: list[tuple[str, str, str]] = [
    # (key, header, format)
    ("strategy", "strategy", "{}"),
    ("world_size", "ranks", "{}"),
    ("micro_batch", "micro", "{}"),
    ("model", "model", "{}"),
    ("device", "device", "{}"),
    ("status", "status", "{}"),
    ("tokens_per_s", "tokens/s (wall)", "{:,.0f}"),
    ("timed_tokens_per_s", "timed tokens/s", "{:,.0f}"),
    ("timed_tokens_per_s_range", "timed p10-p90", "{:,.0f}-{:,.0f}"),
    ("step_time_ms", "timed step ms", "{:.1f}"),
    ("outside_timed_fraction", "outside timed %", "{:.1%}"),
    ("peak_memory_mib", "peak mem MiB/rank", "{:,.1f}"),
    ("model_states_mib", "model states MiB/rank", "{:,.2f}"),
    ("mfu", "MFU % (wall)", "{:.2%}"),
    ("scaling_efficiency", "scaling eff", "{:.2f}"),
    ("speedup_vs_ddp", "vs DDP", "{:.2f}x"),
    ("final_loss", "final loss", "{:.4f}"),
]
PREDICTED_COLUMNS: list[tuple[str, str, str]] = [
    # shown when the report was built with a machine profile (dsbench report/compare --profile)
    ("wall_step_ms", "wall step ms", "{:.1f}"),
    ("predicted_step_ms", "predicted step ms", "{:.1f}"),
    ("predicted_step_range", "predicted range ms", "{:.1f}-{:.1f}"),
    ("step_error", "step error", "{:+.0%}"),
    ("predicted_dominant", "predicted dominant", "{}"),
    ("predicted_peak_mib", "predicted peak MiB", "{:,.1f}"),
    ("peak_error", "peak error", "{:+.0%}"),
]
SPEED_COLUMNS: list[tuple[str, str, str]] = [
    # shown when some row ran a speed option (--compile, --fused-optimizer): where the compilation went, and what
    # each run stepped with
    ("warmup_s", "warm-up s (compile)", "{:.1f}"),
    ("optimizer", "optimizer", "{}"),
]
SKIPPED_COLUMN = ("skipped_steps", "fp16 steps skipped", "{}")
"""Shown when some row's fp16 loss scale skipped a step: its optimizer did not step there (an overflow)."""
RANGES = {"timed_tokens_per_s_range": ("timed_tokens_per_s_p10", "timed_tokens_per_s_p90"),
          "predicted_step_range": ("predicted_low_ms", "predicted_high_ms")}
"""Columns that show a range, and the two figures of a row each is made of."""
EXPORT_KEYS = ["strategy", "world_size", "micro_batch", "model", "device", "status", "reason", "repeats", "ok",
               "tokens_per_s", "tokens_per_s_min", "tokens_per_s_max", "window_s", "mfu", "timed_tokens_per_s",
               "timed_tokens_per_s_p10", "timed_tokens_per_s_p90", "timed_mfu", "outside_timed_fraction",
               "step_time_ms", "step_time_ms_min", "step_time_ms_max", "peak_memory_mib", "memory_kind",
               "model_states_mib", "scaling_efficiency", "scaling_baseline", "speedup_vs_ddp", "final_loss",
               "measured_steps", "warmup_steps", "warmup_s", "skipped_steps", "compile", "fused_optimizer", "attention",
               "optimizer",
               *(key for key, _, _ in PREDICTED_COLUMNS if key not in RANGES), "predicted_low_ms",
               "predicted_high_ms"]
TEXT_COLUMNS = ("strategy", "model", "device", "status", "predicted_dominant", "predicted dominant", "optimizer")


def columns_for(rows: list[Row]) -> list[tuple[str, str, str]]:
    """The table's columns: the measured ones, the speed options' when some row ran one, fp16's skipped steps when
    some row skipped one, then each predicted one that some row has."""
    speed = SPEED_COLUMNS if any(row.compile or row.fused_optimizer for row in rows) else []
    speed += [SKIPPED_COLUMN] if any(row.skipped_steps for row in rows) else []
    return COLUMNS + speed + [col for col in PREDICTED_COLUMNS
                              if any(row.figure(RANGES.get(col[0], (col[0],))[0]) is not None for row in rows)]


def cell_text(row: Row, key: str, fmt: str) -> str:
    if key in RANGES:
        low, high = (row.figure(end) for end in RANGES[key])
        return "-" if low is None or high is None else fmt.format(low, high)
    value = row.figure(key)
    if value is None:
        return "-"
    if key == "mfu":
        return f"{value * 100:.2f}"
    if key == "outside_timed_fraction":
        return f"{value * 100:.1f}"
    return fmt.format(value)


def method_notes(rows: list[Row]) -> list[str]:
    """How the figures were measured, a sentence each (the terminal numbers them; Markdown, HTML and JSON join
    them)."""
    ok = [r for r in rows if r.status == "ok"]
    if not ok:
        return ["no successful cells"]
    steps = sorted({r.measured_steps for r in ok})
    warm = sorted({r.warmup_steps for r in ok})
    reps = sorted({r.repeats for r in ok})
    kinds = sorted({r.memory_kind for r in ok if r.memory_kind})
    memory = {"rss": "peak resident set size (CPU)", "cuda_max_allocated": "torch.cuda.max_memory_allocated"}
    return [f"{'/'.join(map(str, steps))} measured step{'s' * (steps != [1])} after {'/'.join(map(str, warm))} "
            f"warm-up step{'s' * (warm != [1])}, "
            f"{'/'.join(map(str, reps))} repeat{'s' * (reps != [1])}.",
            "tokens/s (wall) is global (all ranks), by the wall clock over the measured window, everything included "
            "(median over repeats); MFU uses it.",
            "timed tokens/s and timed step ms cover only zero_grad + forward/backward + optimizer step of the "
            "slowest rank (median, p10-p90 over steps); outside timed % is the share of rank 0's window outside its "
            "own timed regions (data, metrics gathers, logging).",
            f"Peak memory per rank is {', '.join(memory.get(k, k) for k in kinds)}; model states are "
            "params+grads+optimizer states+fp32 master counted from rank 0's tensors.",
            "MFU = achieved FLOP/s per rank (6N + 12·L·h·s per token) / peak; scaling efficiency = N-rank tokens/s / "
            "(N x 1-rank tokens/s)."]


def method_note(rows: list[Row]) -> str:
    """How the figures were measured, for every table."""
    return " ".join(method_notes(rows))


def to_markdown(rows: list[Row], answer: list[str] | None = None) -> str:
    """The report as Markdown, opening with the verdict (``answer``) where given."""
    columns = columns_for(rows)
    lines = ["| " + " | ".join(h for _, h, _ in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell_text(r, k, f) for k, _, f in columns) + " |" for r in rows]
    # what failed, one line each: the verdict's own lines where it is given, else listed under the table
    failed = [] if answer else [r for r in rows if r.status != "ok"]
    notes = [f"- {r.strategy} x{r.world_size} ({r.model}): {r.status}: {r.reason}" for r in failed]
    said = ["## Verdict", "", *(f"- {line.strip()}" if not line.startswith("  ") else f"  - {line.strip()}"
                                for line in answer), "", "## Cells", ""] if answer else []
    return "\n".join(["# dsbench report", "", *said, *lines, "", method_note(rows), *predicted_note(rows),
                      *([""] + notes if notes else [])]) + "\n"


def predicted_note(rows: list[Row]) -> list[str]:
    """How the predicted columns were made, when the report has them."""
    if not any(row.predicted_step_ms is not None for row in rows):
        return []
    return ["", "predicted step ms: dsbench plan's time model from the machine profile given with --profile, for the "
            "cell's model, ranks, micro-batch, accumulation, sequence and precision; wall step ms is the measured "
            "global tokens per step over tokens/s (wall); step error = (predicted - measured) / measured. "
            "predicted range ms is the step the profile's timing spreads allow (dsbench/plan/interval.py; none from "
            "a profile written before calibrate stored spreads). predicted peak MiB is the planner's device total "
            "against torch.cuda.max_memory_allocated (GPU runs only). A profile written by calibrate --check scales "
            "each engine family's prediction by what its check cell measured over what was predicted "
            "(docs/planner.md)."]


def to_csv(rows: list[Row]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=EXPORT_KEYS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: row.figure(k) for k in EXPORT_KEYS})
    return buffer.getvalue()


def to_json(rows: list[Row], env: dict[str, Any]) -> str:
    cells = [{**{k: row.figure(k) for k in EXPORT_KEYS}, "model_states": row.model_states,
              "runs": [{k: getattr(run, k) for k in ("id", "folder", "status", "reason", "command")}
                       for run in row.runs]}
             for row in rows]
    return json.dumps({"method": method_note(rows), "env": env, "cells": cells}, indent=2) + "\n"
