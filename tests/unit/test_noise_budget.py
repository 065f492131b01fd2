"""scripts/noise_budget.py: a step time's run-to-run spread split into the steps, the launch and the hour, and what
it forecasts for issue 27's stability goal (two calibrations an hour apart predict every strategy within 5%).

Oracles: synthetic runs drawn with known parts (the split must recover them), a simulation of two calibrations (the
forecast's formula must match it), the order statistic's known variance, and the stored protocol runs of
2026-11-29 15:44-22:52 on this machine (the budget taken from their compares' launches must forecast how far their
check cells' predictions moved from one run to the next: other launches than the ones it was taken from).
"""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

import pytest

from tests.conftest import DATA, load_script
from tests.unit.test_time_model_oos import _agreement, this_machine_runs

STORED = DATA / "runs" / "cpu-calibrated"


def _script():
    return load_script("noise_budget")


def _draw(rng: random.Random, runs: int, cells: int, steps: int, step_sd: float, launch_sd: float,
          drift_sd: float) -> list[dict[str, list[list[float]]]]:
    """Runs of cells launched twice, each launch's steps log-normal around the cell's level, moved by the run's
    drift and the launch's offset."""
    out = []
    for _ in range(runs):
        run = {}
        for cell in range(cells):
            level = math.log(0.02 * (cell + 1)) + rng.gauss(0, drift_sd)
            run[f"cell{cell}"] = [[math.exp(level + offset + rng.gauss(0, step_sd)) for _ in range(steps)]
                                  for offset in (rng.gauss(0, launch_sd), rng.gauss(0, launch_sd))]
        out.append(run)
    return out


def test_the_split_recovers_the_parts_it_was_given():
    script = _script()
    runs = _draw(random.Random(0), runs=150, cells=6, steps=15, step_sd=0.10, launch_sd=0.04, drift_sd=0.03)
    budget = script.pooled(script.split(runs))
    assert budget["steps"] == pytest.approx(0.10 / math.sqrt(15), rel=0.1)
    assert budget["launch"] == pytest.approx(0.04, rel=0.15)
    assert budget["drift"] == pytest.approx(0.03, rel=0.15)
    assert budget["n_steps"] == 15


def test_a_cell_launched_once_or_seen_in_one_run_is_left_out():
    script = _script()
    runs = _draw(random.Random(1), runs=3, cells=2, steps=10, step_sd=0.1, launch_sd=0.0, drift_sd=0.0)
    runs[0]["cell0"] = runs[0]["cell0"][:1]
    runs[1]["cell0"] = runs[1]["cell0"][:1]  # cell0: twice in one run only
    runs[2]["lonely"] = [[0.1, 0.1], [0.1, 0.1]]
    assert set(script.split(runs)) == {"cell1"}


def test_the_median_s_variance_is_the_order_statistic_s():
    script = _script()
    rng = random.Random(2)
    for k in (3, 5):
        draws = [statistics.median(rng.gauss(0, 1) for _ in range(k)) for _ in range(40000)]
        assert script.median_variance(k) == pytest.approx(statistics.pvariance(draws) * k, rel=0.03)
    assert script.median_variance(1) == pytest.approx(1.0, rel=1e-4)
    assert script.median_variance(201) == pytest.approx(math.pi / 2, rel=0.01)  # the median's asymptotic cost
    with pytest.raises(ValueError, match="odd"):
        script.median_variance(4)


def test_the_forecast_is_a_simulation_of_two_calibrations():
    """Two calibrations an hour apart: each checks a family with the median of k launches of 20 steps; the machine
    drifts between them. The sd of the two predictions' log ratio is the formula's."""
    script = _script()
    budget = {"steps": 0.03, "launch": 0.04, "drift": 0.02, "n_steps": 15}
    rng = random.Random(3)
    step_at_20 = budget["steps"] * math.sqrt(15 / 20)

    def calibration() -> float:
        drift = rng.gauss(0, budget["drift"])
        return drift + statistics.median(rng.gauss(0, budget["launch"]) + rng.gauss(0, step_at_20) for _ in range(3))

    ratios = [calibration() - calibration() for _ in range(40000)]
    assert script.agreement_sd(budget, 3) == pytest.approx(statistics.pstdev(ratios), rel=0.03)
    assert script.all_within(0.05, 1) == pytest.approx(0.6827, abs=1e-3)  # one sd: the normal's 68.27%
    assert script.all_within(0.05, 3) == pytest.approx(0.6827 ** 3, abs=1e-3)


def _this_machine(model: str) -> list[Path]:
    return [STORED / name for name in this_machine_runs(model)]


def _checks_moved(model: str) -> tuple[float, float]:
    """The rms log ratio of the check cells' predictions from one run's calibration to the next's (both predicting
    the later compare), and the share within 5%."""
    logs = []
    runs = this_machine_runs(model)
    for earlier, later in zip(runs[:-1], runs[1:], strict=True):
        checked = set.intersection(*({cell["strategy"] for cell in _profile(run)["check"]["cells"]}
                                     for run in (earlier, later)))
        logs += [math.log(ratio) for name, ratio in _agreement(earlier, later).items() if name in checked]
    return (math.sqrt(statistics.fmean(log * log for log in logs)),
            sum(abs(math.exp(log) - 1) <= 0.05 for log in logs) / len(logs))


def _profile(run: str) -> dict:
    return json.loads((STORED / run / "profile.json").read_text())


@pytest.mark.parametrize("model, observed", [("gpt2-tiny", 0.057), ("llama-tiny", 0.061), ("gpt2-mini", 0.035)])
def test_the_compares_launches_forecast_how_far_the_checks_moved(model, observed):
    """The budget from each model's compare launches (7-8 runs, 2 launches a cell, 15 steps) forecasts the sd of its
    check cells' predicted ratio between consecutive calibrations, at their 3 launches of 20 steps, within 1.5
    points: 7.0% against 5.7% (gpt2-tiny), 5.8% against 6.1% (llama-tiny), 4.3% against 3.5% (gpt2-mini). The
    forecast's chance that every family agrees within 5% at 3 launches is 1-14%; at 1001 launches (the drift alone)
    35% on gpt2-tiny and 45% on llama-tiny, against 66% at 9 launches on gpt2-mini, whose compares show no drift."""
    script = _script()
    budget = script.pooled(script.split([script.cell_launches(run) for run in _this_machine(model)]))
    moved, within = _checks_moved(model)
    assert moved == pytest.approx(observed, abs=0.002)
    assert script.agreement_sd(budget, 3) == pytest.approx(moved, abs=0.015)
    # the forecast share of one check within 5% against the observed: 52% vs 60%, 61% vs 64%, 74% vs 88%
    assert script.all_within(script.agreement_sd(budget, 3), 1) == pytest.approx(within, abs=0.15)
    families = len(_checked_families(model))
    assert script.all_within(script.agreement_sd(budget, 3), families) < 0.15
    assert (script.all_within(script.agreement_sd(budget, 1001), families) < 0.5) == (model != "gpt2-mini")


def _checked_families(model: str) -> set[str]:
    """The families the model's last calibration on this machine scaled from its check."""
    return set(_profile(this_machine_runs(model)[-1])["check"]["step_scale"])


def test_a_launch_s_steps_are_its_measured_ones_and_a_cut_line_is_left_out(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"type": "header"}\n{"type": "step", "warmup": true, "step_time_s": 9.0}\n'
                       '{"type": "step", "warmup": false, "step_time_s": 0.5}\n[1]\n'
                       '{"type": "step", "warmup": false, "step_time_s": 0.7}\n'
                       '{"type": "step", "step_time_s": "x"}\n{"type": "step", "step_time_s": NaN}\n'
                       '{"type": "step", "step_time_s": -1}\n{"type": "step", "step_time_s": true}\n'
                       '{"type": "step", "warm')
    assert _script().launch_steps(metrics) == [0.5, 0.7]
    folder = tmp_path / "dir.jsonl"
    folder.mkdir()
    assert _script().launch_steps(folder) == []
