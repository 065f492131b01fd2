"""``dsbench calibrate --check``: a profile's predictions against short real runs, one per engine family (pure).

calibrate measures isolated pieces (a forward+backward, each collective, each engine's own work on a stack); a
training step also pays what none of them hold (the loop's data, loss, clipping, scheduler, metrics and the
framework around them). Right after calibrating, one short real cell per engine family is run and predicted from
the fresh profile; what it measured over what was predicted is that family's **step scale**, stored in the
profile (``check.step_scale``) and applied by the planner to every later prediction of the family
(:func:`dsbench.plan.estimate.estimate`, as its ``check`` term); for the pipeline families (:data:`PER_STEP`) the
difference, measured - predicted, is added to each step instead. It is a fitted constant, one per engine family and
never per cell: the cells chosen here set it, and every other strategy of the family is predicted out of sample.
"""

from __future__ import annotations

import statistics
from typing import Any

from dsbench.strategies import CHECKED, GPU_ONE_RANK

FAMILY_BEFORE = {"zero1": "zero", "pipe_engine": "pipeline", "autotp": "tensor"}
"""Families split from another since a profile was checked (2026-11-26 07:00), and the one whose scale such a profile
applies to them, as it was planned then. ``zero_offload`` (split from ``zero`` 2026-11-29) has no cell; see
:func:`step_scale`."""


GOAL = 0.10
"""A check cell predicted worse than this (relative step time) is printed as a warning: issue 27's out-of-sample
goal for the median cell."""


CHECK_STEPS, CHECK_WARMUP = 30, 10
"""Each check cell's optimizer steps and the warm-up among them (the step time is the wall clock over the other 20).
With 12 steps and 4 warm-up, a ZeRO cell's check differed from a compare of the same cell minutes later by up to 17%
(its steps vary by +-20% one to the next on this machine, and DeepSpeed's first ten still settle)."""


PER_STEP = frozenset({"pipeline", "pipe_engine"})
"""The families whose check is added to each step, not multiplied into it: torch's pipelining and DeepSpeed's
pipeline engine. Chosen on the split of their steps (``scripts/bench_accum_split.py``, stored in tests/data/runs/
cpu-calibrated/accum-split-20261128-1853-gpt2-mini; docs/planner.md): their micro-steps are priced within 3.5%
and what they miss, 10-22 ms on gpt2-mini, is paid once a step (the tied embedding's all-reduce, clipping's and
the loss's collectives), so a ratio taken at one accumulation over-corrects at another: from 1 to 4 micro-steps per
replica, 8-21% too slow scaled, within 2.3% with the difference added. The data-parallel families keep the ratio
(ddp's miss is per micro-step: 0.8% scaled, -15% added)."""


def check_strategies(runnable: list[str]) -> list[str]:
    """The check cells among the strategies that can run the model on the ranks (``bench.tune.default_strategies``)."""
    return [name for name in CHECKED if name in runnable]


def gpu_check_strategies(ranks: int, runnable: list[str]) -> list[str]:
    """The check cells on CUDA GPUs: on one GPU :data:`dsbench.strategies.GPU_ONE_RANK`, else as on CPU ranks."""
    return list(GPU_ONE_RANK) if ranks == 1 else check_strategies(runnable)


def chosen_cells(every: list[str], chosen: list[str]) -> list[str] | str:
    """``calibrate --check-strategies``: the cells of ``every`` (the check's own, in its order) that ``chosen``
    names; or why not, one phrase naming the first name that is not one of them."""
    stray = next((name for name in chosen if name not in every), None)
    if stray is not None:
        return f"{stray[:60]!r} is not one of --check's cells ({', '.join(every)})"
    return [name for name in every if name in chosen]


def check_record(cells: list[dict[str, Any]], repeats: int = 1, chosen: list[str] | None = None) -> dict[str, Any]:
    """The profile's ``check`` section from the check cells, each ``{"strategy", "family", "measured_step_ms",
    "predicted_step_ms"}`` (predicted from the profile before any scale; measured: the median over the cell's
    ``repeats`` launches): every cell with its relative error, and per family the median of measured / predicted
    over its cells. ``chosen``: the cells ``--check-strategies`` named, recorded so that a family left out stays
    unscaled (:func:`step_scale`)."""
    rows = [{**cell, "error": cell["predicted_step_ms"] / cell["measured_step_ms"] - 1} for cell in cells]
    families = sorted({row["family"] for row in rows})
    scale = {family: statistics.median(row["measured_step_ms"] / row["predicted_step_ms"] for row in rows
                                       if row["family"] == family) for family in families}
    # the pipeline families' correction: measured - predicted, where positive (a family predicted too slow keeps
    # its scale: the model overpricing its work is no fixed cost)
    residual = {family: statistics.median(row["measured_step_ms"] - row["predicted_step_ms"] for row in rows
                                          if row["family"] == family) for family in families if family in PER_STEP}
    return {"goal": GOAL, "steps": CHECK_STEPS, "warmup": CHECK_WARMUP, "repeats": repeats, "cells": rows,
            "step_scale": scale, "step_residual_ms": {family: ms for family, ms in residual.items() if ms > 0},
            **({"chosen": list(chosen)} if chosen is not None else {})}


def step_scale(profile: dict[str, Any]) -> dict[str, float]:
    """The per-family step scale a checked profile carries (empty for an unchecked one). A profile checked before
    ZeRO-1, DeepSpeed's pipeline engine and AutoTP had their own cells (2026-11-26 07:00) scaled them with the
    family they were in (:data:`FAMILY_BEFORE`): read so. The offloaded ZeRO-1/2 (``zero_offload``) are unscaled
    where the profile timed the offload on its model (``rates.zero_offload_param_s``): better in 8 of the 12 stored
    runs that did (median cell error 5.9% vs 9.2%, worst 14.5% vs 21.2%; docs/planner.md). A profile without it
    priced the offload from the host link's guess, and ZeRO-2's scale corrected it: read so. A check whose cells
    ``--check-strategies`` chose (``check.chosen``) scales only the families it ran: the others were left out by
    choice, not by age."""
    check = profile.get("check") or {}
    scale = dict(check.get("step_scale") or {})
    if "chosen" in check:
        return scale
    guessed = "zero_offload_param_s" not in profile.get("rates", {})
    before = {**FAMILY_BEFORE, **({"zero_offload": "zero"} if guessed else {})}
    for family, was in before.items():
        if was in scale and family not in scale:
            scale[family] = scale[was]
    return scale


def step_residual(profile: dict[str, Any]) -> dict[str, float]:
    """Seconds a step of each :data:`PER_STEP` family pays beyond its prediction, from a profile checked since
    2026-11-28 19:20 (``check.step_residual_ms``; older checked profiles scale every family)."""
    return {family: ms / 1e3 for family, ms in ((profile.get("check") or {}).get("step_residual_ms") or {}).items()}
