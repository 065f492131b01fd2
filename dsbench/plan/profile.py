"""Machine profiles: what ``dsbench calibrate`` measured on the real ranks, fitted to the planner's time model (pure):
each collective (:mod:`dsbench.plan.collective_fit`), the compute rates, and the engines' own costs
(:mod:`dsbench.plan.engine_costs`); and read back as the planner's links and rates.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from dsbench.errors import UserError
from dsbench.models import shape_of_record
from dsbench.plan.collective_fit import KINDS, fit_collective, fitted_link
from dsbench.plan.engine_costs import (
    fsdp_unit_costs,
    split_backward_cost,
    tensor_parallel_costs,
    zero_costs,
    zero_model_costs,
)
from dsbench.plan.gpu_calibration import gpu_section
from dsbench.plan.hardware import Link
from dsbench.plan.pipeline_time import pass_costs, timing_name

SCHEMA = "dsbench.profile/2"
"""Version 2 (2026-11-27) adds the optional ``gpu`` section (plan/gpu_calibration.py); version 1 files still load."""
SCHEMAS = ("dsbench.profile/1", SCHEMA)
MEASURED = "dsbench.measured/1"


def fit_profile(measured: dict[str, Any]) -> dict[str, Any]:
    """The machine profile from ``calibrate``'s measurements: every collective fitted, and the compute rates the
    planner uses (the slowest rank's: in a synchronous step every rank waits for it)."""
    if measured.get("schema") != MEASURED:
        raise UserError(f"not dsbench calibrate's measurements (schema {measured.get('schema')!r})")
    collectives = {group: _fitted_group(data) for group, data in measured["collectives"].items()}
    per_rank = measured["compute_per_rank"]
    rates = {f"{name}_tflops": min(rank[name]["tflops"] for rank in per_rank) for name in ("gemm", "attention",
                                                                                             "model")}
    rates["adam_params_per_s"] = min(rank["optimizer"]["params_per_s"] for rank in per_rank)
    sizes = per_rank[0].get("model_by_micro_batch", {})
    rates["model_tflops_by_micro_batch"] = {size: min(rank["model_by_micro_batch"][size]["tflops"] for rank in per_rank)
                                            for size in sizes}
    if measured.get("fsdp") and "world" in collectives:
        rates.update(fsdp_unit_costs(measured["fsdp"], collectives["world"]))
        if measured.get("deepspeed"):
            rates.update(zero_costs(measured["deepspeed"], measured["fsdp"]))
        if measured.get("zero_model"):  # profiles from 2026-11-29 14:00 on
            rates.update(zero_model_costs(measured["zero_model"], collectives["world"],
                                          shape_of_record(measured["model"]), measured.get("precision", "fp32")))
    tp = measured.get("tensor_parallel") or {}
    tp_link = collectives.get("intra") or (collectives.get("world") if measured.get("nodes", 1) == 1 else None)
    if "plain_forward_backward" in tp and tp_link:
        element = 2 if measured.get("precision") in ("bf16", "fp16") else 4
        rates.update(tensor_parallel_costs(tp, tp_link, element))
    if all(rank.get("split_backward") for rank in per_rank):  # profiles from 2026-11-27 05:00 on
        rates["zb_split_layer_s"] = max(split_backward_cost(rank["split_backward"]) for rank in per_rank)
    if measured.get("pipeline"):  # the pipeline engines' own runtime (torch's from 2026-11-28 16:10)
        rates.update(pass_costs(measured["pipeline"]))
    kept = {key: value for key, value in measured.items() if key != "gpu"}
    out = {**kept, "schema": SCHEMA, "collectives": collectives, "rates": rates, "spread": spreads(measured)}
    if measured.get("gpu"):  # measured on a CUDA rank: the GPU model's own constants
        out["gpu"] = gpu_section(measured["gpu"])
    return out


def _fitted_group(data: dict[str, Any]) -> dict[str, Any]:
    """One rank group's measured collectives, each with its fit (:func:`~dsbench.plan.collective_fit.fit_collective`)
    beside its points."""
    fitted = {key: value for key, value in data.items() if key not in KINDS}
    for kind in KINDS:
        entry = data.get(kind) or {}
        fitted[kind] = {**entry, **fit_collective(kind, data["size"], entry["points"])} if "points" in entry else entry
    return fitted


SPREAD_OF = {"forward+backward": ("compute_per_rank", "model"), "AdamW": ("compute_per_rank", "optimizer"),
             "FSDP2 stack step": ("fsdp", "sharded_step"), "ZeRO-1 stack step": ("deepspeed", "zero1_step"),
             "ZeRO-2 stack step": ("deepspeed", "zero2_step"), "ZeRO-3 stack step": ("deepspeed", "zero3_step"),
             "ZeRO-1 model step": ("zero_model", "zero1_step"), "ZeRO-2 model step": ("zero_model", "zero2_step"),
             "ZeRO-2 offload model step": ("zero_model", "zero2_offload_step"),
             "DTensor layers": ("tensor_parallel", "torch_forward_backward"),
             "AutoTP layers": ("tensor_parallel", "autotp_forward_backward"),
             "DTensor SP layers": ("tensor_parallel", "sp_forward_backward"),
             "DTensor loss-parallel head": ("tensor_parallel", "lp_forward_backward"),
             "Ulysses layers": ("tensor_parallel", "ulysses_forward_backward")}
"""The timings each stored figure comes from (the rates and engine costs above are fitted from them)."""


def spreads(measured: dict[str, Any]) -> dict[str, float]:
    """Each timing's spread over its samples: half the p10-p90 range over the median, the widest over the ranks
    (``compute_per_rank``) where every rank measured it."""
    out = {}
    for name, (section, key) in SPREAD_OF.items():
        found = measured.get(section)
        entries = [rank.get(key) for rank in found] if isinstance(found, list) else [(found or {}).get(key)]
        widths = [(entry["p90"] - entry["p10"]) / 2 / entry["seconds"] for entry in entries
                  if isinstance(entry, dict) and {"p10", "p90", "seconds"} <= entry.keys() and entry["seconds"] > 0]
        if widths:
            out[name] = max(widths)
    for schedule, timed in ((measured.get("pipeline") or {}).get("schedules") or {}).items():  # the pipeline engines
        widths = [(point["p90"] - point["p10"]) / 2 / point["seconds"] for point in
                  (timed if isinstance(timed, list) else [timed])  # the widest over its micro-batch counts
                  if {"p10", "p90", "seconds"} <= point.keys() and point["seconds"] > 0]
        if widths:
            out[timing_name(schedule)] = max(widths)
    links = [link for link in (measured.get("collectives") or {}).values() if isinstance(link, dict)]
    # a collective's spread: the median over its message sizes (the smallest are the noisiest), the widest op
    by_op = [statistics.median((p["p90"] - p["p10"]) / 2 / p["seconds"] for p in op["points"])
             for link in links for op in link.values()
             if isinstance(op, dict) and op.get("points") and all({"p10", "p90", "seconds"} <= p.keys()
                                                                  and p["seconds"] > 0 for p in op["points"])]
    if by_op:
        out["collectives"] = max(by_op)
    return out


@dataclass(frozen=True, slots=True)
class Profile:
    """A machine profile, read and checked once (:func:`dsbench.plan.machine_profile.read_profile`, where
    ``--profile`` is parsed) and then passed: every report row and tune layout plans with the same object, never its
    path."""

    path: str
    data: dict[str, Any]
    """The checked profile (:func:`dsbench.plan.profile_check.load_profile`)."""


def link_from(profile: dict[str, Any], group: str) -> Link | None:
    """The planner's link for one measured group (``intra``, ``inter`` or ``world``), each collective with its own
    fitted bandwidth and per-step latency; None when the profile did not measure that group."""
    data = profile["collectives"].get(group)
    if not data:
        return None
    return fitted_link(data, f"measured:{group}",
                       f"measured by dsbench calibrate over {data['size']} ranks ({profile.get('backend')}, {group})")


def compute_group(profile: dict[str, Any]) -> tuple[Link | None, Link | None]:
    """(within a node, across nodes) links of a profile: a one-node profile's ``world`` is its intra-node link, and
    with one rank per node ``world`` is the link across nodes (calibrate then measures no separate ``inter``)."""
    nodes = profile.get("nodes", 1)
    intra = link_from(profile, "intra") or (link_from(profile, "world") if nodes == 1 else None)
    one_per_node = nodes > 1 and nodes == profile.get("world_size")
    return intra, link_from(profile, "inter") or (link_from(profile, "world") if one_per_node else None)


def rate_at(by_micro: dict[str, float], micro: int, default: float) -> float:
    """The forward+backward rate at micro-batch ``micro``: measured there, else interpolated linearly in log2 of
    the micro-batch between the measured sizes (the nearest end beyond them); ``default`` when none was measured."""
    points = sorted((int(size), rate) for size, rate in by_micro.items())
    if not points:
        return default
    if micro <= points[0][0]:
        return points[0][1]
    for (low, low_rate), (high, high_rate) in zip(points, points[1:], strict=False):
        if micro <= high:
            share = (math.log2(micro) - math.log2(low)) / (math.log2(high) - math.log2(low))
            return low_rate + share * (high_rate - low_rate)
    return points[-1][1]
