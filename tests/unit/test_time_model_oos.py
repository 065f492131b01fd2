"""The CPU time model out of sample (issue 27): calibrate first, compare after, every cell predicted from the profile.

Oracle: ``tests/data/runs/cpu-calibrated/oos-DATE-TIME-MODEL/``, each written by issue 27's protocol
(``scripts/bench_time_model.py``: ``dsbench calibrate --num-gpus 2 --model M [--check]``, then a fresh
``dsbench compare --repeats 2`` of the strategies) and stored before any change it then checks. The measured step
time is the compare's wall-clock window. The goals: median |error| <= 10%, worst <= 20%, Spearman's rank correlation
of step times >= 0.9.
"""

from __future__ import annotations

import statistics

import pytest

from dsbench.plan.api import read_profile
from dsbench.plan.replay import spearman
from dsbench.plan.verify import measured_step_s, predict_cell
from dsbench.report.collect import collect
from tests.conftest import DATA

STORED = DATA / "runs" / "cpu-calibrated"


def _cells(case: str) -> dict[str, tuple[float, float]]:
    """strategy -> (measured step s, predicted step s)."""
    profile = read_profile(str(STORED / case / "profile.json"))
    out = {}
    for row in collect([STORED / case / "compare"]):
        estimate = predict_cell(row, profile)
        assert estimate is not None, row["strategy"]
        out[row["base_strategy"]] = (measured_step_s(row), estimate.step_s)
    return out


def _figures(cells: dict[str, tuple[float, float]]) -> tuple[float, float, float]:
    errors = [abs(predicted - measured) / measured for measured, predicted in cells.values()]
    rho = spearman([m for m, _ in cells.values()], [p for _, p in cells.values()])
    return statistics.median(errors), max(errors), rho


def _goals(case: str) -> None:
    median, worst, rho = _figures(_cells(case))
    assert median <= 0.10 and worst <= 0.20 and rho >= 0.9, (median, worst, rho)


@pytest.mark.xfail(strict=True, reason="no calibrate --check (the bias issue 27 reported): measured 2026-11-26 03:03, "
                   "ddp -21%, fsdp -16%, zero1 -16%, zero2 -26%, zero2_offload -33%, zero3 +18%")
def test_an_unchecked_calibration_misses_the_goals():
    _goals("oos-20261126-0303-gpt2-mini")


def test_an_unchecked_calibration_predicts_most_cells_too_fast():
    cells = _cells("oos-20261126-0303-gpt2-mini")
    fast = [name for name, (measured, predicted) in cells.items() if predicted < measured]
    assert sorted(fast) == ["ddp", "fsdp", "zero1", "zero2", "zero2_offload"]  # all but ZeRO-3


def test_a_checked_calibration_meets_the_goals_on_gpt2_mini():
    # measured 2026-11-26 03:19: median 6.4%, worst 10.7% (zero1, zero2), Spearman 0.97; without the check's
    # scales the same profile predicts median 27.9%, worst 36.2%
    _goals("oos-20261126-0319-gpt2-mini")


@pytest.mark.xfail(strict=True, reason="measured 2026-11-26 03:25: median 9.1% and Spearman 0.94 meet the goals, the "
                   "worst misses: pipe2 -26% (DeepSpeed's pipeline engine costs 12% more than torch's 1F1B, which the "
                   "planner prices alike), zero1 +22% (the ZeRO-2 check cell set the scale for both stages)")
def test_a_checked_calibration_meets_the_goals_on_llama_tiny_with_tensor_parallelism():
    _goals("oos-20261126-0325-llama-tiny")


def test_the_checked_llama_calibration_keeps_its_median_and_ranking():
    median, worst, rho = _figures(_cells("oos-20261126-0325-llama-tiny"))
    assert median <= 0.10 and rho >= 0.9 and worst <= 0.30, (median, worst, rho)


@pytest.mark.xfail(strict=True, reason="measured 2026-11-26 03:36: median 10.1%, worst 20.9%, Spearman 0.93: ddp's "
                   "check cell ran at 20.7 ms a step and the same cell in the compare two minutes later at 26.2 ms")
def test_a_checked_calibration_meets_the_goals_on_gpt2_tiny():
    _goals("oos-20261126-0336-gpt2-tiny")


def test_the_checked_gpt2_tiny_calibration_keeps_within_a_quarter_and_its_ranking():
    median, worst, rho = _figures(_cells("oos-20261126-0336-gpt2-tiny"))
    assert median <= 0.12 and worst <= 0.25 and rho >= 0.9, (median, worst, rho)


def test_the_check_holds_on_the_families_it_did_not_run_a_cell_of():
    """zero1 and zero2_offload at the cell zero2 set, DeepSpeed's pipeline engine at torch_pipe2's."""
    cells = _cells("oos-20261126-0319-gpt2-mini")
    for name in ("zero1", "zero2_offload", "pipe2"):
        measured, predicted = cells[name]
        assert abs(predicted - measured) / measured <= 0.15, (name, measured, predicted)
