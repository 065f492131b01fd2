"""The LR scheduler DeepSpeed's engine builds for a config, and where building or stepping it would stop.

``DeepSpeedConfig`` reads ``scheduler.type`` and ``scheduler.params`` without checking them; the engine then builds
``cls(optimizer, **params)`` (runtime/engine.py ``_scheduler_from_config``: one of DeepSpeed's own
``lr_schedules`` classes, else a ``torch.optim.lr_scheduler`` class of that name, else its AssertionError "DeepSpeed
does not recognize LR scheduler") and calls ``lr_scheduler.step()`` after every optimizer step with no argument.
Each class's arguments are read from its signature into the schema by scripts/gen_ds_schema.py.
"""

from __future__ import annotations

import difflib
from typing import Any

from dsbench.configs.findings import Finding
from dsbench.configs.optimizer_check import unknown_argument
from dsbench.configs.schema import load_schema


def check_scheduler(config: dict[str, Any]) -> list[Finding]:
    """What the engine would stop at for the config's scheduler (none without one, or with "auto" params, which
    the HF Trainer and the worker fill)."""
    scheduler = config.get("scheduler")
    name = scheduler.get("type") if isinstance(scheduler, dict) else None
    if not isinstance(name, str):
        return []
    known = load_schema().optimizers["schedulers"]
    if name not in known:
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
        return [Finding(severity="error", code="deepspeed-rejects", path="scheduler.type",
                        message=f"DeepSpeed does not recognize LR scheduler {name!r}: it builds its own "
                                f"({', '.join(n for n, how in known.items() if how['origin'] == 'deepspeed')}) or "
                                "a torch.optim.lr_scheduler class by its name",
                        fix=f"did you mean '{close[0]}'?" if close else "use WarmupLR, or delete the scheduler")]
    how = known[name]
    params = scheduler.get("params")
    params = params if isinstance(params, dict) else {}
    out = [unknown_argument(f"scheduler.params.{key}", name, how["takes"]) for key in params if key not in how["takes"]]
    objects = [key for key in how["objects"] if key in how["needs"]]
    if objects:
        out.append(Finding(severity="error", code="deepspeed-rejects", path="scheduler.type",
                           message=f"{name} needs {', '.join(objects)}, a Python object a JSON config cannot hold",
                           fix="use WarmupLR, WarmupDecayLR or WarmupCosineLR, or build the scheduler in the script"))
    missing = [key for key in how["needs"] if key not in params and key not in objects]
    if missing:
        out.append(Finding(severity="error", code="deepspeed-rejects", path="scheduler.params",
                           message=f"{name} needs {', '.join(missing)}, which the config does not set: DeepSpeed "
                                   "stops at start-up",
                           fix=f"set scheduler.params.{missing[0]}"))
    if how["step_needs"]:
        out.append(Finding(severity="error", code="deepspeed-rejects", path="scheduler.type",
                           message=f"{name} steps on {', '.join(how['step_needs'])}, which the engine's "
                                   "lr_scheduler.step() does not pass: the first step stops",
                           fix="use WarmupLR, WarmupDecayLR or WarmupCosineLR"))
    return out
