"""The calibrated time model against stored measurements (no process starts).

Oracle: ``tests/data/runs/cpu-calibrated/`` holds a real ``dsbench compare`` of gpt2-mini on 2 CPU ranks (10
strategies, 20 steps, 5 warm-up) and the profile ``dsbench calibrate --model gpt2-mini`` wrote on the same machine
minutes before. The planner predicts each cell's step time from the profile alone; the measured step time is the
wall-clock window's (global tokens per step / tokens per second). The bounds are issue 14's goals where they are
met, and the one strategy that misses them is named (strict xfail: it fails loudly once fixed).
"""

from __future__ import annotations

import statistics

import pytest

from dsbench.plan.verify import measured_step_s, predict_cell
from dsbench.report.collect import collect
from tests.conftest import DATA

STORED = DATA / "runs" / "cpu-calibrated"
PROFILE = str(STORED / "profile-gpt2-mini.json")


@pytest.fixture(scope="module")
def cells() -> dict[str, tuple[float, float, float, float]]:
    """strategy -> (measured step s, predicted step s, measured tokens/s, predicted tokens/s)."""
    out = {}
    for row in collect([STORED / "compare-gpt2-mini"]):
        estimate = predict_cell(row, PROFILE)
        assert estimate is not None, row["strategy"]
        out[row["strategy"]] = (measured_step_s(row), estimate.step_s, row["tokens_per_s"], estimate.tokens_per_s)
    return out


def _error(cell: tuple[float, float, float, float]) -> float:
    return abs(cell[1] - cell[0]) / cell[0]


def test_every_stored_strategy_is_predicted(cells):
    assert set(cells) == {"single", "ddp", "fsdp", "zero1", "zero2", "zero3", "zero2_offload", "zero3_offload",
                          "pipe2", "torch_pipe2"}


def test_the_median_step_time_error_is_within_ten_percent(cells):
    assert statistics.median(_error(c) for c in cells.values()) <= 0.10


@pytest.mark.parametrize("strategy", ["single", "ddp", "zero1", "zero2", "zero3", "zero2_offload", "zero3_offload",
                                      "pipe2", "torch_pipe2"])
def test_each_step_time_is_within_a_quarter(cells, strategy):
    assert _error(cells[strategy]) <= 0.25, cells[strategy]


@pytest.mark.xfail(strict=True, reason="FSDP2's per-unit work on CPU beyond its collectives (DTensor hooks, copy-in/"
                                       "out) is not modelled yet: predicted 37% short")
def test_fsdp_step_time_is_within_a_quarter(cells):
    assert _error(cells["fsdp"]) <= 0.25


def _ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing their mean rank (as Spearman's coefficient takes them)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _spearman(cells: dict[str, tuple[float, float, float, float]]) -> float:
    """Spearman's rank correlation of tokens/s, predicted vs measured, over the strategies."""
    names = sorted(cells)
    measured, predicted = _ranks([cells[n][2] for n in names]), _ranks([cells[n][3] for n in names])
    n = len(names)
    return 1 - 6 * sum((a - b) ** 2 for a, b in zip(measured, predicted, strict=True)) / (n * (n**2 - 1))


def test_the_predicted_ranking_follows_the_measured_one(cells):
    assert _spearman(cells) >= 0.85  # measured 0.88: what the model reaches now, kept from regressing


@pytest.mark.xfail(strict=True, reason="the goal, 0.9, is missed by FSDP2 (predicted 2nd fastest, measured 4th)")
def test_the_predicted_ranking_matches_the_measured_one(cells):
    assert _spearman(cells) >= 0.9
