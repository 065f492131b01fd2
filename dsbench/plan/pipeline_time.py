"""A pipeline's step: the schedule's bubble over its stages' work, and what the engine's own runtime adds (pure).

The bubble is a closed form (:func:`pipeline_seconds`); the runtime is measured by ``dsbench calibrate`` on stages
that compute almost nothing (dsbench/worker/calibrate_pipe.py), at several micro-batch counts, and priced as a part
per step and a part per pass a rank runs, each pass in the order torch runs them (plan/pipeline_peak.rank_passes,
checked against torch's own action lists).
"""

from __future__ import annotations

import statistics
from typing import Any

from dsbench.parallel import ZERO_BUBBLE_SHARE
from dsbench.plan.candidate import Candidate
from dsbench.plan.pipeline_peak import rank_passes
from dsbench.trainspec import INTERLEAVED

PASS_RATE = {"1f1b": "torch_pp_1f1b_pass_s", "interleaved": "torch_pp_interleaved_pass_s",
             "interleaved-zb": "torch_pp_interleaved_zb_pass_s", "deepspeed": "deepspeed_pipe_pass_s"}
"""The profile's rate of each torch_pp schedule and of DeepSpeed's pipeline engine (``deepspeed``, its
TrainSchedule's 1F1B order): seconds of the engine's own runtime per pass on a rank."""
STEP_RATE = {schedule: key.replace("_pass_s", "_step_s") for schedule, key in PASS_RATE.items()}
"""The same engines' runtime per step, whatever its passes (the fit's intercept, :func:`fit_runtime`): for
DeepSpeed's engine, its loss broadcast, gradient reduction and optimizer call; for torch's, each step's setup of
the micro-batches and its last waits."""


def pipeline_seconds(stages: list[float], micro_batches: int, virtual_stages: int = 1,
                     zero_bubble: bool = False) -> float:
    """A GPipe or 1F1B step of ``micro_batches`` through stages taking ``stages`` seconds each per micro-batch:
    the slowest stage works on every micro-batch, and the first micro-batch's pass through the others fills and
    drains the pipeline, (M - 1)·max + sum. With P equal stages it is (M + P - 1)·t, the bubble (P - 1)/(M + P - 1)
    of GPipe (Huang et al. 2019; ../shared/seeds/000 and 004). Interleaved over V chunks per stage, the fill and
    drain pass chunks of t/V: sum/V + (M - 1/V)·max, the bubble (P - 1)/(V·M + P - 1) (Narayanan et al. 2021
    sec. 2.2; measured against this in docs/benchmarks.md); the same written M·max + (sum - max)/V.

    Zero bubble (Qi et al. 2024, arXiv:2401.10241 sec. 2, ZB-H1) splits each backward into its input gradient B
    and its weight gradient W and moves the W passes into the bubble: it shrinks from (P-1)(F+B+W) to (P-1)(F+B-W),
    a third of it with F = B = W (a block's three matrix passes of equal FLOPs, the paper's assumption)."""
    fill_and_drain = (sum(stages) - max(stages)) / virtual_stages
    return micro_batches * max(stages) + fill_and_drain * (ZERO_BUBBLE_SHARE if zero_bubble else 1.0)


def schedule_of(cand: Candidate) -> str:
    """The torch schedule a pipelined candidate runs (DeepSpeed's pipeline engine runs 1F1B's order too)."""
    return "interleaved-zb" if cand.zero_bubble else "interleaved" if cand.virtual_stages > 1 else "1f1b"


def passes_per_rank(stages: int, micro_batches: int, virtual_stages: int, schedule: str) -> int:
    """Passes one rank runs in a step: a forward and a backward per micro-batch per chunk (the zero-bubble
    schedules split each backward in two). Every rank runs as many; rank 0's are counted."""
    return len(rank_passes(0, stages, micro_batches, virtual_stages, schedule))


def fit_runtime(passes: list[int], seconds: list[float]) -> tuple[float, float]:
    """(seconds per step, seconds per pass) from a schedule's steps timed at several pass counts: the least-squares
    line seconds = step + pass x passes. Noise can tilt a short line below zero: a negative intercept is refitted
    through the origin, a negative slope as a constant (the mean); one point is all per pass."""
    if len(set(passes)) == 1:
        return 0.0, max(0.0, statistics.fmean(seconds) / statistics.fmean(passes))
    mean_x, mean_y = statistics.fmean(passes), statistics.fmean(seconds)
    slope = (sum((x - mean_x) * (y - mean_y) for x, y in zip(passes, seconds, strict=True))
             / sum((x - mean_x) ** 2 for x in passes))
    if slope < 0:
        return max(0.0, mean_y), 0.0
    if mean_y - slope * mean_x < 0:
        return 0.0, max(0.0, sum(x * y for x, y in zip(passes, seconds, strict=True)) / sum(x * x for x in passes))
    return mean_y - slope * mean_x, slope


def pass_costs(measured: dict[str, Any]) -> dict[str, float]:
    """The profile's rates from calibrate's ``pipeline`` section: each schedule's steps on near-empty stages, timed
    at each of ``micro_batches`` (one count in profiles from before 2026-11-28 19:00: all of it per pass), fitted
    against the passes a rank runs in them (:func:`fit_runtime`); none measured, none stored."""
    out = {}
    counts = measured.get("micro_batches")
    counts = counts if isinstance(counts, list) else [counts]
    for schedule, timed in (measured.get("schedules") or {}).items():
        points = timed if isinstance(timed, list) else [timed]
        chunks = measured["virtual_stages"] if schedule in INTERLEAVED else 1
        passes = [passes_per_rank(measured["stages"], m, chunks, _order(schedule)) for m in counts]
        per_step, per_pass = fit_runtime(passes, [point["seconds"] for point in points])
        out[PASS_RATE[schedule]] = per_pass
        if len(points) > 1:
            out[STEP_RATE[schedule]] = per_step
    return out


def _order(schedule: str) -> str:
    """The pass order a timed schedule runs in: DeepSpeed's engine runs 1F1B's."""
    return "1f1b" if schedule == "deepspeed" else schedule


def engine_schedule(cand: Candidate) -> str:
    """The timed schedule (a :data:`PASS_RATE` key) a pipelined candidate runs: torch's, or DeepSpeed's engine."""
    return schedule_of(cand) if cand.engine == "torch" else "deepspeed"


def timing_name(schedule: str) -> str:
    """The name of a timed schedule's spread in a profile (``spread``) and in calibrate's summary."""
    return "DeepSpeed pipeline engine" if schedule == "deepspeed" else f"torch {schedule} schedule"


def schedule_seconds(cand: Candidate, micro_batches: int, costs: dict[str, tuple[float, float]]) -> float:
    """The pipeline engine's runtime in one step: the profile's cost per step of its schedule, torch's or DeepSpeed's
    engine, plus the passes of a rank x its cost per pass (``costs``: schedule -> (per step, per pass),
    ``Cluster.pipe_costs``; zero without a pipeline and without a measured cost)."""
    schedule = engine_schedule(cand)
    per_step, per_pass = costs.get(schedule, (0.0, 0.0))
    if cand.pp <= 1 or not (per_step or per_pass):
        return 0.0
    return per_step + passes_per_rank(cand.pp, micro_batches, cand.virtual_stages, _order(schedule)) * per_pass
