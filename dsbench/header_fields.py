"""The kinds of a run's header record (the first line of ``metrics.jsonl``), checked as it is read back (stdlib only).

The worker writes each field with one kind (``dsbench/worker/header.py``). A folder edited or damaged by
hand is named by its field, in one line, rather than by the Python error its value would raise in a reader, or by a
table that reports a run on -3 ranks. Absent fields keep the reader's defaults (runs from before a field was
recorded); ``None`` is accepted wherever the worker writes it.
"""

from __future__ import annotations

import json
import math
from typing import Any

POSITIVE = ("world_size", "micro_batch", "grad_accum", "seq_len", "global_batch", "tp", "pp", "virtual_stages",
            "ulysses", "dp_shard", "dp_size", "steps", "flops_per_token", "num_params")
"""Counts the worker writes as whole numbers >= 1 (a degree, a batch, a length)."""
TEXT = ("strategy", "precision", "device", "pipeline_schedule", "recompute", "launch_command", "git_rev", "started_at")
OBJECTS = ("model", "ds_config", "speed", "fsdp", "versions", "machine")
TEXT_LISTS = ("hostnames", "command")
FLAGS = ("sequence_parallel", "loss_parallel", "activation_checkpointing")


def header_problem(record: dict[str, Any]) -> str | None:
    """What is wrong with a header record's fields, in words naming the first one (None when nothing is)."""
    for name, value in record.items():
        if value is None:
            continue
        wanted = _wanted(name, value)
        if wanted:
            return f"its header's {name} is {_shown(value)}, not {wanted}"
    name = (record.get("model") or {}).get("name")
    return None if name is None or isinstance(name, str) else f"its header's model.name is {_shown(name)}, not text"


def _wanted(name: str, value: Any) -> str | None:
    """The kind ``name`` must be, where ``value`` is not of it."""
    if name in POSITIVE and not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return "a whole number >= 1"
    if name in TEXT and not isinstance(value, str):
        return "text"
    if name in OBJECTS and not isinstance(value, dict):
        return "an object"
    if name in TEXT_LISTS and not (isinstance(value, list) and all(isinstance(item, str) for item in value)):
        return "a list of text"
    if name in FLAGS and not isinstance(value, bool):
        return "true or false"
    if name == "peak_tflops" and not (isinstance(value, int | float) and not isinstance(value, bool)
                                      and math.isfinite(value) and value > 0):
        return "a number > 0"
    return None


def _shown(value: Any) -> str:
    """A value as the file holds it, cut short."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
