"""A machine profile read back: every figure the planner uses checked, one line naming the key that is wrong
(:func:`load_profile`; the profile is written by ``dsbench calibrate``, dsbench/plan/profile.py)."""

from __future__ import annotations

import math
from typing import Any

from dsbench.errors import UserError
from dsbench.io import read_count
from dsbench.plan.collective_fit import KINDS
from dsbench.plan.gpu_calibration import check_section
from dsbench.plan.pipeline_time import PASS_RATE, STEP_RATE
from dsbench.plan.profile import SCHEMAS


def load_profile(data: Any, source: str) -> dict[str, Any]:
    """A profile read from ``source`` (a parsed JSON value), checked enough for the planner to use."""
    if not isinstance(data, dict) or data.get("schema") not in SCHEMAS:
        raise UserError(f"{source}: not a dsbench machine profile (write one with `dsbench calibrate -o FILE`)")
    if not isinstance(data.get("rates"), dict) or not isinstance(data.get("collectives"), dict):
        raise UserError(f"{source}: the profile has no rates or collectives (write it again with dsbench calibrate)")
    _check_rates(data["rates"], source)
    _check_machine(data, source)
    if data.get("check") is not None:  # calibrate --check's per-family corrections (plan/selfcheck.py)
        _check_corrections(data["check"], source)
    spread = data.get("spread", {})
    if not isinstance(spread, dict):  # each timing's spread (spreads): the planner's step range
        raise UserError(f"{source}: spread must map timings to numbers, got {_shown(spread)} (write the profile again "
                        "with dsbench calibrate)")
    for name, width in spread.items():
        _check_figure(width, f"spread.{name}", source, positive=False)
    if data.get("gpu") is not None:
        check_section(data["gpu"], source)
    for group, entry in data["collectives"].items():
        _check_collectives(group, entry, source)
    return data


def _check_rates(rates: dict[str, Any], source: str) -> None:
    """The rates the planner reads: positive where required, non-negative where optional, TFLOPS per micro-batch."""
    for key in REQUIRED_RATES:
        _check_figure(rates.get(key), f"rates.{key}", source, positive=True)
    for key in OPTIONAL_RATES:
        if key in rates:
            _check_figure(rates[key], f"rates.{key}", source, positive=False)
    for key in SIGNED_RATES:
        if key in rates:
            _check_figure(rates[key], f"rates.{key}", source, positive=None)
    by_micro = rates.get("model_tflops_by_micro_batch", {})
    # ASCII digits of a count int() reads ('²' is a digit to str.isdigit, not to int: an internal error before)
    if not isinstance(by_micro, dict) or not all(read_count(str(size), digits=9) for size in by_micro):
        raise UserError(f"{source}: rates.model_tflops_by_micro_batch must map micro-batch sizes to TFLOPS")
    for size, rate in by_micro.items():
        _check_figure(rate, f"rates.model_tflops_by_micro_batch.{size}", source, positive=True)


def _check_machine(data: dict[str, Any], source: str) -> None:
    """What the profile says of the machine: node and rank counts, the cores, the device and backend names."""
    for key in ("nodes", "world_size"):
        if key in data and (type(data[key]) is not int or data[key] < 1):
            raise UserError(f"{source}: {key} must be a whole number >= 1, got {_shown(data[key])} (write the "
                            "profile again with dsbench calibrate)")
    machine = data.get("machine", {})
    cpus = machine.get("cpus", 1) if isinstance(machine, dict) else None
    if type(cpus) is not int or cpus < 1:  # the cores ranks share (plan.machine_profile.core_share)
        raise UserError(f"{source}: machine.cpus must be a whole number >= 1, got {_shown(cpus)} (write the "
                        "profile again with dsbench calibrate)")
    for key in ("device", "backend"):
        if key in data and not isinstance(data[key], str):
            raise UserError(f"{source}: {key} must be a string, got {_shown(data[key])}")


def _check_collectives(group: str, entry: Any, source: str) -> None:
    """One rank group's fitted collectives: a bandwidth > 0 and a latency >= 0 each, and the group's rank count."""
    if not isinstance(entry, dict):
        raise UserError(f"{source}: collectives.{group} must be a mapping of fitted collectives, got {_shown(entry)}")
    for kind in KINDS:
        fitted = entry.get(kind)
        if kind in entry and not isinstance(fitted, dict):  # null too: calibrate leaves out a kind it did not measure
            raise UserError(f"{source}: collectives.{group}.{kind} must be a mapping, got {_shown(fitted)}")
        if isinstance(fitted, dict) and "bandwidth_gbs" in fitted:
            _check_figure(fitted["bandwidth_gbs"], f"collectives.{group}.{kind}.bandwidth_gbs", source, True)
            _check_figure(fitted.get("latency_us_per_step"), f"collectives.{group}.{kind}.latency_us_per_step",
                          source, positive=False)
            if type(entry.get("size")) is not int or entry["size"] < 1:
                raise UserError(f"{source}: collectives.{group}.size must be the rank count (a whole number >= "
                                f"1), got {_shown(entry.get('size'))}")


def _shown(value: Any) -> str:
    """A value as a short JSON-ish text for an error line."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


REQUIRED_RATES = ("model_tflops", "adam_params_per_s")
"""The rates the planner always reads from a profile."""
OPTIONAL_RATES = ("fsdp_unit_s_per_micro_step", "fsdp_unit_s_per_step", "zero1_call_s", "zero2_call_s",
                  "zero1_model_call_s", "zero2_model_call_s",
                  "zero3_tensor_s", "torch_tp_layer_s", "autotp_layer_s", "torch_tp_sp_layer_s", "torch_tp_lp_head_s",
                  "ulysses_layer_s", "zb_split_layer_s", *PASS_RATE.values(), *STEP_RATE.values())
"""The engine costs a profile may carry (older profiles have none)."""
SIGNED_RATES = ("zero_offload_param_s",)
"""Costs that may be negative: a difference between two ways of running the same step."""


def _check_corrections(check: Any, source: str) -> None:
    """calibrate --check's per-family step scales and the pipeline families' milliseconds added to a step: maps of
    engine families to positive numbers."""
    for key, default in (("step_scale", None), ("step_residual_ms", {})):  # the second: profiles from 19:20 on
        found = check.get(key, default) if isinstance(check, dict) else None
        if not isinstance(found, dict):
            raise UserError(f"{source}: check.{key} must map engine families to numbers (write the profile "
                            "again with dsbench calibrate --check)")
        for family, value in found.items():
            _check_figure(value, f"check.{key}.{family}", source, positive=True)
    chosen = check.get("chosen", [])  # calibrate --check-strategies' cells (since 2026-12-05)
    if not (isinstance(chosen, list) and all(isinstance(name, str) for name in chosen)):
        raise UserError(f"{source}: check.chosen must list strategy names (write the profile again with dsbench "
                        "calibrate --check)")


SANE = (1e-12, 1e15)
"""The magnitudes a non-zero profile figure may take, in its unit (seconds, TFLOPS, GB/s, parameters/s): wider than
any machine's by orders, narrow enough that a step's squared terms stay finite (a rate of 1e-300 TFLOPS made
plan's step range overflow, an internal error until 2026-12-04)."""


def _check_figure(value: Any, key: str, source: str, positive: bool | None) -> None:
    """A profile figure must be a finite number, > 0 (``positive``), >= 0 (False) or of either sign (None), and
    zero or of a magnitude within :data:`SANE`: one line naming the key otherwise."""
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and
          (positive is None or (value > 0 if positive else value >= 0)))
    if not ok:
        bound = "" if positive is None else " > 0" if positive else " >= 0"
        raise UserError(f"{source}: {key} must be a finite number{bound}, got {_shown(value)} "
                        "(write the profile again with dsbench calibrate)")
    if value and not SANE[0] <= abs(value) <= SANE[1]:
        raise UserError(f"{source}: {key} is {value:g}, beyond any machine's (a figure other than 0 is "
                        f"{SANE[0]:g} to {SANE[1]:g} in magnitude; write the profile again with dsbench calibrate)")
