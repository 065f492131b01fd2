"""Fit the GPU model's host constant, ``zero_host_us``, on one host's measured runs.

DeepSpeed's ZeRO engines keep the GPU waiting on the host at world size 1 (scripts/profile_gpu_step.py measured
23-130 ms of idle GPU per GPT-2 step on the lent H100), and how long depends on the host: the same cells ran
1.1-2.0x apart on three lent VMs (docs/planner.md). The constant is therefore a property of a host, fitted on that
host's runs of one model and checked on its runs of another, never carried between hosts as if it were the GPU's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from dsbench.plan.gpu_layout import OFFLOADED
from dsbench.plan.gpu_offload import offload_terms, partition_params, partition_tensors, ranks_per_node
from dsbench.plan.gpu_profiles import GpuProfile, profile_for
from dsbench.plan.gpu_time import engine_host_seconds, step_time
from dsbench.plan.oracle_csv import OracleRow
from dsbench.plan.replay import RowResult, predict_row, row_layouts
from dsbench.strategies import PLANNER


def session_of(row: OracleRow) -> str:
    """The measuring session of a dsbench run row: its source and the date its note gives (one lent machine per
    day in this project's runs)."""
    found = re.search(r"\d{4}-\d{2}-\d{2}", row.values.get("note") or "")
    return f"{row.source} {found.group(0) if found else '?'}"


def by_session(rows: Iterable[OracleRow]) -> dict[str, list[OracleRow]]:
    """The rows grouped by :func:`session_of`, in the order the sessions first appear."""
    sessions: dict[str, list[OracleRow]] = {}
    for row in rows:
        sessions.setdefault(session_of(row), []).append(row)
    return sessions


def _stage(row: OracleRow) -> int | None:
    how = PLANNER.get(row.values["strategy"])
    return how.zero if how is not None else None


def fit_zero_host_us(rows: Iterable[OracleRow], hw: GpuProfile | None = None) -> dict[int, float]:
    """µs per parameter tensor, by ZeRO stage, that makes each ZeRO row's predicted step equal its measured one:
    (measured − the model's GPU terms) / the step's tensor visits (gpu_time.engine_host_seconds at 1 µs). Where
    a stage has several rows, their mean."""
    fitted: dict[int, list[float]] = {}
    for row in rows:
        stage = _stage(row)
        if not stage or not row.values["measured_step_s"]:
            continue
        lay = row_layouts(row.values)[0]
        unit = replace(hw or profile_for(row.values["gpu"]), zero_host_us={stage: 1.0})
        time = step_time(lay, unit)
        gpu_only = time.seconds - time.terms["engine_host"]
        fitted.setdefault(stage, []).append((row.values["measured_step_s"] - gpu_only) / engine_host_seconds(lay, unit))
    return {stage: sum(v) / len(v) for stage, v in sorted(fitted.items())}


def predict_with_host(rows: Iterable[OracleRow], zero_host_us: dict[int, float]) -> list[RowResult]:
    """The rows predicted with a host's fitted constant in place of the profile's."""
    return [predict_row(row, replace(profile_for(row.values["gpu"]), zero_host_us=dict(zero_host_us)))
            for row in rows]


def host_check(cells: dict[str, OracleRow], hw: GpuProfile) -> dict[str, Any]:
    """``calibrate --check`` on a GPU: every check cell predicted with the measured GPU constants and the shipped
    host constant, then ``zero_host_us`` fitted on the cells' ZeRO rows (each stage on its own cell, so those
    cells are in sample afterwards) and every cell predicted again with it. ``cells`` maps each cell's strategy
    to its row (:func:`dsbench.plan.run_rows.oracle_row`)."""
    fitted = fit_zero_host_us(cells.values(), hw)
    refit = replace(hw, zero_host_us={**hw.zero_host_us, **fitted})
    out = []
    for name, row in cells.items():
        before, after = predict_row(row, hw), predict_row(row, refit)
        measured = row.values["measured_step_s"]
        out.append({"strategy": name, "measured_step_ms": round(measured * 1e3, 2),
                    "predicted_step_ms": round(before.predicted_step_s * 1e3, 2) if before.time else None,
                    "with_host_step_ms": round(after.predicted_step_s * 1e3, 2) if after.time else None,
                    "in_sample": _stage(row) in fitted,
                    "skipped": before.skipped})
    return {"cells": out, "zero_host_us": {str(stage): round(us, 1) for stage, us in fitted.items()}}


def _offload_pair_terms(offloaded: OracleRow, partner: OracleRow,
                        hw: GpuProfile | None = None) -> tuple[float, float, float]:
    """What a pair of runs says of ZeRO-Offload's two host constants: the step the offload added (the offloaded
    run's measured step less its partner's, the same cell without offload, so the GPU terms and their errors cancel)
    less the model's host link time, and the two quantities it is priced by (gpu_offload.offload_terms): the
    parameters the node's ranks step, and the partition's tensors."""
    lay = row_layouts(offloaded.values)[0]
    terms = offload_terms(lay, hw or profile_for(offloaded.values["gpu"]))
    added = offloaded.values["measured_step_s"] - partner.values["measured_step_s"]
    return added - terms["host link"], partition_params(lay) * ranks_per_node(lay), partition_tensors(lay)


def offload_pairs(rows: Iterable[OracleRow]) -> list[tuple[OracleRow, OracleRow]]:
    """Each offloaded row with its partner among ``rows``: the same model, GPUs and batch under the same ZeRO stage
    without offload (the first such row)."""
    rows = list(rows)
    same = ("model", "gpu", "gpus", "micro_batch", "global_batch", "seq_len", "recompute")
    pairs = []
    for off in (r for r in rows if r.values["strategy"] in OFFLOADED):
        sharding = OFFLOADED[off.values["strategy"]][0]
        partner = next((r for r in rows if r.values["strategy"] == sharding
                        and all(r.values[k] == off.values[k] for k in same)), None)
        if partner is not None:
            pairs.append((off, partner))
    return pairs


def fit_offload_rate(pairs: list[tuple[OracleRow, OracleRow]], tensor_us: float) -> float:
    """``offload_adam_params_per_s`` alone, the per-tensor cost held at ``tensor_us``: the parameters the node's
    ranks stepped over what the offload added less the host link and the tensors' time, over all the pairs."""
    rows = [_offload_pair_terms(off, partner) for off, partner in pairs]
    left = sum(added - tensors * tensor_us * 1e-6 for added, _, tensors in rows)
    if not rows or left <= 0:
        raise ValueError("the offload added no more than the host link and the per-tensor work: no CPU Adam rate")
    return sum(params for _, params, _ in rows) / left


def fit_offload(pairs: list[tuple[OracleRow, OracleRow]]) -> tuple[float, float]:
    """``offload_adam_params_per_s`` and ``offload_tensor_us`` from pairs of runs (:func:`_offload_pair_terms`):
    least squares of added = params / rate + tensors · cost over the pairs; two pairs of different sizes fix both
    exactly. A pair of runs of one size cannot tell the two apart."""
    rows = [_offload_pair_terms(off, partner) for off, partner in pairs]
    # normal equations of y = a·x1 + b·x2 (a = 1/rate, b = cost per tensor)
    s11 = sum(x1 * x1 for _, x1, _ in rows)
    s12 = sum(x1 * x2 for _, x1, x2 in rows)
    s22 = sum(x2 * x2 for _, _, x2 in rows)
    t1 = sum(y * x1 for y, x1, _ in rows)
    t2 = sum(y * x2 for y, _, x2 in rows)
    det = s11 * s22 - s12 * s12
    if len(rows) < 2 or det <= 1e-9 * s11 * s22:
        raise ValueError("fitting both offload constants needs two pairs of runs of different sizes")
    a, b = (t1 * s22 - t2 * s12) / det, (s11 * t2 - s12 * t1) / det
    return 1 / a, b * 1e6
