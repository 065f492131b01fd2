"""Types and ranges of the config values DeepSpeed reads as numbers or switches.

DeepSpeed's own parser (pydantic for the ZeRO section, plain ``dict.get`` elsewhere) lets many wrong values
through to fail deep inside training, or never: ``"lr": "fast"`` reaches the optimizer constructor,
``"bf16": {"enabled": "yes"}`` is truthy, ``gradient_clipping: -1`` silently disables clipping
(``deepspeed/runtime/engine.py`` clips only when > 0). Each rule names the JSON path and what it must be.
JSON's NaN and Infinity (which ``json.load`` accepts) are refused anywhere in the file.
"""

from __future__ import annotations

import json
import math
from typing import Any

from dsbench.configs.findings import Finding
from dsbench.configs.overrides import get_path, iter_leaves
from dsbench.configs.precision import DTYPES
from dsbench.zero_section import DEVICES, whole

# path -> (kind, lowest allowed, whether the lowest itself is allowed); ranges from DeepSpeed's docs and the
# checks its optimizers make (torch.optim.Adam: lr >= 0, eps >= 0, 0 <= beta < 1, weight_decay >= 0).
RULES: dict[str, tuple[str, float | None, bool]] = {
    # the names DeepSpeed looks up (runtime/config.py lower-cases the optimizer's, the engine's
    # _scheduler_from_config hasattr()s the scheduler's): any other JSON value stops every rank at start-up, where
    # DeepSpeedConfig passes a scheduler's and validate named only "AttributeError" for an optimizer's
    "optimizer.type": ("name", None, True),
    "scheduler.type": ("name", None, True),
    "optimizer.params.lr": ("number", 0, False),
    "optimizer.params.eps": ("number", 0, False),
    "optimizer.params.weight_decay": ("number", 0, True),
    "gradient_clipping": ("number", 0, True),
    "steps_per_print": ("int", 1, True),
    "prescale_gradients": ("bool", None, True),
    "gradient_predivide_factor": ("number", 0, False),  # DeepSpeed divides the gradients by it (engine.py)
    # switches dsbench reads as DeepSpeed would act on them (configs/optimizer_check.py, zero_section.py, the rank's
    # monitor check): DeepSpeed takes "yes" as true (a truthy dict.get, pydantic's lax bool), so only true or false
    "zero_allow_untested_optimizer": ("bool", None, True),
    "zero_force_ds_cpu_optimizer": ("bool", None, True),
    "zero_optimization.cpu_offload": ("bool", None, True),
    "zero_optimization.cpu_offload_param": ("bool", None, True),
    "tensorboard.enabled": ("bool", None, True),
    "wandb.enabled": ("bool", None, True),
    "comet.enabled": ("bool", None, True),
    "csv_monitor.enabled": ("bool", None, True),
    "wall_clock_breakdown": ("bool", None, True),
    # the diagnostics switches (configs/diagnostics.py): memory_breakdown is a truthy dict.get; the flops profiler
    # compares its profile_step with the engine's global step, counted from 0 (a string never matches: no profile)
    "memory_breakdown": ("bool", None, True),
    "flops_profiler.enabled": ("bool", None, True),
    "flops_profiler.detailed": ("bool", None, True),
    "flops_profiler.profile_step": ("int", 0, True),
    "flops_profiler.top_modules": ("int", 1, True),
    "comms_logger.enabled": ("bool", None, True),
    "comms_logger.verbose": ("bool", None, True),
    "comms_logger.prof_all": ("bool", None, True),
    "comms_logger.debug": ("bool", None, True),
    "timers.throughput.enabled": ("bool", None, True),
    "timers.throughput.synchronized": ("bool", None, True),
    "autotuning.enabled": ("bool", None, True),
    "autotuning.end_profile_step": ("int", 1, True),
    "bf16.enabled": ("bool", None, True),
    "fp16.enabled": ("bool", None, True),
    "torch_autocast.enabled": ("bool", None, True),
    "fp16.loss_scale": ("number", 0, True),
    "fp16.initial_scale_power": ("int", 0, True),
    "fp16.loss_scale_window": ("int", 1, True),
    "fp16.hysteresis": ("int", 1, True),
    "fp16.min_loss_scale": ("number", 0, False),
    "zero_optimization.overlap_comm": ("bool", None, True),
    "zero_optimization.contiguous_gradients": ("bool", None, True),
    "zero_optimization.reduce_scatter": ("bool", None, True),
    "zero_optimization.allgather_partitions": ("bool", None, True),
    # element counts, integers to DeepSpeed's pydantic (5e8 is a whole float, which it takes; 5.5 it refuses)
    "zero_optimization.reduce_bucket_size": ("int", 1, True),
    "zero_optimization.allgather_bucket_size": ("int", 1, True),
    "zero_optimization.stage3_prefetch_bucket_size": ("int", 0, True),
    "zero_optimization.stage3_param_persistence_threshold": ("int", 0, True),
    "zero_optimization.stage3_max_live_parameters": ("int", 0, True),
    "zero_optimization.stage3_max_reuse_distance": ("int", 0, True),
    "zero_optimization.sub_group_size": ("int", 0, True),
    "zero_optimization.stage3_gather_16bit_weights_on_model_save": ("bool", None, True),
    "zero_optimization.offload_optimizer.pin_memory": ("bool", None, True),
    "zero_optimization.offload_param.pin_memory": ("bool", None, True),
    "scheduler.params.warmup_min_lr": ("number", 0, True),
    "scheduler.params.warmup_max_lr": ("number", 0, True),
    "scheduler.params.warmup_num_steps": ("int", 0, True),
    "scheduler.params.total_num_steps": ("int", 1, True),
    # the parallel degrees (configs/layout.py reads them): a JSON whole number, as PipelineModule's num_stages and
    # DeepSpeed's TPConfig/sequence_parallel_size take it; autotp_size 0 is DeepSpeed's default (no AutoTP)
    "pipeline.stages": ("count", 1, True),
    "tensor_parallel.autotp_size": ("count", 0, True),
    "sequence_parallel_size": ("count", 1, True),
    # ZeRO++'s hpZ group size (configs/zeropp_check.py divides the world by it): a whole number, 0 or 1 for off
    "zero_optimization.zero_hpz_partition_size": ("count", 0, True),
}

# path -> the values DeepSpeed accepts, each exactly so spelled (pydantic enums: ZeroStageEnum, OffloadDeviceEnum).
# The stage is a JSON number: pydantic would also take "3" and true (as 1), but accelerate's and the HF Trainer's
# ``is_zero3()`` compare the value with 3 (accelerate/utils/deepspeed.py), so "3" trains as ZeRO-3 under DeepSpeed
# while the Trainer skips what ZeRO-3 needs of it (zero.Init, gathering the weights to save).
CHOICES: dict[str, tuple[Any, ...]] = {
    "zero_optimization.stage": (0, 1, 2, 3),
    "zero_optimization.offload_optimizer.device": DEVICES,
    "zero_optimization.offload_param.device": DEVICES,
    "data_types.grad_accum_dtype": tuple(DTYPES),
    # DtypeEnum at the engine's start (deepspeed 0.19.8 runtime/engine.py _assert_valid_mixed_precision_config,
    # _mixed_precision_dtypes): every rank stopped on another spelling, which the config parser passes
    "data_types.param_dtype": tuple(DTYPES),
    "data_types.buffer_dtype": tuple(DTYPES),
    "torch_autocast.dtype": tuple(DTYPES),  # DtypeEnum too (runtime/config.py get_torch_autocast_dtype)
}

_UNSET = object()
_EXPECTED = {"bool": "true or false", "int": "an integer", "count": "a whole number", "number": "a number",
             "name": "a name in quotes"}

# Sections DeepSpeed reads as objects: ``"fp16": true`` passes a truthiness check and then fails inside
# DeepSpeedConfig (or, described by `explain`, reads as fp32); each is refused by name instead.
OBJECTS = ("fp16", "bf16", "amp", "zero_optimization", "zero_optimization.offload_optimizer",
           "zero_optimization.offload_param", "optimizer", "optimizer.params", "scheduler", "scheduler.params",
           "activation_checkpointing", "flops_profiler", "tensor_parallel", "pipeline", "checkpoint", "data_types",
           "comms_logger", "aio", "timers", "timers.throughput", "torch_autocast")


def _is(kind: str, value: Any) -> bool:
    if kind == "name":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "count":  # 2.0 is not a degree: configs/layout.py would read it as 1
        return isinstance(value, int)
    if kind == "int":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    return isinstance(value, int | float)


def _problem(path: str, value: Any) -> str | None:
    kind, low, inclusive = RULES[path]
    if not _is(kind, value):
        return f"must be {_EXPECTED[kind]}, got {json.dumps(value)[:40]}"
    if low is not None and (value < low or (value == low and not inclusive)):
        return f"must be {'>=' if inclusive else '>'} {low:g}, got {value}"
    return None


def _non_finite(value: Any) -> bool:
    if isinstance(value, list):
        return any(_non_finite(item) for item in value)
    return isinstance(value, float) and not math.isfinite(value)


def check_types(config: dict[str, Any], skip: tuple[str, ...] = ()) -> list[Finding]:
    """Non-finite numbers anywhere but ``skip`` (checked elsewhere), then every :data:`RULES` path that is set
    (``"auto"`` is check_auto's)."""
    out = [Finding(severity="error", code="value-type", path=path,
                   message=f"{value} is not a number DeepSpeed can use (JSON has no NaN or Infinity)",
                   fix=f"set {path} to a finite number")
           for path, value in iter_leaves(config) if path not in skip and _non_finite(value)]
    for path in OBJECTS:
        value = get_path(config, path, _UNSET)  # null is no object either: DeepSpeed's ``Config(**None)`` raises
        if value is not _UNSET and value != "auto" and not isinstance(value, dict):
            example = '{"enabled": true}' if path in ("fp16", "bf16", "amp") else "{ ... }"
            out.append(Finding(severity="error", code="value-type", path=path, message=f"must be an object, got "
                               f"{json.dumps(value)[:40]}", fix=f"write {path} as {example}"))
    flagged = {f.path for f in out}
    betas = get_path(config, "optimizer.params.betas")
    if betas not in (None, "auto") and "optimizer.params.betas" not in flagged and not (
            isinstance(betas, list) and len(betas) == 2 and all(_is("number", b) and 0 <= b < 1 for b in betas)):
        out.append(Finding(severity="error", code="value-type", path="optimizer.params.betas",
                           message=f"must be two numbers in [0, 1), got {json.dumps(betas)[:40]}",
                           fix="set optimizer.params.betas to e.g. [0.9, 0.999]"))
    out += _choices(config, {f.path for f in out})
    flagged = {f.path for f in out}
    for path in RULES:
        value = get_path(config, path)
        if value is None or value == "auto" or path in flagged:
            continue
        problem = _problem(path, value)
        if problem:
            out.append(Finding(severity="error", code="value-type", path=path, message=problem,
                               fix=f"set {path} to {_EXPECTED[RULES[path][0]]}"
                                   + (f" {'>=' if RULES[path][2] else '>'} {RULES[path][1]:g}"
                                      if RULES[path][1] is not None else "")))
    return out


def _choices(config: dict[str, Any], flagged: set[str]) -> list[Finding]:
    """Each :data:`CHOICES` path that is set to a value outside its list."""
    out = []
    for path, allowed in CHOICES.items():
        value = get_path(config, path)
        if value is None or value == "auto" or path in flagged or _chosen(value, allowed):
            continue
        listed = ", ".join(json.dumps(choice) for choice in allowed)
        why = _stage_note(value) if path == "zero_optimization.stage" else ""
        out.append(Finding(severity="error", code="value-type", path=path,
                           message=f"must be one of {listed}, got {json.dumps(value)[:40]}{why}",
                           fix=f"set {path} to one of {listed}"))
    return out


def _chosen(value: Any, allowed: tuple[Any, ...]) -> bool:
    if isinstance(allowed[0], str):
        return value in allowed
    return not isinstance(value, str) and whole(value) in allowed  # 3.0 is 3 to pydantic; "3" and true are not here


def _stage_note(value: Any) -> str:
    """Why a stage that DeepSpeed's pydantic would take is refused: a numeral string, or a JSON true."""
    if isinstance(value, bool):
        return " (DeepSpeed would read true as stage 1)"
    if isinstance(value, str) and value.strip() in ("0", "1", "2", "3"):
        return (" (DeepSpeed would read it as a number, but accelerate's and the HF Trainer's is_zero3() compare "
                "the value with 3 and miss a string)")
    return ""
