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


def scheduler_name(config: dict[str, Any]) -> str | None:
    """The config's ``scheduler.type`` where it is text (None without a scheduler)."""
    scheduler = config.get("scheduler")
    name = scheduler.get("type") if isinstance(scheduler, dict) else None
    return name if isinstance(name, str) else None


def scheduler_class(config: dict[str, Any]) -> dict[str, Any] | None:
    """The class the config's scheduler names, as the schema reads it (takes, needs, defaults); None for none."""
    name = scheduler_name(config)
    return load_schema().optimizers["schedulers"].get(name) if name else None


def known_scheduler(config: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]] | None:
    """The config's scheduler as DeepSpeed would build it: its name, its class (:func:`scheduler_class`) and its
    params ({} where absent); None without a scheduler DeepSpeed knows, or with params of another type (check_types
    names those)."""
    how = scheduler_class(config)
    params = config["scheduler"].get("params", {}) if how else None
    name = scheduler_name(config)
    return (name, how, params) if how and isinstance(params, dict) else None


def check_scheduler(config: dict[str, Any]) -> list[Finding]:
    """What the engine would stop at for the config's scheduler (none without one, or with "auto" params, which
    the HF Trainer and the worker fill)."""
    name = scheduler_name(config)
    if name is None:
        return []
    scheduler, known = config["scheduler"], load_schema().optimizers["schedulers"]
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


def check_schedule(config: dict[str, Any]) -> list[Finding]:
    """What a schedule the engine builds and steps would do that its config does not say: a warm-up longer than
    the schedule, a peak that is not the optimizer's lr (none without a scheduler DeepSpeed knows, or with "auto"
    values, which the HF Trainer and the worker fill)."""
    found = known_scheduler(config)
    if found is None:
        return []
    name, how, params = found
    return (_warmup_outlasts_schedule(name, how, params) + _peak_not_the_optimizers(name, how, params, config)
            + _unknown_curve(name, params))


WARMUP_CURVES = ("log", "linear")
"""The warm-up curves DeepSpeed 0.19.8's warm-up schedulers draw (runtime/lr_schedules.py ``WARMUP_LOG_RATE``,
``WARMUP_LINEAR_RATE``); any other ``warmup_type`` is logged and drawn as log."""


def warmup_curve(params: dict[str, Any], default: Any) -> str:
    """The curve DeepSpeed draws for the params: the stated warmup_type where it knows it, else log."""
    stated = params.get("warmup_type", default)
    return stated if stated in WARMUP_CURVES else "log"


def _unknown_curve(name: str, params: dict[str, Any]) -> list[Finding]:
    stated = params.get("warmup_type")
    if "warmup_type" not in params or stated in WARMUP_CURVES or stated == "auto":
        return []
    return [Finding(severity="warning", code="warmup-curve-unknown", path="scheduler.params.warmup_type",
                    message=f"{name} knows warm-up curves log and linear: for {stated!r} DeepSpeed draws log (it "
                            "only logs it)",
                    fix="use 'log' or 'linear' (WarmupCosineLR for a cosine after the warm-up)")]


def _warmup_outlasts_schedule(name: str, how: dict[str, Any], params: dict[str, Any]) -> list[Finding]:
    """A decaying schedule whose warm-up is longer than the schedule itself. DeepSpeed 0.19.8 only logs "total_num_steps
    is less than warmup_num_steps" (runtime/lr_schedules.py, WarmupDecayLR and WarmupCosineLR): the LR is still
    rising at total_num_steps and never decays. An unset warmup_num_steps is the class's default (1000)."""
    if "total_num_steps" not in how["takes"] or "warmup_num_steps" not in how["takes"]:
        return []
    stated = "warmup_num_steps" in params
    total = params.get("total_num_steps")
    warmup = params.get("warmup_num_steps", how["defaults"].get("warmup_num_steps"))
    whole = all(isinstance(value, int) and not isinstance(value, bool) for value in (total, warmup))
    if not (whole and total < warmup):
        return []
    source = "" if stated else ", DeepSpeed's default where warmup_num_steps is unset"
    return [Finding(severity="error", code="warmup-outlasts-schedule", path="scheduler.params.total_num_steps",
                    message=f"{name}'s warm-up ({warmup} steps{source}) outlasts its total_num_steps {total}: the LR "
                            "is still rising when the schedule ends and never decays (DeepSpeed only logs it)",
                    fix=f"set scheduler.params.warmup_num_steps below {total}, or total_num_steps to the steps "
                        "you train")]


def _peak_not_the_optimizers(name: str, how: dict[str, Any], params: dict[str, Any],
                             config: dict[str, Any]) -> list[Finding]:
    """A warm-up whose peak LR, left unset, is the class's own default rather than the optimizer's lr: DeepSpeed
    0.19.8's WarmupDecayLR defaults warmup_max_lr to 0.001 where WarmupLR takes the optimizer's lr (None), and the
    schedule writes its LR into every parameter group at each step (lr_schedules.py ``update_lr``). The HF Trainer
    fills the key only where it says "auto"."""
    default = how["defaults"].get("warmup_max_lr")
    if "warmup_max_lr" not in how["takes"] or "warmup_max_lr" in params or default is None:
        return []
    optimizer = config.get("optimizer")
    given = optimizer.get("params") if isinstance(optimizer, dict) else None  # of another type: check_types' line
    lr = given.get("lr") if isinstance(given, dict) else None
    if not isinstance(lr, int | float) or isinstance(lr, bool):
        lr = None
    if lr == default:
        return []
    theirs = "the optimizer's lr" if lr is None else f"optimizer.params.lr {lr}"
    return [Finding(severity="warning", code="warmup-peak-default", path="scheduler.params.warmup_max_lr",
                    message=f"{name} without warmup_max_lr peaks at DeepSpeed's default {default}, not {theirs}: "
                            "the schedule sets every parameter group's LR (WarmupLR, without it, peaks at the "
                            "optimizer's lr)",
                    fix=f"set scheduler.params.warmup_max_lr to {'your lr' if lr is None else lr}")]
