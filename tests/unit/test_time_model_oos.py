"""The CPU time model out of sample (issue 27): calibrate first, compare after, every cell predicted from the profile.

Oracle: ``tests/data/runs/cpu-calibrated/oos-DATE-TIME-MODEL/``, each written by issue 27's protocol
(``scripts/bench_time_model.py``: ``dsbench calibrate --num-gpus 2 --model M [--check]``, then a fresh
``dsbench compare --repeats 2`` of the strategies) and stored before any change it then checks. The measured step
time is the compare's wall-clock window. The goals: median |error| <= 10%, worst <= 20%, Spearman's rank correlation
of step times >= 0.9.
"""

from __future__ import annotations

import json
import statistics

import pytest

from dsbench.plan.machine_profile import read_profile
from dsbench.plan.rank_correlation import spearman
from dsbench.plan.verify import measured_step_s, predict_cell
from dsbench.report.collect import collect
from tests.conftest import DATA

STORED = DATA / "runs" / "cpu-calibrated"


def _cells(case: str, cores: bool = True, scaled: bool = True) -> dict[str, tuple[float, float]]:
    """strategy -> (measured step s, predicted step s); ``cores=False`` predicts as from a profile that did not record
    its machine's cores (one rank per core, whatever the ranks: plan.machine_profile.core_share); ``scaled=False``
    without the check's per-family constants."""
    profile = read_profile(str(STORED / case / "profile.json"))
    if not cores:
        del profile.data["machine"]["cpus"]
    if not scaled:
        profile.data.pop("check", None)
    out = {}
    for row in collect([STORED / case / "compare"]):
        estimate = predict_cell(row, profile)
        assert estimate is not None, row.strategy
        out[row.base_strategy] = (measured_step_s(row), estimate.step_s)
    return out


def _errors(cells: dict[str, tuple[float, float]]) -> dict[str, float]:
    """strategy -> signed step-time error, predicted / measured - 1."""
    return {name: predicted / measured - 1 for name, (measured, predicted) in cells.items()}


def _figures(cells: dict[str, tuple[float, float]]) -> tuple[float, float, float]:
    errors = [abs(error) for error in _errors(cells).values()]
    rho = spearman([m for m, _ in cells.values()], [p for _, p in cells.values()])
    return statistics.median(errors), max(errors), rho


def _goals(case: str) -> None:
    median, worst, rho = _figures(_cells(case))
    assert median <= 0.10 and worst <= 0.20 and rho >= 0.9, (median, worst, rho)


def _agreement(earlier: str, later: str) -> dict[str, float]:
    """strategy -> the later run's profile's prediction of its compare's cell over the earlier run's profile's (the
    issue's stability goal: within 5%; ``scripts/bench_time_model.py --agree``)."""
    first = read_profile(str(STORED / earlier / "profile.json"))
    second = read_profile(str(STORED / later / "profile.json"))
    return {row.base_strategy: predict_cell(row, second).step_s / predict_cell(row, first).step_s
            for row in collect([STORED / later / "compare"])}


def _offload_at_zero2_scale(case: str) -> float:
    """zero2_offload's signed error as planned until 2026-11-29 20:35, when the offloaded ZeRO-1/2 took ZeRO-2's
    check scale: the unscaled prediction times that scale (a family's scale multiplies its whole step,
    plan.engine_time.check_seconds)."""
    measured, predicted = _cells(case, scaled=False)["zero2_offload"]
    scale = read_profile(str(STORED / case / "profile.json")).data["check"]["step_scale"]["zero"]
    return predicted * scale / measured - 1


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


def test_the_second_gpt2_mini_run_an_hour_later_meets_the_goals_again():
    # measured 2026-11-26 04:32, 73 minutes after the first: median 6.7%, worst 15.4% (fsdp), Spearman 0.97
    _goals("oos-20261126-0432-gpt2-mini")


@pytest.mark.xfail(strict=True, reason="the 03:19 and 04:32 calibrations predict the same cells up to 23% apart (ddp "
                   "74.3 against 57.3 ms); the machine moved as much: the compares' own ddp cells ran at 76.3 and "
                   "62.0 ms")
def test_two_calibrations_an_hour_apart_predict_every_strategy_within_five_percent():
    first = read_profile(str(STORED / "oos-20261126-0319-gpt2-mini" / "profile.json"))
    second = read_profile(str(STORED / "oos-20261126-0432-gpt2-mini" / "profile.json"))
    for row in collect([STORED / "oos-20261126-0432-gpt2-mini" / "compare"]):
        a, b = predict_cell(row, first).step_s, predict_cell(row, second).step_s
        assert abs(b / a - 1) <= 0.05, (row.strategy, a, b)


@pytest.mark.xfail(strict=True, reason="measured 2026-11-26 04:37, 72 minutes after the first: median 7.0%, Spearman "
                   "0.94, worst zero1 +25% (ZeRO-1 ran 21% faster than ZeRO-2, as at 03:25; the planner, from the "
                   "stack's per-reduction costs, has ZeRO-1 6% slower)")
def test_the_second_llama_run_an_hour_later_meets_the_goals():
    _goals("oos-20261126-0437-llama-tiny")


def test_zero1_is_faster_than_zero2_on_llama_tiny_in_both_runs_and_the_planner_says_otherwise():
    """The term that misses, pinned: the ZeRO family's scale is ZeRO-2's, and the two stages' relative cost comes
    from calibrate's 64-wide stack, not from the model's own layers."""
    for case in ("oos-20261126-0325-llama-tiny", "oos-20261126-0437-llama-tiny"):
        cells = _cells(case)
        assert cells["zero1"][0] < 0.85 * cells["zero2"][0]  # measured
        assert cells["zero1"][1] > cells["zero2"][1]  # predicted


@pytest.mark.xfail(strict=True, reason="measured 2026-11-26 04:43, 67 minutes after the first: median 7.8%, Spearman "
                   "0.97, worst ddp +24%: its check cell ran at 35.3 ms a step, the compare's at 28.5 ms (a 25 ms step "
                   "measured over 20 steps is half a second of a machine that moves)")
def test_the_second_gpt2_tiny_run_an_hour_later_meets_the_goals():
    _goals("oos-20261126-0443-gpt2-tiny")


@pytest.mark.parametrize("case", ["oos-20261126-0319-gpt2-mini", "oos-20261126-0325-llama-tiny",
                                  "oos-20261126-0336-gpt2-tiny", "oos-20261126-0432-gpt2-mini",
                                  "oos-20261126-0437-llama-tiny", "oos-20261126-0443-gpt2-tiny"])
def test_every_checked_run_meets_the_median_and_ranking_goals_and_beats_its_unchecked_self(case):
    """What holds in all six protocol runs: median <= 10.1%, Spearman >= 0.93, and the check's scales lower the
    median error below the same profile's without them (17-28%)."""
    median, worst, rho = _figures(_cells(case))
    assert median <= 0.101 and rho >= 0.93 and worst <= 0.27, (median, worst, rho)
    data = read_profile(str(STORED / case / "profile.json"))
    plain = type(data)(data.path, {key: value for key, value in data.data.items() if key != "check"})
    unchecked = {}
    for row in collect([STORED / case / "compare"]):
        unchecked[row.base_strategy] = (measured_step_s(row), predict_cell(row, plain).step_s)
    assert _figures(unchecked)[0] > 1.5 * median


# The third round, 2026-11-26 06:46-06:57, the first with ZeRO-1 as its own checked family (calibrate --check ran
# ddp, fsdp, zero1, zero2, zero3, torch_pipe2 and, for llama-tiny, torch_tp2), stored before any change it checks.
THIRD = ("oos-20261126-0646-gpt2-tiny", "oos-20261126-0651-gpt2-mini", "oos-20261126-0657-llama-tiny")


@pytest.mark.xfail(strict=True, reason="measured 2026-11-26 06:46-06:57: gpt2-tiny median 6.4% but worst pipe2 -24% "
                   "(DeepSpeed's pipeline engine at torch_pipe2's scale); gpt2-mini median 12.0%, worst pipe2 -30%; "
                   "llama-tiny median 25.5%, worst ddp +35%: every one of its check cells ran 19-35% slower than "
                   "both compare repeats of the same cell minutes later")
@pytest.mark.parametrize("case", THIRD)
def test_the_third_round_meets_the_goals(case):
    _goals(case)


def _wall_step_ms(folder) -> dict[str, list[float]]:
    """strategy -> each run's wall-clock step time, ms (the window over its measured steps)."""
    out: dict[str, list[float]] = {}
    for row in collect([folder]):
        out[row.base_strategy] = [1e3 * run.summary.throughput.step_s for run in row.runs]
    return out


def test_the_third_llama_check_ran_slower_than_both_compare_repeats_of_every_cell():
    """Why the third llama-tiny round misses: not the model but the check's minutes. Each check cell (one launch)
    ran slower than both repeats of the same cell in the compare that followed, so every family's scale was set
    high and the checked prediction (median 25.5%) lost to the same profile without its scales (9.0%)."""
    case = STORED / "oos-20261126-0657-llama-tiny"
    check, compare = _wall_step_ms(case / "check"), _wall_step_ms(case / "compare")
    assert sorted(check) == ["ddp", "fsdp", "torch_pipe2", "torch_tp2", "zero1", "zero2", "zero3"]
    slower = {name: steps[0] / max(compare[name]) for name, steps in check.items()}
    assert all(ratio > 1 for name, ratio in slower.items() if name != "torch_tp2"), slower
    assert statistics.median(slower.values()) > 1.15, slower
    median, _, _ = _figures(_cells("oos-20261126-0657-llama-tiny"))
    data = read_profile(str(case / "profile.json"))
    plain = type(data)(data.path, {key: value for key, value in data.data.items() if key != "check"})
    unchecked = {row.base_strategy: (measured_step_s(row), predict_cell(row, plain).step_s)
                 for row in collect([case / "compare"])}
    assert _figures(unchecked)[0] < median / 2


def test_with_its_own_check_cell_zero1_is_no_longer_the_worst_cell():
    """ZeRO-1's own family (2026-11-26 07:00): in the third round it is within 12.5% on the GPT-2 models; on
    llama-tiny the slow check minutes put it at +24%, as they put every family."""
    for case in THIRD[:2]:
        cells = _cells(case)
        errors = {name: abs(predicted / measured - 1) for name, (measured, predicted) in cells.items()}
        assert errors["zero1"] <= 0.125 and errors["zero1"] < max(errors.values()), errors


# The fourth round, 2026-11-26 07:33-07:44: DeepSpeed's pipeline engine and AutoTP checked on their own, and the
# CPU planner's interleaved 1F1B term (written before this round) on gpt2-mini's torch_pipe2_interleaved2.
FOURTH = ("oos-20261126-0733-gpt2-tiny", "oos-20261126-0738-gpt2-mini", "oos-20261126-0744-llama-tiny")


@pytest.mark.parametrize("case", FOURTH[1:])
def test_the_fourth_round_meets_the_goals_on_gpt2_mini_and_llama_tiny(case):
    # measured: gpt2-mini median 2.5%, worst 7.8% (interleaved), Spearman 0.98; llama-tiny 2.1%, 8.9% (fsdp), 1.00
    _goals(case)


@pytest.mark.xfail(strict=True, reason="measured 2026-11-26 07:33: median 8.2% and Spearman 0.90 meet the goals, the "
                   "worst misses: zero1 +26.7% (its check cell ran at 65.7 ms a step, the compare's two repeats "
                   "minutes later at about 52 ms: the check's minute again)")
def test_the_fourth_round_meets_the_goals_on_gpt2_tiny():
    _goals(FOURTH[0])


def test_the_planner_prices_interleaved_1f1b_out_of_sample():
    """The interleaved term (bubble (P-1)/(V·M+P-1), V times the sends) was written before this compare ran, and no
    check cell of interleaved 1F1B exists: it takes torch_pipe2's pipeline scale."""
    measured, predicted = _cells(FOURTH[1])["torch_pipe2_interleaved2"]
    assert abs(predicted / measured - 1) <= 0.10, (measured, predicted)  # measured: -7.8%


# The fifth round, 2026-11-26 22:00 and 22:12: llama-tiny with torch_tp's sequence parallelism and vocabulary-
# parallel loss, priced by the CPU planner from 17:00 that day (before either run), and Ulysses' own check cell.
FIFTH = ("oos-20261126-2200-llama-tiny", "oos-20261126-2212-llama-tiny")


@pytest.mark.parametrize("case", FIFTH)
def test_torch_tp_s_sequence_parallelism_is_priced_within_ten_percent_out_of_sample(case):
    """No check cell of its own: it takes torch_tp2's scale (measured: -7.8%, -6.1%)."""
    measured, predicted = _cells(case)["torch_tp2_sp"]
    assert abs(predicted / measured - 1) <= 0.10, (measured, predicted)


@pytest.mark.parametrize("case", FIFTH)
def test_the_vocabulary_parallel_loss_runs_slower_than_priced(case):
    """The miss pinned (measured: -16.1%, -13.9%): the loss on vocabulary shards costs more than its all-reduces
    and 1/t of the head, and no calibrated figure holds its DTensor work. It measured no faster than plain
    torch_tp2, whose head is whole on every rank."""
    cells = _cells(case)
    measured, predicted = cells["torch_tp2_lp"]
    assert -0.20 <= predicted / measured - 1 <= -0.10, (measured, predicted)
    assert measured > cells["torch_tp2"][0] * 0.99


@pytest.mark.xfail(strict=True, reason="measured 2026-11-26 22:00 and 22:12: medians 10.5% and 6.4%, Spearman 0.93 "
                   "and 0.98, worst zero3 +40.8% and zero1 +46.2%: each a check cell that ran 34-44% slower than "
                   "both compare repeats of the same cell minutes later")
@pytest.mark.parametrize("case", FIFTH)
def test_the_fifth_round_meets_the_goals(case):
    _goals(case)


def test_the_fifth_round_keeps_its_ranking_and_the_check_cells_minute_is_its_worst_cell():
    for case, worst in zip(FIFTH, ("zero3", "zero1"), strict=True):
        cells = _cells(case)
        errors = {name: abs(predicted / measured - 1) for name, (measured, predicted) in cells.items()}
        assert max(errors, key=errors.get) == worst
        check, compare = _wall_step_ms(STORED / case / "check"), _wall_step_ms(STORED / case / "compare")
        assert check[worst][0] > 1.3 * max(compare[worst])
        _, _, rho = _figures(cells)
        assert rho >= 0.9  # measured 0.93 and 0.98


def test_three_launches_per_check_cell_keep_the_median_and_ranking_and_every_cell_in_range():
    """``calibrate --check-repeats 3`` (2026-11-26 22:33, llama-tiny): each family's scale from the median of three
    interleaved launches. Measured: median 5.4%, Spearman 0.99; the worst cell torch_pipe2 +22.3% misses the 20%
    goal, its three check launches all slower than both compare repeats."""
    case = "oos-20261126-2233-llama-tiny"
    assert read_profile(str(STORED / case / "profile.json")).data["check"]["repeats"] == 3
    cells = _cells(case)
    median, worst, rho = _figures(cells)
    assert median <= 0.06 and rho >= 0.98 and worst <= 0.23, (median, worst, rho)
    check = _wall_step_ms(STORED / case / "check")
    assert all(len(launches) == 3 for launches in check.values())
    assert min(check["torch_pipe2"]) > max(_wall_step_ms(STORED / case / "compare")["torch_pipe2"])


def test_with_the_loss_parallel_head_calibrated_and_three_check_launches_the_goals_are_met():
    """2026-11-26 22:54 (llama-tiny, ``--check-repeats 3``, the first profile with ``torch_tp_lp_head_s``): median
    5.4%, worst torch_tp2 -15.1%, Spearman 0.99."""
    case = "oos-20261126-2254-llama-tiny"
    assert read_profile(str(STORED / case / "profile.json")).data["rates"]["torch_tp_lp_head_s"] > 0
    _goals(case)
    measured, predicted = _cells(case)["torch_tp2_lp"]
    assert abs(predicted / measured - 1) <= 0.10, (measured, predicted)  # held out: -9.5%


def test_the_zero_bubble_schedule_is_priced_within_ten_percent_out_of_sample():
    """2026-11-27 00:05 (gpt2-mini): the zero-bubble term (a third of the interleaved fill and drain, Qi et al. 2024)
    was written before this compare and has no check cell (torch_pipe2's scale). Measured: -6.4%; interleaved 1F1B
    +3.5%."""
    cells = _cells("oos-20261127-0005-gpt2-mini")
    for name in ("torch_pipe2_zb2", "torch_pipe2_interleaved2"):
        measured, predicted = cells[name]
        assert abs(predicted / measured - 1) <= 0.10, (name, measured, predicted)


def test_three_check_launches_on_gpt2_mini():
    """2026-11-27 02:25 (gpt2-mini, ``--check-repeats 3``): the median and ranking goals met (6.7%, Spearman 0.99),
    every cell whose family has a check within 10.3%; the worst case missed by torch_pipe2's held-out options
    (interleaved -19.4%, zero-bubble -21.8%), which ran no faster than torch_pipe2 itself in this compare."""
    cells = _cells("oos-20261127-0225-gpt2-mini")
    median, worst, rho = _figures(cells)
    assert median <= 0.10 and rho >= 0.9, (median, rho)
    options = ("torch_pipe2_zb2", "torch_pipe2_interleaved2")
    checked = {name: p / m - 1 for name, (m, p) in cells.items() if name not in (*options, "zero2_offload")}
    assert all(abs(e) <= 0.105 for e in checked.values()), checked
    assert all(-0.23 < cells[n][1] / cells[n][0] - 1 < -0.15 for n in options), {n: cells[n] for n in options}


def test_a_second_run_an_hour_later_and_the_two_calibrations_nearly_agree():
    """2026-11-27 03:39, 74 minutes after 02:25 (both gpt2-mini, ``--check-repeats 3``): median 6.7% again,
    Spearman 0.94, worst torch_pipe2_zb2 -23.6% (held out; it ran 12% slower than torch_pipe2 on 2 CPU ranks).
    The two calibrations predict the later compare's cells within 6.9% of each other, 9 of 10 within the issue's
    5% (pipe2 +6.9%); two calibrations with one check launch, 2 h 20 min apart, differed by up to 16.3%."""
    case = "oos-20261127-0339-gpt2-mini"
    cells = _cells(case)
    median, worst, rho = _figures(cells)
    assert median <= 0.10 and rho >= 0.9, (median, rho)
    measured, predicted = cells["torch_pipe2_zb2"]
    assert -0.25 < predicted / measured - 1 < -0.20
    earlier = read_profile(str(STORED / "oos-20261127-0225-gpt2-mini" / "profile.json"))
    later = read_profile(str(STORED / case / "profile.json"))
    ratios = {row.base_strategy: predict_cell(row, later).step_s / predict_cell(row, earlier).step_s
              for row in collect([STORED / case / "compare"])}
    assert max(abs(r - 1) for r in ratios.values()) < 0.07, ratios
    assert sum(abs(r - 1) <= 0.05 for r in ratios.values()) == 9, ratios


def test_three_check_launches_on_gpt2_tiny():
    """2026-11-27 04:55 (gpt2-tiny, ``--check-repeats 3``, the first such run at this size): median 8.4%, Spearman
    1.00, the worst case missed by zero1 +29.3% and zero2 +20.0%. Their check launches ran 122.6, 70.2, 63.8 ms
    (zero1) and 136.1, 76.7, 59.4 ms (zero2) one after another, a slow spell that the median of three kept
    (70.2 and 76.7 ms against the compare's 54.3 and 63.9): the scale they set is high by that much."""
    case = "oos-20261127-0455-gpt2-tiny"
    cells = _cells(case)
    median, worst, rho = _figures(cells)
    assert median <= 0.10 and rho >= 0.9, (median, rho)
    assert 0.28 < cells["zero1"][1] / cells["zero1"][0] - 1 < 0.31, cells["zero1"]
    windows = [json.loads((cell / "summary.json").read_text())["throughput"]
               for cell in (STORED / case / "check" / "cells").glob("zero1-*")]
    runs = sorted(window["window_s"] / window["steps"] for window in windows)
    assert runs[-1] > 1.7 * runs[0], runs  # the slow spell: the slowest launch at ~2x the fastest


def test_the_split_backward_prices_the_zero_bubble_schedule_out_of_sample():
    """2026-11-27 05:13 (gpt2-mini, ``--check-repeats 3``), the first profile with calibrate's split-backward cost
    (``zb_split_layer_s``, written before the compare): median 4.1%, Spearman 0.99; the held-out torch_pipe2_zb2
    +6.0% and interleaved -0.3%; the worst case ddp and fsdp +19-21%, on scales their slow check launches set.
    The profile before it (03:39) has no split cost: it charges zb2 none."""
    case = "oos-20261127-0513-gpt2-mini"
    assert read_profile(str(STORED / case / "profile.json")).data["rates"]["zb_split_layer_s"] > 0
    cells = _cells(case)
    median, worst, rho = _figures(cells)
    assert median <= 0.10 and rho >= 0.9, (median, rho)
    for name in ("torch_pipe2_zb2", "torch_pipe2_interleaved2"):
        measured, predicted = cells[name]
        assert abs(predicted / measured - 1) <= 0.07, (name, measured, predicted)
    assert "zb_split_layer_s" not in read_profile(str(STORED / "oos-20261127-0339-gpt2-mini" /
                                                      "profile.json")).data["rates"]


def test_llama_tiny_with_three_check_launches_again():
    """2026-11-27 06:29 (llama-tiny, ``--check-repeats 3``): median 8.0%, Spearman 0.99; the worst case missed by
    torch_tp2 +23.3% and pipe2 +22.5%, whose compare repeats ran 24-28% apart minutes from each other (torch_tp2
    138.4 and 105.4 ms); before the check's scales the calibration was 35% fast at the median."""
    cells = _cells("oos-20261127-0629-llama-tiny")
    median, worst, rho = _figures(cells)
    assert median <= 0.10 and rho >= 0.9, (median, rho)
    assert 0.20 < worst < 0.25, worst


FOUR_RANKS = "oos-20261127-0828-llama-tiny-4ranks"
"""``dsbench compare --strategies ddp,torch_pipe2,torch_tp2,torch_3d_tp2_pp2 --world-sizes 4 --models llama-tiny
--repeats 2 --profile P`` at 08:28 with P the 06:29 llama-tiny calibration (2 ranks, copied beside it): torch_3d out
of sample, beside its parts, on 4 ranks that share the machine's 2 cores."""


@pytest.mark.xfail(strict=True, reason="measured 2026-11-27 08:28: median 4.1%, Spearman 1.0, but torch_pipe2 "
                   "+22.8%, likely because its stages idle in the bubble and lend their core to the rank beside "
                   "them, which core_share charges as if both were busy")
def test_torch_3d_on_four_ranks_meets_the_goals():
    _goals(FOUR_RANKS)


def test_torch_3d_on_four_ranks_with_the_cores_shared():
    """With the ranks' share of the 2 cores priced (plan.machine_profile.core_share: 2 cores / 4 ranks, against the
    profile's 2 / 2; written after this compare, from the cores alone, nothing fitted): median 4.1%, Spearman 1.0,
    torch_3d -1.3% and ddp -1.5%. Without it, the profile's one-rank-per-core rates put every cell 34-46% fast."""
    cells = _cells(FOUR_RANKS)
    median, worst, rho = _figures(cells)
    assert median <= 0.10 and rho == pytest.approx(1.0), (median, rho)
    measured, predicted = cells["torch_3d_tp2_pp2"]
    assert abs(predicted / measured - 1) <= 0.05
    unshared = {name: predicted / measured for name, (measured, predicted) in _cells(FOUR_RANKS, cores=False).items()}
    assert all(0.50 < ratio < 0.70 for ratio in unshared.values()), unshared


FOUR_RANKS_LATER = "oos-20261127-0838-llama-tiny-4ranks"
"""The held-out check of core_share, run after it was written: a fresh ``dsbench calibrate --num-gpus 2 --model
llama-tiny --check`` (08:35), then ``dsbench compare --strategies ddp,fsdp,zero2,torch_pipe2,torch_tp2,
torch_3d_tp2_pp2 --world-sizes 4 --models llama-tiny --repeats 2 --profile P`` (08:38)."""


@pytest.mark.xfail(strict=True, reason="measured 2026-11-27 08:38: median 24%, Spearman 1.0: fsdp -29.7% and zero2 "
                   "-33.7% (their collectives ran on the shared cores too, priced at the 2-rank links), torch_pipe2 "
                   "+30.8% and torch_3d +18.4% (likely the pipeline's idle stages lending their cores)")
def test_four_ranks_held_out_meet_the_goals():
    _goals(FOUR_RANKS_LATER)


def test_the_shared_cores_halve_the_error_held_out():
    """Out of sample for core_share itself: the order stays right (Spearman 1.0) and the median error falls from 44%
    (every cell 32-64% fast, one rank per core) to 24%, ddp -3.5% and torch_tp2 +3.0%."""
    cells = _cells(FOUR_RANKS_LATER)
    median, _, rho = _figures(cells)
    unshared = _figures(_cells(FOUR_RANKS_LATER, cores=False))[0]
    assert rho == pytest.approx(1.0) and median < 0.6 * unshared, (median, unshared)
    assert all(abs(cells[name][1] / cells[name][0] - 1) < 0.05 for name in ("ddp", "torch_tp2")), cells


NEW_MACHINE = "oos-20261127-1646-llama-tiny"
"""``python scripts/bench_time_model.py --models llama-tiny --check-repeats 3`` at 16:37 on another virtual machine
(another kernel build; the compare's cells 3-24% faster than at 06:29), with no change to the CPU time model since
the 06:29 run: a fresh calibration of a machine the model had never seen."""


@pytest.mark.xfail(strict=True, reason="measured 2026-11-27 16:46: median 5.5%, Spearman 0.99, worst torch_pipe2 "
                   "+31.6%: its three check launches ran 42.9, 28.6 and 46.4 ms and the compare's two 31.0 and "
                   "34.4 ms, so the median of the three set its family's scale high")
def test_llama_tiny_on_a_new_machine_meets_the_goals():
    _goals(NEW_MACHINE)


def test_llama_tiny_on_a_new_machine_misses_only_on_its_pipeline():
    """The same run: median 5.5% and Spearman 0.99 (goals met); every cell but torch_pipe2 within 13.5%."""
    cells = _cells(NEW_MACHINE)
    median, worst, rho = _figures(cells)
    assert median <= 0.10 and rho >= 0.9, (median, rho)
    misses = {name for name, error in _errors(cells).items() if abs(error) > 0.14}
    assert misses == {"torch_pipe2"} and 0.30 < worst < 0.33, (misses, worst)


NEW_MACHINE_GPT2_MINI = "oos-20261127-1704-gpt2-mini"
"""``python scripts/bench_time_model.py --models gpt2-mini --check-repeats 3`` at 16:56 on the same new machine,
right after NEW_MACHINE's run."""


def test_gpt2_mini_on_a_new_machine_meets_the_goals():
    """Median 8.3%, worst 19.6% (zero1 and zero3, both fast), Spearman 0.95: all three goals, out of sample; the held-
    out options of torch's pipeline (interleaved, zero-bubble) within 3.4%."""
    _goals(NEW_MACHINE_GPT2_MINI)
    error = _errors(_cells(NEW_MACHINE_GPT2_MINI))
    assert all(abs(error[name]) < 0.05 for name in ("torch_pipe2_interleaved2", "torch_pipe2_zb2")), error


FOUR_RANKS_NEW_MACHINE = "oos-20261127-1720-llama-tiny-4ranks"
"""``dsbench compare --strategies ddp,fsdp,zero2,torch_pipe2,torch_tp2,torch_3d_tp2_pp2 --world-sizes 4 --models
llama-tiny --repeats 2 --profile P`` at 17:20 on the new machine, P its 16:46 llama-tiny calibration (2 ranks, copied
beside it): core_share held out on a machine it had not seen."""


@pytest.mark.xfail(strict=True, reason="measured 2026-11-27 17:20: median 24.3%, Spearman 0.89: zero2 -45.8%, "
                   "torch_pipe2 +54.7%, torch_3d +35.1%, the same signs as the 08:38 run on the old machine")
def test_four_ranks_on_a_new_machine_meet_the_goals():
    _goals(FOUR_RANKS_NEW_MACHINE)


def test_four_ranks_on_a_new_machine_miss_as_on_the_old_one():
    """The shared cores again halve the median error (24.3% against 45.7% with one rank per core), ddp and torch_tp2
    within 8%, and the misses have the old machine's signs: the pipelines predicted slow, ZeRO-2 fast."""
    cells = _cells(FOUR_RANKS_NEW_MACHINE)
    median, _, _ = _figures(cells)
    unshared = _figures(_cells(FOUR_RANKS_NEW_MACHINE, cores=False))[0]
    assert median < 0.6 * unshared, (median, unshared)
    error = _errors(cells)
    assert abs(error["ddp"]) < 0.08 and abs(error["torch_tp2"]) < 0.08, error
    assert error["torch_pipe2"] > 0.3 and error["torch_3d_tp2_pp2"] > 0.3 and error["zero2"] < -0.3, error


NEW_MACHINE_AGAIN = "oos-20261127-1813-llama-tiny"
"""NEW_MACHINE's command again at 18:05, 88 minutes later, on the same machine."""


def test_llama_tiny_on_a_new_machine_an_hour_later_meets_the_goals():
    """Median 5.8%, worst torch_tp2 +12.5%, Spearman 0.98; torch_pipe2, the first run's miss, within 8%."""
    _goals(NEW_MACHINE_AGAIN)
    assert abs(_errors(_cells(NEW_MACHINE_AGAIN))["torch_pipe2"]) < 0.08


NEW_MACHINE_GPT2_TINY = "oos-20261127-1943-gpt2-tiny"
"""``python scripts/bench_time_model.py --models gpt2-tiny --check-repeats 3`` at 19:37 on the new machine, its first
gpt2-tiny run, with no change to the CPU time model since the 16:37 run."""


def test_gpt2_tiny_on_a_new_machine_meets_the_goals():
    """Median 8.2%, worst zero2_offload -14.8% (held out: it sets no scale), Spearman 1.00, although the profile
    before the check's scales was 32% fast at the median: every family's scale 1.06-1.65."""
    _goals(NEW_MACHINE_GPT2_TINY)
    error = _errors(_cells(NEW_MACHINE_GPT2_TINY))
    assert max(error, key=lambda name: abs(error[name])) == "zero2_offload", error


NEW_MACHINE_GPT2_MINI_AGAIN = "oos-20261127-1952-gpt2-mini"
"""NEW_MACHINE_GPT2_MINI's command again at 19:44, 168 minutes after it, on the same machine."""


def test_gpt2_mini_on_a_new_machine_hours_later_meets_the_goals_though_every_cell_is_fast():
    """Median 9.7%, worst torch_pipe2_zb2 -16.9%, Spearman 0.99: the goals hold, but all ten cells came out fast
    (-6.0% to -16.9%): the compare, minutes after the check, ran slower than the check's launches of every family."""
    _goals(NEW_MACHINE_GPT2_MINI_AGAIN)
    error = _errors(_cells(NEW_MACHINE_GPT2_MINI_AGAIN))
    assert len(error) == 10 and all(-0.17 < value < -0.05 for value in error.values()), error


NEW_MACHINE_GPT2_TINY_AGAIN = "oos-20261127-2044-gpt2-tiny"
"""NEW_MACHINE_GPT2_TINY's command again at 20:37, an hour after it, on the same machine."""


@pytest.mark.xfail(strict=True, reason="measured 2026-11-27 20:41: median 10.8% (goal 10%), Spearman 0.83 (goal 0.9), "
                   "worst torch_pipe2 -19.4% within 20%: zero2's two compare launches ran 58.3 and 63.7 ms, slower "
                   "than zero2_offload's 49.6 and 58.0 and than its own three check launches (48.2-58.5 ms)")
def test_gpt2_tiny_on_a_new_machine_an_hour_later_meets_the_goals():
    _goals(NEW_MACHINE_GPT2_TINY_AGAIN)


def test_gpt2_tiny_an_hour_later_misses_by_its_zero2_compare_running_slower_than_zero2_offload():
    """The worst cell stays within 20%, and the ranking breaks where the compare measured ZeRO-2 slower than ZeRO-2
    with the optimizer offloaded to the CPU, which does more work per step; the planner keeps them in that order."""
    cells = _cells(NEW_MACHINE_GPT2_TINY_AGAIN)
    median, worst, rho = _figures(cells)
    assert 0.10 < median < 0.11 and worst <= 0.20 and rho < 0.9, (median, worst, rho)
    (zero2, zero2_predicted), (offload, offload_predicted) = cells["zero2"], cells["zero2_offload"]
    assert zero2 > offload and zero2_predicted < offload_predicted, cells


THIRD_MACHINE_GPT2_TINY = "oos-20261128-0646-gpt2-tiny"
"""``python scripts/bench_time_model.py --models gpt2-tiny --check-repeats 3`` at 06:40 on the third machine (the
one of 2026-11-28), its first gpt2-tiny run; no change to the CPU time model since the 20:37 run it repeats."""


def test_gpt2_tiny_on_a_third_machine_meets_the_goals():
    """Median 4.9%, worst torch_pipe2 +14.8%, Spearman 0.90 (the goal's edge): the 20:37 run's misses (median
    10.8%, Spearman 0.83) did not recur, and every cell fell inside its predicted range."""
    _goals(THIRD_MACHINE_GPT2_TINY)
    error = _errors(_cells(THIRD_MACHINE_GPT2_TINY))
    assert len(error) == 8 and max(error, key=lambda name: abs(error[name])) == "torch_pipe2", error


THIRD_MACHINE_GPT2_TINY_AGAIN = "oos-20261128-0745-gpt2-tiny"
"""THIRD_MACHINE_GPT2_TINY's command again at 07:40, an hour after it, on the same machine."""


@pytest.mark.xfail(strict=True, reason="measured 2026-11-28 07:45: median 5.6% meets the goal, the worst and the "
                   "ranking miss: pipe2 -24.2% (its compare launches ran 67.1 ms a step, slower than fsdp's 43.9 and "
                   "torch_pipe2's 47.4) and Spearman 0.76")
def test_gpt2_tiny_on_a_third_machine_an_hour_later_meets_the_goals():
    _goals(THIRD_MACHINE_GPT2_TINY_AGAIN)


def test_two_gpt2_tiny_calibrations_an_hour_apart_on_the_third_machine_differ_as_the_machine_moved():
    """The stability goal (5%) missed again: the 07:40 profile predicts the 07:45 compare's cells up to 20% faster
    than the 06:40 profile does, and the machine moved as much: the compares' own ddp and fsdp cells ran 20-27%
    faster an hour later."""
    first = read_profile(str(STORED / THIRD_MACHINE_GPT2_TINY / "profile.json"))
    second = read_profile(str(STORED / THIRD_MACHINE_GPT2_TINY_AGAIN / "profile.json"))
    rows = collect([STORED / THIRD_MACHINE_GPT2_TINY_AGAIN / "compare"])
    ratios = {row.base_strategy: predict_cell(row, second).step_s / predict_cell(row, first).step_s for row in rows}
    assert len(ratios) == 8 and min(ratios.values()) < 0.85 and max(ratios.values()) <= 1.0, ratios
    before, after = _cells(THIRD_MACHINE_GPT2_TINY), _cells(THIRD_MACHINE_GPT2_TINY_AGAIN)
    assert all(after[name][0] < 0.85 * before[name][0] for name in ("ddp", "fsdp")), (before, after)


THIRD_MACHINE_LLAMA_TINY = "oos-20261128-0704-llama-tiny"
"""``python scripts/bench_time_model.py --models llama-tiny --check-repeats 3`` at 06:55 on the third machine, right
after THIRD_MACHINE_GPT2_TINY; no change to the CPU time model since the 18:13 run on the second machine."""


@pytest.mark.xfail(strict=True, reason="measured 2026-11-28 07:04: median 7.9% and Spearman 0.99 meet the goals, the "
                   "worst misses: ddp +27.1% (its three check launches ran 31.6-33.7 ms a step, the compare's minutes "
                   "later 25.8 ms, so the check's scale, 1.21, set it high)")
def test_llama_tiny_on_a_third_machine_meets_the_goals():
    _goals(THIRD_MACHINE_LLAMA_TINY)


def test_llama_tiny_on_a_third_machine_misses_only_by_the_check_cells_that_ran_slow():
    """The misses past 10% are the check-scaled families (ddp, fsdp, pipe2, zero1_tp2), all predicted too slow, as
    the check launches of those families ran slower than the compare's (the protocol's table had all 13 cells inside
    their predicted ranges)."""
    cells = _cells(THIRD_MACHINE_LLAMA_TINY)
    median, worst, rho = _figures(cells)
    assert median <= 0.10 and rho >= 0.9 and 0.2 < worst < 0.3, (median, worst, rho)
    error = _errors(cells)
    assert len(error) == 13 and {name for name, e in error.items() if abs(e) > 0.10} == {"ddp", "fsdp", "pipe2",
                                                                                         "zero1_tp2"}, error
    assert all(error[name] > 0 for name in ("ddp", "fsdp", "pipe2", "zero1_tp2"))


THIRD_MACHINE_GPT2_MINI = "oos-20261128-0718-gpt2-mini"
"""``python scripts/bench_time_model.py --models gpt2-mini --check-repeats 3`` at 07:12 on the third machine, after
THIRD_MACHINE_LLAMA_TINY: the three models on one machine within 45 minutes."""


@pytest.mark.xfail(strict=True, reason="measured 2026-11-28 07:18: median 6.5% meets the goal, the worst and the "
                   "ranking miss: zero1 -28.1% (its two compare launches ran 148.6 and 144.0 ms a step, its three "
                   "check launches minutes before 101.9-115.5 ms) and Spearman 0.89, since zero1 measured slower than "
                   "zero2")
def test_gpt2_mini_on_a_third_machine_meets_the_goals():
    _goals(THIRD_MACHINE_GPT2_MINI)


def test_gpt2_mini_on_a_third_machine_misses_by_one_cell():
    """Every cell but zero1 within 12.2%: the miss is one strategy's compare launches running slower than its own
    check launches, the noise the protocol keeps finding."""
    error = _errors(_cells(THIRD_MACHINE_GPT2_MINI))
    assert len(error) == 10 and error["zero1"] < -0.25
    assert all(abs(e) <= 0.125 for name, e in error.items() if name != "zero1"), error


FOUR_RANKS_CALIBRATED_FOUR = "oos-20261128-0335-llama-tiny-4ranks-calibrated4"
"""``dsbench calibrate --num-gpus 4 --model llama-tiny --check`` (03:24, 4 ranks on the machine's 2 cores), then
``dsbench compare --strategies ddp,fsdp,zero2,torch_pipe2,torch_tp2,torch_3d_tp2_pp2 --world-sizes 4 --models
llama-tiny --repeats 2 --profile P`` (03:30), on a third machine: the 4-rank compares above, priced from a profile
that measured 4 ranks sharing the cores (its collectives' latency included: a 4-rank all-reduce 5.2 ms per call)."""


@pytest.mark.xfail(strict=True, reason="measured 2026-11-28 03:35: median 15.7%, worst torch_tp2 -24.3%, Spearman "
                   "1.0: every cell but zero2 predicted 12-24% fast, launch-to-launch noise on shared cores (ddp's two "
                   "compare launches' median steps 67 and 85 ms, its check launch's minutes before 60)")
def test_four_ranks_calibrated_on_four_ranks_meet_the_goals():
    _goals(FOUR_RANKS_CALIBRATED_FOUR)


FOUR_RANKS_CALIBRATED_FOUR_AGAIN = "oos-20261129-0101-llama-tiny-4ranks-calibrated4"
"""The same two commands as :data:`FOUR_RANKS_CALIBRATED_FOUR` on 2026-11-29 (calibrate 00:56, compare 01:01),
nothing else running, after the pipeline engines' timing and the ZeRO-2 study (neither changed a 4-rank term).
Written before this test."""


def test_four_ranks_calibrated_on_four_ranks_meet_the_goals_a_day_later():
    """Median 2.6%, worst torch_3d_tp2_pp2 +14.7%, Spearman 1.0 (ddp +0.4%, fsdp -3.3%, zero2 -1.8%, torch_tp2
    +1.9%, torch_pipe2 -6.8%): the goals the 03:35 run missed with every cell but zero2 12-24% fast, from the same
    model. So that miss was its hour's launches, as its check launch against its compare launches said."""
    _goals(FOUR_RANKS_CALIBRATED_FOUR_AGAIN)
    median, worst, rho = _figures(_cells(FOUR_RANKS_CALIBRATED_FOUR_AGAIN))
    assert median <= 0.03 and worst <= 0.15 and rho == pytest.approx(1.0), (median, worst, rho)


def test_a_four_rank_calibration_prices_what_the_shared_cores_cost_the_collectives():
    """What the 2-rank profiles missed on 4 ranks (ZeRO-2 -34% and -46%, torch's pipeline +31% and +55%: the
    08:38 and 17:20 compares) is within 15% from a 4-rank calibration; the order stays right."""
    cells = _cells(FOUR_RANKS_CALIBRATED_FOUR)
    median, worst, rho = _figures(cells)
    error = _errors(cells)
    assert rho == pytest.approx(1.0) and median < 0.20 and worst < 0.25, (median, worst, rho)
    assert abs(error["zero2"]) < 0.05 and abs(error["torch_pipe2"]) < 0.15, error
    for case in (FOUR_RANKS_LATER, FOUR_RANKS_NEW_MACHINE):  # the same cells from a 2-rank profile
        before = _errors(_cells(case))
        assert before["zero2"] < -0.30 and before["torch_pipe2"] > 0.30, before


def test_a_plan_beyond_the_calibrated_ranks_and_the_cores_says_to_calibrate_there():
    from dsbench.plan.machine_profile import core_note

    two = read_profile(str(STORED / FOUR_RANKS_LATER / "profile.json")).data  # 2 ranks, 2 cores
    four = read_profile(str(STORED / FOUR_RANKS_CALIBRATED_FOUR / "profile.json")).data
    assert "dsbench calibrate --num-gpus 4" in core_note(two, 4)
    assert core_note(two, 2) is None and core_note(four, 4) is None
    assert core_note({**two, "device": "cuda:0"}, 4) is None


SCHEDULE_RUNTIME_GPT2_MINI = "oos-20261128-1616-gpt2-mini"
"""``python scripts/bench_time_model.py --models gpt2-mini --check-repeats 3`` at 16:11, the first protocol run whose
calibration timed torch's pipeline schedules (dsbench/worker/calibrate_pipe.py), on the machine of
THIRD_MACHINE_GPT2_MINI; written before this test."""


def test_gpt2_mini_with_the_schedule_runtime_meets_the_goals():
    _goals(SCHEDULE_RUNTIME_GPT2_MINI)


def test_the_schedule_runtime_brings_the_held_out_pipeline_schedules_within_five_percent():
    """Interleaved 1F1B and its zero-bubble form set no scale (only torch_pipe2 runs in the check): priced with the
    profile's cost per pass they are within 5%; with those costs dropped from the same profile (the check's scale
    kept) both are further off, predicted fast from their smaller bubble alone."""
    error = _errors(_cells(SCHEDULE_RUNTIME_GPT2_MINI))
    held_out = ("torch_pipe2_interleaved2", "torch_pipe2_zb2")
    assert all(abs(error[name]) <= 0.05 for name in held_out), error
    profile = read_profile(str(STORED / SCHEDULE_RUNTIME_GPT2_MINI / "profile.json"))
    assert {key for key in profile.data["rates"] if key.startswith("torch_pp_")} == {
        "torch_pp_1f1b_pass_s", "torch_pp_interleaved_pass_s", "torch_pp_interleaved_zb_pass_s"}
    profile.data["rates"] = {k: v for k, v in profile.data["rates"].items() if not k.startswith("torch_pp_")}
    for row in collect([STORED / SCHEDULE_RUNTIME_GPT2_MINI / "compare"]):
        if row.base_strategy in held_out:
            without = predict_cell(row, profile).step_s / measured_step_s(row) - 1
            assert without < error[row.base_strategy] - 0.04, (row.base_strategy, without)


SCHEDULE_RUNTIME_LLAMA_TINY = "oos-20261128-1635-llama-tiny"
"""``python scripts/bench_time_model.py --models llama-tiny --check-repeats 3`` at 16:29, right after
SCHEDULE_RUNTIME_GPT2_MINI on the same machine, the machine otherwise idle; written before this test."""


@pytest.mark.xfail(strict=True, reason="measured 2026-11-28 16:35: median 15.0%, worst pipe2 -20.7%, Spearman 0.98: "
                   "every family's compare cells ran 1-26% slower than its check launches minutes before")
def test_llama_tiny_with_the_schedule_runtime_meets_the_goals():
    _goals(SCHEDULE_RUNTIME_LLAMA_TINY)


def test_the_llama_tiny_miss_is_the_compare_running_slower_than_its_check():
    """The ranking holds; the scale misses because each family's compare launches ran slower than the three check
    launches that set its scale minutes before (their median), every family the same way."""
    median, worst, rho = _figures(_cells(SCHEDULE_RUNTIME_LLAMA_TINY))
    assert rho >= 0.95 and 0.10 < median < 0.20, (median, rho)
    check = read_profile(str(STORED / SCHEDULE_RUNTIME_LLAMA_TINY / "profile.json")).data["check"]
    checked = {cell["strategy"]: cell["measured_step_ms"] for cell in check["cells"]}
    compared = {row.base_strategy: measured_step_s(row) * 1e3
                for row in collect([STORED / SCHEDULE_RUNTIME_LLAMA_TINY / "compare"])}
    assert len(checked) == 10
    assert all(compared[name] >= checked[name] for name in checked), {n: compared[n] / checked[n] for n in checked}


SCHEDULE_RUNTIME_GPT2_TINY = "oos-20261128-1654-gpt2-tiny"
"""``python scripts/bench_time_model.py --models gpt2-tiny --check-repeats 3`` at 16:50, after
SCHEDULE_RUNTIME_LLAMA_TINY on the same machine, its profile with DeepSpeed's pipeline engine timed too
(``deepspeed_pipe_pass_s``); written before this test."""


def test_gpt2_tiny_with_both_pipeline_runtimes_meets_the_goals():
    _goals(SCHEDULE_RUNTIME_GPT2_TINY)
    rates = read_profile(str(STORED / SCHEDULE_RUNTIME_GPT2_TINY / "profile.json")).data["rates"]
    assert rates["deepspeed_pipe_pass_s"] > rates["torch_pp_1f1b_pass_s"] > 0


SCHEDULE_RUNTIME_GPT2_MINI_AGAIN = "oos-20261128-1716-gpt2-mini"
"""SCHEDULE_RUNTIME_GPT2_MINI's command again at 17:11, an hour after it, the same machine; its profile also times
DeepSpeed's pipeline engine. Written before this test."""


@pytest.mark.xfail(strict=True, reason="measured 2026-11-28 17:16: median 3.3% and Spearman 0.94 meet their goals, "
                   "the worst misses: zero2 +28.0%, its three check launches (124.4-156.2 ms a step) slower than its "
                   "two compare launches minutes later (120.7 ms)")
def test_gpt2_mini_an_hour_later_meets_the_goals():
    _goals(SCHEDULE_RUNTIME_GPT2_MINI_AGAIN)


def test_gpt2_mini_an_hour_later_keeps_its_median_and_the_held_out_schedules():
    median, worst, rho = _figures(_cells(SCHEDULE_RUNTIME_GPT2_MINI_AGAIN))
    assert median <= 0.05 and rho >= 0.9, (median, rho)
    error = _errors(_cells(SCHEDULE_RUNTIME_GPT2_MINI_AGAIN))
    assert abs(error["torch_pipe2_interleaved2"]) <= 0.05 and abs(error["torch_pipe2_zb2"]) <= 0.10, error


PIPELINE_CHECK_ADDED_GPT2_MINI = "oos-20261128-2010-gpt2-mini"
"""``python scripts/bench_time_model.py --models gpt2-mini --check-repeats 3`` at 20:05, the same machine three hours
after SCHEDULE_RUNTIME_GPT2_MINI_AGAIN: the first protocol profile that times the pipeline engines at three
micro-batch counts and stores the pipelines' check as milliseconds added to a step (``check.step_residual_ms``);
written before this test."""


def test_gpt2_mini_with_the_pipelines_check_added_meets_the_goals():
    # measured: median 7.0%, worst torch_pipe2_interleaved2 -17.0% (held out), Spearman 0.96
    _goals(PIPELINE_CHECK_ADDED_GPT2_MINI)
    profile = read_profile(str(STORED / PIPELINE_CHECK_ADDED_GPT2_MINI / "profile.json")).data
    assert set(profile["check"]["step_residual_ms"]) == {"pipeline", "pipe_engine"}
    assert profile["pipeline"]["micro_batches"] == [2, 4, 8] and profile["rates"]["deepspeed_pipe_step_s"] > 0


PIPELINE_CHECK_ADDED_LLAMA_TINY = "oos-20261128-2022-llama-tiny"
"""``python scripts/bench_time_model.py --models llama-tiny --check-repeats 3`` at 20:16, right after
PIPELINE_CHECK_ADDED_GPT2_MINI on the same machine, with the same two changes; written before this test."""


def test_llama_tiny_with_the_pipelines_check_added_meets_the_goals():
    # measured: median 4.7%, worst ulysses2 -10.1%, Spearman 0.99, every cell inside its predicted range
    _goals(PIPELINE_CHECK_ADDED_LLAMA_TINY)
    median, worst, rho = _figures(_cells(PIPELINE_CHECK_ADDED_LLAMA_TINY))
    assert median <= 0.05 and worst <= 0.11 and rho >= 0.95, (median, worst, rho)


AFTER_THE_PIPELINE_CHANGES_GPT2_TINY = "oos-20261128-2205-gpt2-tiny"
"""``python scripts/bench_time_model.py --models gpt2-tiny --check-repeats 3`` at 22:01, the first gpt2-tiny run
after the pipelines' per-step part and the step residual (PIPELINE_CHECK_ADDED_*); written before this test."""


@pytest.mark.xfail(strict=True, reason="measured 2026-11-28 22:05: median 1.9% and worst 10.4% (torch_pipe2) meet "
                   "their goals, Spearman 0.88 misses 0.9: fsdp and pipe2 ran 1.4% apart and swapped, and zero1, zero2 "
                   "and zero2_offload were predicted within 1% of each other (measured 51.7-58.7 ms)")
def test_gpt2_tiny_after_the_pipeline_changes_meets_the_goals():
    _goals(AFTER_THE_PIPELINE_CHANGES_GPT2_TINY)


def test_gpt2_tiny_after_the_pipeline_changes_misranks_only_near_ties():
    cells = _cells(AFTER_THE_PIPELINE_CHANGES_GPT2_TINY)
    median, worst, rho = _figures(cells)
    assert median <= 0.03 and worst <= 0.11 and rho >= 0.85, (median, worst, rho)
    measured = {name: m for name, (m, _) in cells.items()}
    predicted = {name: p for name, (_, p) in cells.items()}
    assert abs(measured["pipe2"] / measured["fsdp"] - 1) < 0.02  # the swapped pair, measured
    zero = [predicted[name] for name in ("zero1", "zero2", "zero2_offload")]
    assert max(zero) / min(zero) - 1 < 0.01  # the swapped trio, predicted


PIPELINES_ACROSS_NODES = "oos-20261128-2216-gpt2-tiny-2nodes"
"""The test bed (``dsbench testbed up --nodes 2 --slots 1 --bandwidth 1gbit``, a shaped link each way), then
``dsbench calibrate --hostfile H --model gpt2-tiny`` (22:14, no --check) and ``dsbench compare --hostfile H
--strategies ddp,zero2,torch_pipe2,pipe2 --models gpt2-tiny --repeats 2`` (22:16): one rank per node, so every
pipeline send and every gradient collective crosses the link. Written before this test."""


def test_pipelines_across_two_nodes_are_priced_from_the_link_without_an_engine_timing():
    """calibrate times the pipeline engines on one node only; across nodes the planner prices the stages' compute,
    the bubble and the sends at the fitted p2p link. Measured: torch_pipe2 -6.0%, pipe2 -10.2%, ddp +2.1%, zero2
    -22.1% (the ZeRO family without --check's correction, as on one node)."""
    profile = read_profile(str(STORED / PIPELINES_ACROSS_NODES / "profile.json"))
    assert profile.data["nodes"] == 2 and profile.data["pipeline"] is None
    errors = _errors(_cells(PIPELINES_ACROSS_NODES))
    assert abs(errors["torch_pipe2"]) <= 0.07 and abs(errors["pipe2"]) <= 0.11, errors
    assert abs(errors["ddp"]) <= 0.03 and -0.25 < errors["zero2"] < -0.15, errors


PIPELINES_TIMED_ACROSS_NODES = "oos-20261129-0051-gpt2-tiny-2nodes"
"""The same test bed and commands as :data:`PIPELINES_ACROSS_NODES`, the next day (2026-11-29: calibrate 00:50,
compare 00:51), with calibrate timing the pipeline engines over both ranks across the link. Written before this
test."""


def test_pipelines_across_two_nodes_are_priced_from_their_engines_timed_across_the_link():
    """calibrate now times torch's schedules and DeepSpeed's pipeline engine across nodes too, so the planner tells
    the two engines apart there: measured 48.2 ms (torch_pipe2) and 53.9 ms (pipe2) a step, predicted 52.6 and 57.1
    (+9.1%, +6.0%; the day before, without the timing, both 41.9 ms against 44.6 and 46.7, -6.0% and -10.2%). ddp
    +8.6%, zero2 -10.6%: every cell within 11%, and the four in the measured order."""
    profile = read_profile(str(STORED / PIPELINES_TIMED_ACROSS_NODES / "profile.json"))
    assert profile.data["nodes"] == 2 and profile.data["world_size"] == 2
    assert set(profile.data["pipeline"]["schedules"]) == {"1f1b", "interleaved", "interleaved-zb", "deepspeed"}
    cells = _cells(PIPELINES_TIMED_ACROSS_NODES)
    errors = _errors(cells)
    assert all(abs(error) <= 0.11 for error in errors.values()), errors
    (measured_torch, predicted_torch), (measured_ds, predicted_ds) = cells["torch_pipe2"], cells["pipe2"]
    assert measured_torch < measured_ds and predicted_torch < predicted_ds  # the engines apart, in the measured order
    _goals(PIPELINES_TIMED_ACROSS_NODES)  # median 8.9%, worst 10.6%, Spearman 1.0


AFTER_THE_SPLIT_LLAMA_TINY = "oos-20261129-0410-llama-tiny"
"""``python scripts/bench_time_model.py --models llama-tiny --check-repeats 3`` at 04:05 on 2026-11-29 (calibrate, then
the compare of 13 strategies from 04:10), nothing else running, after calibrate's measurements were split into
functions (worker/calibrate.py, worker/calibrate_engines.py: the same measurements, in the same order); written
before this test."""


def test_llama_tiny_a_day_later_meets_the_goals_and_its_pipelines_are_priced():
    """Median 3.0%, worst ddp +11.0%, Spearman 0.99; the cells whose family scale another cell set (the TP options,
    ZeRO-2 with offload) within 10%. The pipelines' check cells, predicted +47.9% (torch_pipe2) and +24.8% (pipe2)
    before their correction at 16:35 on 2026-11-28 (SCHEDULE_RUNTIME_LLAMA_TINY, a miss not explained), are within
    10% before it here (-13.1% and -9.7% at 20:16 that day)."""
    _goals(AFTER_THE_SPLIT_LLAMA_TINY)
    cells = _cells(AFTER_THE_SPLIT_LLAMA_TINY)
    median, worst, rho = _figures(cells)
    assert median <= 0.04 and worst <= 0.12 and rho >= 0.98, (median, worst, rho)
    error = _errors(cells)
    assert all(abs(error[name]) <= 0.10 for name in ("torch_tp2_sp", "torch_tp2_lp", "zero2_offload")), error

    def pipeline_checks(case: str) -> dict[str, float]:
        check = read_profile(str(STORED / case / "profile.json")).data["check"]
        return {cell["strategy"]: cell["error"] for cell in check["cells"] if cell["family"] in ("pipeline",
                                                                                               "pipe_engine")}

    assert all(abs(e) <= 0.10 for e in pipeline_checks(AFTER_THE_SPLIT_LLAMA_TINY).values())
    assert all(e > 0.20 for e in pipeline_checks(SCHEDULE_RUNTIME_LLAMA_TINY).values())


def test_two_llama_calibrations_eight_hours_apart_agree_within_eleven_percent():
    """The 20:16 profile of 2026-11-28 (PIPELINE_CHECK_ADDED_LLAMA_TINY) and this one, on this compare's cells
    (``scripts/bench_time_model.py --agree``): 9 of 13 within the issue's 5%, the largest torch_tp2_sp -11.0%, then
    ZeRO-2 with and without offload -8.6% and -8.5%, ulysses2 +7.0%."""
    earlier = read_profile(str(STORED / PIPELINE_CHECK_ADDED_LLAMA_TINY / "profile.json"))
    later = read_profile(str(STORED / AFTER_THE_SPLIT_LLAMA_TINY / "profile.json"))
    ratios = {row.base_strategy: predict_cell(row, later).step_s / predict_cell(row, earlier).step_s
              for row in collect([STORED / AFTER_THE_SPLIT_LLAMA_TINY / "compare"])}
    assert sum(abs(r - 1) <= 0.05 for r in ratios.values()) == 9, ratios
    assert max(abs(r - 1) for r in ratios.values()) == pytest.approx(0.110, abs=0.002), ratios


AFTER_THE_SPLIT_GPT2_TINY = "oos-20261129-0424-gpt2-tiny"
AFTER_THE_SPLIT_GPT2_MINI = "oos-20261129-0431-gpt2-mini"
"""``python scripts/bench_time_model.py --models gpt2-tiny,gpt2-mini --check-repeats 3`` at 04:21 on 2026-11-29,
right after AFTER_THE_SPLIT_LLAMA_TINY, nothing else running; written before these tests."""


def test_every_model_meets_the_goals_within_the_same_half_hour():
    """gpt2-tiny median 5.9%, worst fsdp -10.0%, Spearman 0.98 (its ranking missed 0.9 on near-ties at 22:05 the
    day before); gpt2-mini median 1.6%, worst zero1 -8.2%, Spearman 0.95; with llama-tiny's run at 04:05, the three
    models' protocol runs of 04:05-04:35 each meet all three goals."""
    for case in (AFTER_THE_SPLIT_GPT2_TINY, AFTER_THE_SPLIT_GPT2_MINI, AFTER_THE_SPLIT_LLAMA_TINY):
        _goals(case)
    median, worst, rho = _figures(_cells(AFTER_THE_SPLIT_GPT2_MINI))
    assert median <= 0.02 and worst <= 0.09, (median, worst)
    held_out = _errors(_cells(AFTER_THE_SPLIT_GPT2_MINI))  # no check cell of their own: scaled by torch_pipe2's
    assert all(abs(held_out[name]) <= 0.07 for name in ("torch_pipe2_interleaved2", "torch_pipe2_zb2")), held_out


def test_two_gpt2_mini_calibrations_eight_hours_apart_nearly_agree():
    """The 20:05 profile of 2026-11-28 (PIPELINE_CHECK_ADDED_GPT2_MINI) and this one on this compare's cells: 9 of 10
    within the issue's 5%, zero1 -5.1%. gpt2-tiny's two (22:01 and 04:21) differ by up to -9.8% (pipe2), 3 of 8
    within 5%."""
    mini = _agreement(PIPELINE_CHECK_ADDED_GPT2_MINI, AFTER_THE_SPLIT_GPT2_MINI)
    assert sum(abs(r - 1) <= 0.05 for r in mini.values()) == 9 and max(abs(r - 1) for r in mini.values()) < 0.052
    tiny = _agreement(AFTER_THE_PIPELINE_CHANGES_GPT2_TINY, AFTER_THE_SPLIT_GPT2_TINY)
    assert sum(abs(r - 1) <= 0.05 for r in tiny.values()) == 3 and max(abs(r - 1) for r in tiny.values()) < 0.10


DRIFTED_LLAMA_TINY = "oos-20261129-1024-llama-tiny"
"""``python scripts/bench_time_model.py --models llama-tiny --check-repeats 3 --no-doc`` at 10:16 on 2026-11-29
(calibrate with ``--check``, then the compare of 13 strategies from 10:24), nothing else running: six hours after
AFTER_THE_SPLIT_LLAMA_TINY, with the same measurements (calibrate's default ``--repeats 5``); written before
these tests."""


def test_llama_tiny_six_hours_later_keeps_its_median_and_ranking_and_misses_by_its_fsdp_check():
    """Median 7.7%, Spearman 0.99, worst fsdp +28.8% (the goal is 20%). Before the check's scale fsdp was -7.8%: the
    miss is the scale. Its three check launches (55.1-59.9 ms a step) all ran slower than both of its compare
    launches minutes later, which the planner then predicted 28.8% high."""
    cells = _cells(DRIFTED_LLAMA_TINY)
    median, worst, rho = _figures(cells)
    assert median <= 0.08 and rho >= 0.98, (median, rho)
    errors = _errors(cells)
    assert max(errors, key=lambda name: abs(errors[name])) == "fsdp" and errors["fsdp"] == pytest.approx(0.288,
                                                                                                         abs=0.002)
    assert sorted(abs(error) for error in errors.values())[-2] <= 0.18  # every other cell within 18%
    check = read_profile(str(STORED / DRIFTED_LLAMA_TINY / "profile.json")).data["check"]
    fsdp = next(cell for cell in check["cells"] if cell["strategy"] == "fsdp")
    measured_ms = cells["fsdp"][0] * 1e3
    assert fsdp["measured_range_ms"][0] > 1.15 * measured_ms, (fsdp, measured_ms)  # its fastest check launch


def test_between_two_llama_calibrations_six_hours_apart_the_machine_itself_slowed():
    """Why the issue's agreement goal (two calibrations' predictions within 5%) cannot be met on this machine over
    hours: the same 13 cells, the same code, measured by the two protocol runs' compares (04:10 and 10:24), ran
    4-31% slower at 10:24, every one. The calibrations followed (the later one predicts every cell 8-45% slower,
    ``scripts/bench_time_model.py --agree``); their rates moved too (the whole model's forward+backward -12%, AdamW
    -29%)."""
    def steps(case: str) -> dict[str, float]:
        return {row.base_strategy: measured_step_s(row) for row in collect([STORED / case / "compare"])}

    before, after = steps(AFTER_THE_SPLIT_LLAMA_TINY), steps(DRIFTED_LLAMA_TINY)
    assert before.keys() == after.keys() and len(before) == 13
    slowed = {name: after[name] / before[name] for name in before}
    assert all(1.03 < ratio < 1.35 for ratio in slowed.values()), slowed
    earlier = read_profile(str(STORED / AFTER_THE_SPLIT_LLAMA_TINY / "profile.json"))
    later = read_profile(str(STORED / DRIFTED_LLAMA_TINY / "profile.json"))
    predicted = {row.base_strategy: predict_cell(row, later).step_s / predict_cell(row, earlier).step_s
                 for row in collect([STORED / DRIFTED_LLAMA_TINY / "compare"])}
    assert all(ratio > 1.05 for ratio in predicted.values()), predicted
    assert later.data["rates"]["model_tflops"] < 0.9 * earlier.data["rates"]["model_tflops"]


def _check_against_compare() -> list[float]:
    """Every stored protocol run with ``--check-repeats 3`` whose compare ran on the calibrated ranks: per checked
    cell, its check's step (the median of three launches) over the same cell's compare step minutes later (the
    median of two), the same command both times."""
    ratios = []
    for case in sorted(STORED.glob("oos-*")):
        if not (case / "profile.json").exists() or not (case / "compare").exists():
            continue
        profile = read_profile(str(case / "profile.json")).data
        check, rows = profile.get("check") or {}, collect([case / "compare"])
        if check.get("repeats") != 3 or any(row.world_size != profile["world_size"] for row in rows):
            continue
        compared = {row.base_strategy: measured_step_s(row) * 1e3 for row in rows}
        ratios += [cell["measured_step_ms"] / compared[cell["strategy"]] for cell in check["cells"]
                   if cell["strategy"] in compared]
    return ratios


def test_the_check_runs_as_the_compare_does_and_their_gap_is_the_machines_noise():
    """The check's cells run about 1% faster than the compare's, a small bias the scale carries into predictions:
    over 438 pairs from 54 runs the median ratio is 0.988 (0.9885 over the 120 pairs of the 15 runs on the machine
    of 2026-11-29 15:44 to 19:36), 5th-95th percentile 0.86-1.13. That spread is the same command minutes apart on
    this machine, and it bounds the worst cell: 14 of 438 pairs (3.2%) differ by more than 20%, so a run of 10 checked
    families has about a 28% chance (1 - 0.968^10) that one family's scale is off by more than the worst cell's
    goal
    from the machine's noise alone, as llama-tiny's fsdp was at 10:24 on 2026-11-29, gpt2-mini's ddp at
    11:21 and llama-tiny's zero3 at 13:09 (226 pairs from 28 runs before the 11:21 run: 0.998 and 0.85-1.19; 233
    from 29 before the 13:09 run: 0.996 and 0.84-1.19; 260 from 32 before the 15:44 run: 0.992 and 0.82-1.17; 332
    from 41 before the 18:18 run: 0.993 and 0.85-1.17; 356 from 44 before the 19:23 run: 0.990 and 0.85-1.16; 380
    from 47 before the 20:39 run: 0.989 and 0.86-1.15; 404 from 50 before the 21:39 run: 0.989 and 0.86-1.13; 428
    from 53 before the 22:46 run: 0.9885 and 0.86-1.13)."""
    ratios = sorted(_check_against_compare())
    n = len(ratios)
    assert n >= 438
    assert 0.98 < statistics.median(ratios) < 1.0
    assert 0.80 < ratios[int(0.05 * (n - 1))] and ratios[int(0.95 * (n - 1))] < 1.22, (ratios[:5], ratios[-5:])
    beyond = sum(abs(ratio - 1) > 0.20 for ratio in ratios) / n
    assert 0.03 < beyond < 0.08, beyond


DRIFTED_GPT2_MINI = "oos-20261129-1121-gpt2-mini"
"""``python scripts/bench_time_model.py --models gpt2-mini --check-repeats 3 --no-doc`` at 11:16 on 2026-11-29
(the compare of 10 strategies from 11:21), nothing else running, seven hours after AFTER_THE_SPLIT_GPT2_MINI with
the same measurements; written before these tests."""


def test_gpt2_mini_seven_hours_later_keeps_its_median_and_misses_by_its_ddp_check():
    """Median 6.5%, Spearman 0.94; the worst, ddp -20.8%, misses 20% by a point: its three check launches (53.3-63.3
    ms a step) all ran faster than both of its compare launches minutes later (71.8 ms), the other way from
    llama-tiny's fsdp at 10:24."""
    cells = _cells(DRIFTED_GPT2_MINI)
    median, worst, rho = _figures(cells)
    assert median <= 0.07 and rho >= 0.9, (median, rho)
    errors = _errors(cells)
    assert max(errors, key=lambda name: abs(errors[name])) == "ddp" and errors["ddp"] == pytest.approx(-0.208,
                                                                                                       abs=0.002)
    check = read_profile(str(STORED / DRIFTED_GPT2_MINI / "profile.json")).data["check"]
    ddp = next(cell for cell in check["cells"] if cell["strategy"] == "ddp")
    assert ddp["measured_range_ms"][1] < 0.9 * cells["ddp"][0] * 1e3, ddp  # its slowest check launch


def test_between_two_gpt2_mini_calibrations_seven_hours_apart_the_machine_itself_slowed():
    """As llama-tiny's between 04:10 and 10:24: the same 10 cells ran 1-37% slower at 11:21 than at 04:31 (zero1
    +0.8%, ddp +37%), and the later calibration predicts every cell 8-15% slower."""
    def steps(case: str) -> dict[str, float]:
        return {row.base_strategy: measured_step_s(row) for row in collect([STORED / case / "compare"])}

    before, after = steps(AFTER_THE_SPLIT_GPT2_MINI), steps(DRIFTED_GPT2_MINI)
    assert before.keys() == after.keys() and len(before) == 10
    slowed = sorted(after[name] / before[name] for name in before)
    assert 1.0 < slowed[0] < 1.02 and 1.35 < slowed[-1] < 1.4 and statistics.median(slowed) > 1.15, slowed
    earlier = read_profile(str(STORED / AFTER_THE_SPLIT_GPT2_MINI / "profile.json"))
    later = read_profile(str(STORED / DRIFTED_GPT2_MINI / "profile.json"))
    predicted = [predict_cell(row, later).step_s / predict_cell(row, earlier).step_s
                 for row in collect([STORED / DRIFTED_GPT2_MINI / "compare"])]
    assert all(1.07 < ratio < 1.16 for ratio in predicted), predicted


ULYSSES_MEASURED_LLAMA_TINY = "oos-20261129-1309-llama-tiny"
"""``python scripts/bench_time_model.py --models llama-tiny --check-repeats 3 --no-doc`` at 13:04 on 2026-11-29
(calibrate with ``--check``, then the compare of 13 strategies from 13:09), nothing else running: the first protocol
run whose calibration times the layers under DeepSpeed Ulysses (``ulysses_layer_s``); written before these tests."""


def test_the_ulysses_check_no_longer_needs_a_large_scale_once_its_layers_are_timed():
    """The 17 stored llama-tiny profiles with a ulysses check before 2026-11-29 13:00 priced Ulysses without its layers'
    own cost, and its check cell ran 1.22-2.38x the prediction (1.44 at least on 2 ranks). With the layers timed
    (5.7 ms beyond the ideal per layer per micro-step in a calibration that hour), the check cell ran 1.10x it,
    inside the spread of the other families' scales in the same check (0.88-1.36)."""
    before = {}
    for folder in sorted(STORED.glob("oos-*llama-tiny*")):
        data = read_profile(str(folder / "profile.json")).data
        scale = (data.get("check") or {}).get("step_scale", {}).get("ulysses")
        if scale is not None and "ulysses_layer_s" not in data["rates"]:
            before[folder.name] = scale
    assert len(before) == 17 and min(before.values()) > 1.2, before
    assert min(scale for name, scale in before.items() if "4ranks" not in name) > 1.4, before
    data = read_profile(str(STORED / ULYSSES_MEASURED_LLAMA_TINY / "profile.json")).data
    assert data["rates"]["ulysses_layer_s"] > 1e-3
    scales = data["check"]["step_scale"]
    assert 0.9 < scales["ulysses"] < 1.15 and min(scales.values()) < scales["ulysses"] < max(scales.values())


def test_llama_tiny_with_ulysses_timed_keeps_its_ranking_and_misses_as_the_machine_slowed_under_the_compare():
    """Median 11.4%, worst zero3 -21.2%, Spearman 0.99; 13 of 13 cells predicted fast. The compare's cells ran slower
    than the same strategies' check launches minutes before (ddp 1.21x, torch_tp2 1.22x, zero3 1.27x; fsdp alone
    1.00x): the same drift as at 10:24 and 11:21, this time one way for every family. ulysses2 is -3.5%."""
    cells = _cells(ULYSSES_MEASURED_LLAMA_TINY)
    median, worst, rho = _figures(cells)
    assert 0.10 < median < 0.12 and rho >= 0.99, (median, rho)
    errors = _errors(cells)
    assert max(errors, key=lambda name: abs(errors[name])) == "zero3" and errors["zero3"] == pytest.approx(-0.212,
                                                                                                           abs=0.002)
    assert all(error < 0 for error in errors.values()) and abs(errors["ulysses2"]) < 0.05, errors
    check = read_profile(str(STORED / ULYSSES_MEASURED_LLAMA_TINY / "profile.json")).data["check"]
    slowed = {cell["strategy"]: cells[cell["strategy"]][0] * 1e3 / cell["measured_step_ms"] for cell in check["cells"]}
    assert all(ratio > 0.99 for ratio in slowed.values()) and sum(ratio > 1.1 for ratio in slowed.values()) >= 5, slowed


ZERO_MODEL_LLAMA_TINY = "oos-20261129-1350-llama-tiny"
"""``python scripts/bench_time_model.py --models llama-tiny --check-repeats 3 --no-doc`` at 13:43 on 2026-11-29
(the compare of 13 strategies from 13:50), nothing else running: the first protocol run whose calibration times
ZeRO-1 and ZeRO-2 on the model itself (``zero1_model_call_s``, ``zero2_model_call_s``); written before these tests."""


def _unscaled_errors(case: str) -> dict[str, float]:
    """strategy -> signed step-time error of the profile's prediction before its check's scales."""
    profile = read_profile(str(STORED / case / "profile.json"))
    profile.data.pop("check", None)
    return {row.base_strategy: predict_cell(row, profile).step_s / measured_step_s(row) - 1
            for row in collect([STORED / case / "compare"])}


def test_llama_tiny_with_zero_timed_on_the_model_meets_the_goals():
    """Median 3.1%, worst torch_tp2_sp -15.8%, Spearman 0.99: all three goals, 12 of 13 cells inside their range."""
    median, worst, rho = _figures(_cells(ZERO_MODEL_LLAMA_TINY))
    assert median < 0.035 and worst < 0.16 and rho >= 0.99, (median, worst, rho)


def test_zero2_s_unscaled_prediction_holds_once_its_reductions_are_timed_on_the_model():
    """Before its family's check scale, ZeRO-2 (and its offload) was predicted 9-42% (9-47%) fast in all 17 earlier
    stored llama-tiny runs: the stack's reductions wait for no backward. With the model's own cost per reduction,
    +0.9% and -0.4%; zero1 -10.4%, inside its earlier -3..-35%."""
    earlier = [name for name in (folder.name for folder in sorted(STORED.glob("oos-*llama-tiny")))
               if name < ZERO_MODEL_LLAMA_TINY]
    assert len(earlier) == 17
    for case in earlier:
        assert "zero2_model_call_s" not in read_profile(str(STORED / case / "profile.json")).data["rates"]
        errors = _unscaled_errors(case)
        assert -0.43 < errors["zero2"] < -0.08 and -0.47 < errors["zero2_offload"] < -0.09, (case, errors)
    errors = _unscaled_errors(ZERO_MODEL_LLAMA_TINY)
    assert abs(errors["zero2"]) < 0.02 and abs(errors["zero2_offload"]) < 0.02 and abs(errors["zero1"]) < 0.11, errors


ZERO_MODEL_GPT2_MINI = "oos-20261129-1402-gpt2-mini"
"""The same protocol with ``--models gpt2-mini`` at 13:57 on 2026-11-29 (the compare of 10 strategies from 14:02),
nothing else running, right after ZERO_MODEL_LLAMA_TINY; written before these tests."""


def _check_errors(case: str, strategy: str) -> float | None:
    """A stored profile's check cell's error before any scale (predicted / measured - 1), None without that cell."""
    check = read_profile(str(STORED / case / "profile.json")).data.get("check") or {}
    return next((cell["error"] for cell in check.get("cells", []) if cell["strategy"] == strategy), None)


def test_gpt2_mini_with_zero_timed_on_the_model_meets_the_goals_and_its_zero2_check_is_no_longer_fast():
    """Median 7.1%, worst zero2_offload -14.1%, Spearman 0.99: all three goals. ZeRO-2's check cell, before any
    scale, was predicted fast in 15 of the 16 earlier stored gpt2-mini runs that checked it (median -21%, -35% at
    worst); here +7.2% (llama-tiny's at 13:50: +1.8%, against -7% to -40% in its 17 earlier runs). The compare's
    zero2 cell, minutes later, -7.5% before the scale."""
    median, worst, rho = _figures(_cells(ZERO_MODEL_GPT2_MINI))
    assert median < 0.075 and worst < 0.15 and rho >= 0.98, (median, worst, rho)
    for model, new in (("gpt2-mini", ZERO_MODEL_GPT2_MINI), ("llama-tiny", ZERO_MODEL_LLAMA_TINY)):
        earlier = [error for case in sorted(folder.name for folder in STORED.glob(f"oos-*{model}"))
                   if case < new and (error := _check_errors(case, "zero2")) is not None]
        assert len(earlier) >= 16 and statistics.median(earlier) < -0.2 and max(earlier) < 0.03, (model, earlier)
        assert abs(_check_errors(new, "zero2")) < 0.08
    assert -0.08 < _unscaled_errors(ZERO_MODEL_GPT2_MINI)["zero2"] < -0.07


NEW_MACHINE_RUNS = ("oos-20261129-1544-gpt2-tiny", "oos-20261129-1550-llama-tiny", "oos-20261129-1557-gpt2-mini")
"""``python scripts/bench_time_model.py --models gpt2-tiny,llama-tiny,gpt2-mini --check-repeats 3 --no-doc`` from
15:40 on 2026-11-29 (the compares from 15:44, 15:50 and 15:57), nothing else running, on a virtual machine new that
session (kernel build v782; the forward+backward 35% faster than the last machine's); the code of 14:02's
ZERO_MODEL_GPT2_MINI run; written before these tests."""


def test_gpt2_mini_on_a_new_machine_meets_the_goals_again():
    """Median 1.2%, worst zero1 -8.1%, Spearman 0.94: all three goals, 114 minutes after ZERO_MODEL_GPT2_MINI met
    them on the machine before."""
    median, worst, rho = _figures(_cells(NEW_MACHINE_RUNS[2]))
    assert median < 0.015 and worst < 0.085 and rho > 0.93, (median, worst, rho)


@pytest.mark.xfail(strict=True, reason="measured 2026-11-29 15:44 and 15:50: medians 4.3% and 7.8%, Spearman 0.98 and "
                   "0.92 meet their goals; the worst misses, zero2_offload +24.0% and +21.3%, predicted slower than "
                   "zero2 while it ran 16-17% faster than zero2")
@pytest.mark.parametrize("case", NEW_MACHINE_RUNS[:2])
def test_gpt2_tiny_and_llama_tiny_on_a_new_machine_meet_the_goals(case):
    _goals(case)


@pytest.mark.parametrize("case", NEW_MACHINE_RUNS[:2])
def test_on_the_new_machine_only_the_held_out_offload_cell_misses(case):
    """The median and the ranking hold, and the worst cell is zero2_offload, which no check cell scales: with the
    optimizer on the host (DeepSpeedCPUAdam) ZeRO-2 ran 16-17% faster than without it, and the planner, which adds
    the offload's copies and a host Adam to ZeRO-2's step, has it slower. (Not the device optimizer's kernel:
    DeepSpeed's FusedAdam steps gpt2-tiny in 0.13 ms on these ranks, as fast as DeepSpeedCPUAdam.)"""
    cells = _cells(case)
    median, worst, rho = _figures(cells)
    assert median < 0.08 and rho >= 0.92, (median, rho)
    errors = _errors(cells)
    assert max(errors, key=lambda name: abs(errors[name])) == "zero2_offload" and 0.2 < errors["zero2_offload"] < 0.25
    assert cells["zero2_offload"][0] < 0.87 * cells["zero2"][0] and cells["zero2_offload"][1] > cells["zero2"][1]


OFFLOAD_TIMED_RUNS = ("oos-20261129-1619-gpt2-tiny", "oos-20261129-1625-llama-tiny", "oos-20261129-1632-gpt2-mini")
"""The same command as NEW_MACHINE_RUNS from 16:15 on 2026-11-29 (the compares from 16:19, 16:25 and 16:32), nothing
else running, the first protocol runs whose calibration times ZeRO-2 with its optimizer on the host
(``zero_offload_param_s``, commit 97c20c7); written before these tests."""


@pytest.mark.parametrize("case", OFFLOAD_TIMED_RUNS)
def test_every_model_meets_the_goals_once_the_offload_is_timed(case):
    """gpt2-tiny median 3.9%, worst zero1 +16.7%, Spearman 0.95; llama-tiny 8.8%, zero1 -16.1%, 0.98; gpt2-mini 2.5%,
    zero1 -5.7%, 0.99: all three goals at every model in one round."""
    _goals(case)


def test_the_offload_cell_is_priced_faster_than_zero2_once_timed():
    """Every calibration measured the offload faster than ZeRO-2 on the device (3.8-24.6 ms per step per million
    stepped parameters). At ZeRO-2's check scale, as planned then, the held-out cell's error was +5.4% to +14.9%
    (+24.0% and +21.3% in the runs half an hour before); unscaled, as planned since 2026-11-29 20:35, the planner has
    each model's zero2_offload cell 12-16% faster than its zero2 (they ran 12-24% faster) and the cell within 7.4%."""
    for case in OFFLOAD_TIMED_RUNS:
        rate = read_profile(str(STORED / case / "profile.json")).data["rates"]["zero_offload_param_s"]
        assert -2.5e-8 < rate < -3.5e-9, (case, rate)
        cells = _cells(case)
        measured = cells["zero2_offload"][0] / cells["zero2"][0]
        predicted = cells["zero2_offload"][1] / cells["zero2"][1]
        assert 0.75 < measured < 0.9 and 0.83 < predicted < 0.89, (case, measured, predicted)
        assert 0.05 < _offload_at_zero2_scale(case) < 0.15 and abs(_errors(cells)["zero2_offload"]) < 0.075, case
    for case in NEW_MACHINE_RUNS[:2]:
        assert "zero_offload_param_s" not in read_profile(str(STORED / case / "profile.json")).data["rates"]


AN_HOUR_LATER_RUNS = ("oos-20261129-1727-gpt2-tiny", "oos-20261129-1734-llama-tiny", "oos-20261129-1740-gpt2-mini")
"""The same command as OFFLOAD_TIMED_RUNS 70 minutes later, from 17:25 on 2026-11-29 (the compares from 17:27, 17:34
and 17:40), nothing else running, the same machine and code; written before these tests."""


@pytest.mark.parametrize("case", AN_HOUR_LATER_RUNS[1:])
def test_llama_tiny_and_gpt2_mini_meet_the_goals_again_an_hour_later(case):
    """llama-tiny median 4.6%, worst fsdp -17.3%, Spearman 0.99; gpt2-mini 3.3%, zero3 +9.4%, 0.98: with the runs of
    16:25 and 16:32, two runs at least an hour apart meeting all three goals, with the same code."""
    _goals(case)


def test_gpt2_tiny_meets_the_goals_an_hour_later_with_the_offload_unscaled():
    """Median 4.3%, worst zero2_offload -14.5%, Spearman 0.98 as planned since 2026-11-29 20:35 (the offload cell
    unscaled); it missed as planned then: median 4.3% and Spearman 0.90, the worst cell zero2_offload +21.2% at
    ZeRO-2's check scale (x1.42)."""
    _goals(AN_HOUR_LATER_RUNS[0])
    assert 0.2 < _offload_at_zero2_scale(AN_HOUR_LATER_RUNS[0]) < 0.22


def test_gpt2_tiny_an_hour_later_misses_by_an_offload_timing_whose_sign_the_noise_flipped():
    """Five of the six calibrations since calibrate times the offload read it faster than ZeRO-2 (3.8-24.6 ms per step
    per million stepped parameters); 17:27's read it 4.1 ms slower. On gpt2-tiny's 0.19 M-parameter shard that is
    about a millisecond of a 38 ms step, and the unscaled planner put zero2_offload 2% slower than zero2, where it
    ran 15% faster. At ZeRO-2's scale the cell was the worst at +21.2%; unscaled it is still the worst, at -14.5%."""
    rates = [read_profile(str(STORED / case / "profile.json")).data["rates"]["zero_offload_param_s"]
             for case in (*OFFLOAD_TIMED_RUNS, *AN_HOUR_LATER_RUNS)]
    assert sum(rate < 0 for rate in rates) == 5 and 3.5e-9 < rates[3] < 4.5e-9, rates
    unscaled = _cells(AN_HOUR_LATER_RUNS[0], scaled=False)
    assert (unscaled["zero2_offload"][0] < 0.86 * unscaled["zero2"][0]
            and unscaled["zero2_offload"][1] > unscaled["zero2"][1])
    errors = _errors(_cells(AN_HOUR_LATER_RUNS[0]))
    assert max(errors, key=lambda name: abs(errors[name])) == "zero2_offload"
    assert -0.15 < errors["zero2_offload"] < -0.14



ROUNDS_RUNS = ("oos-20261129-1818-gpt2-tiny", "oos-20261129-1824-llama-tiny", "oos-20261129-1831-gpt2-mini")
"""The same command as AN_HOUR_LATER_RUNS 50 minutes later, from 18:15 on 2026-11-29 (the compares from 18:18, 18:24
and 18:31), nothing else running, the same machine; the first protocol runs whose calibration times ZeRO-1/2 and the
offloaded optimizer on the model in 3 rounds per repeat (15 samples, commit 3222174); written before these tests."""


@pytest.mark.parametrize("case", ROUNDS_RUNS)
def test_every_model_meets_the_goals_with_the_zero_steps_on_the_model_timed_three_times_as_often(case):
    """gpt2-tiny median 4.5%, worst zero3 -11.0%, Spearman 0.98; llama-tiny 3.5%, zero2_offload +17.0%, 0.98;
    gpt2-mini 1.5%, zero1 -6.6%, 0.99."""
    _goals(case)


def test_with_fifteen_samples_every_calibration_reads_the_offload_faster_than_zero2():
    """Each of the three calibrations took 15 samples of the ZeRO steps on the model (5 before) and read the
    offloaded optimizer faster than ZeRO-2 on the device (3.2-12.1 ms per step per million stepped parameters);
    gpt2-tiny's zero2_offload cell, its worst at 17:27 (+21.2%), is within 1% at ZeRO-2's scale (as planned then;
    -12.5% unscaled). Calibrate took 31-40 s where it took 24-28 s at 17:25 (the profiles' own ``seconds``)."""
    for case in ROUNDS_RUNS:
        data = read_profile(str(STORED / case / "profile.json")).data
        assert data["zero_model"]["zero2_offload_step"]["samples"] == 15 and data["repeats"] == 5
        assert -1.3e-8 < data["rates"]["zero_offload_param_s"] < -3e-9, case
        assert 30 < data["seconds"] < 45, case
    assert abs(_offload_at_zero2_scale(ROUNDS_RUNS[0])) < 0.01


ROUNDS_AN_HOUR_LATER_RUNS = ("oos-20261129-1923-gpt2-tiny", "oos-20261129-1929-llama-tiny",
                             "oos-20261129-1936-gpt2-mini")
"""The same command as ROUNDS_RUNS 65 minutes later, from 19:20 on 2026-11-29 (the compares from 19:23, 19:29 and
19:36), nothing else running, the same machine and code (c760e0f's calibration); written before these tests."""


@pytest.mark.parametrize("case", ROUNDS_AN_HOUR_LATER_RUNS[:2])
def test_gpt2_tiny_and_llama_tiny_meet_the_goals_again_an_hour_later_with_the_same_code(case):
    """gpt2-tiny median 3.8%, worst zero2 -8.7%, Spearman 1.00; llama-tiny 2.8%, zero2_offload +12.7%, 0.97: with the
    runs of 18:18 and 18:24, two runs 65 minutes apart meeting all three goals, with the same code."""
    _goals(case)


def test_gpt2_mini_meets_the_goals_again_an_hour_later_with_the_offload_unscaled():
    """Median 2.2%, worst zero3 +4.2%, Spearman 0.99 as planned since 2026-11-29 20:35; it missed as planned then
    (median 2.6%, Spearman 0.99, the worst cell zero2_offload +20.2% at ZeRO-2's check scale, x1.22)."""
    _goals(ROUNDS_AN_HOUR_LATER_RUNS[2])
    assert 0.2 < _offload_at_zero2_scale(ROUNDS_AN_HOUR_LATER_RUNS[2]) < 0.21


def test_the_offload_cell_missed_by_zero2_s_check_scale():
    """gpt2-mini's worst cell at 19:36 was zero2_offload while it took ZeRO-2's check scale: the ZeRO-2 check ran 22%
    slower than predicted, the compare's offload cell 19% faster than its zero2 cell, and the scale that brought
    zero2 to -0.7% took zero2_offload from -1.1% to +20.2%. Over the 12 runs since calibrate times the offload
    (16:19-19:36) the unscaled offload cell is the closer one in 8: median absolute error 5.9% unscaled against 9.2%
    scaled, worst 14.5% against 21.2%. This chose the rule (plan.selfcheck.step_scale: no scale for the offloaded
    ZeRO-1/2 where the profile timed the offload), so these 12 runs are in sample for it."""
    cells = _cells(ROUNDS_AN_HOUR_LATER_RUNS[2])
    assert cells["zero2_offload"][0] < 0.83 * cells["zero2"][0]
    assert 0.2 < _offload_at_zero2_scale(ROUNDS_AN_HOUR_LATER_RUNS[2]) < 0.21
    errors = _errors(cells)
    assert abs(errors["zero2"]) < 0.01 and abs(errors["zero2_offload"]) < 0.015
    runs = (*OFFLOAD_TIMED_RUNS, *AN_HOUR_LATER_RUNS, *ROUNDS_RUNS, *ROUNDS_AN_HOUR_LATER_RUNS)
    pairs = [(abs(_offload_at_zero2_scale(case)), abs(_errors(_cells(case))["zero2_offload"])) for case in runs]
    assert len(pairs) == 12 and sum(unscaled < scaled for scaled, unscaled in pairs) == 8
    assert statistics.median(u for _, u in pairs) < 0.06 < 0.09 < statistics.median(s for s, _ in pairs)
    assert max(u for _, u in pairs) < 0.15 < 0.21 < max(s for s, _ in pairs)


def test_at_fifteen_samples_the_offload_s_sign_still_flips_once_on_a_small_shard():
    """The 19:20 calibrations read the offload 5.6 ms (gpt2-tiny) and 2.2 ms (gpt2-mini) per step per million stepped
    parameters faster than ZeRO-2, and llama-tiny's 1.0 ms slower, where its compare's offload cell ran 12% faster
    than its zero2 cell: 15 samples narrowed the noise (none of the 18:15 three flipped) but did not end it."""
    rates = [read_profile(str(STORED / case / "profile.json")).data["rates"]["zero_offload_param_s"]
             for case in ROUNDS_AN_HOUR_LATER_RUNS]
    assert rates[0] < -5e-9 and rates[2] < -2e-9 and 0 < rates[1] < 1.5e-9, rates
    cells = _cells(ROUNDS_AN_HOUR_LATER_RUNS[1])
    assert cells["zero2_offload"][0] < 0.9 * cells["zero2"][0]


OFFLOAD_UNSCALED_RUNS = ("oos-20261129-2039-gpt2-tiny", "oos-20261129-2045-llama-tiny",
                         "oos-20261129-2052-gpt2-mini")
"""The same command as ROUNDS_AN_HOUR_LATER_RUNS 75 minutes later, from 20:35 on 2026-11-29 (the compares from 20:39,
20:45 and 20:52), nothing else running, the same machine; the first protocol runs after the offloaded ZeRO-1/2 left
ZeRO-2's check scale (plan.selfcheck.step_scale), so out of sample for that rule; written before these tests."""


@pytest.mark.parametrize("case", OFFLOAD_UNSCALED_RUNS[::2])
def test_gpt2_tiny_and_gpt2_mini_meet_the_goals_with_the_offload_unscaled(case):
    """gpt2-tiny median 7.4%, worst zero1 +12.4%, Spearman 0.95; gpt2-mini 1.8%, torch_pipe2_interleaved2 -7.1%,
    0.95."""
    _goals(case)


@pytest.mark.xfail(strict=True, reason="measured 2026-11-29 20:45: median 6.9% and Spearman 0.92 meet their goals, the "
                   "worst misses: torch_tp2_sp -25.3%, the calibration reading sequence parallelism's layers nearly "
                   "free (torch_tp2_sp predicted 1.6% slower than torch_tp2, where it ran 27% slower)")
def test_llama_tiny_meets_the_goals_with_the_offload_unscaled():
    _goals(OFFLOAD_UNSCALED_RUNS[1])


def test_llama_tiny_misses_by_sequence_parallel_layers_its_calibration_read_nearly_free():
    """torch_tp2_sp has no check cell of its own (tensor parallelism's is torch_tp2) and is priced from calibrate's
    DTensor SP layers (``±30%`` in this calibration's spread line). This one put it 1.6% above torch_tp2, where the
    llama-tiny runs since 16:25 put it 23-34% above and every compare measured it 21-38% above (27% here): the
    worst cell, -25.3%, and not the offload's."""
    cells = _cells(OFFLOAD_UNSCALED_RUNS[1])
    errors = _errors(cells)
    assert max(errors, key=lambda name: abs(errors[name])) == "torch_tp2_sp"
    assert -0.26 < errors["torch_tp2_sp"] < -0.25 and abs(errors["zero2_offload"]) < 0.15
    assert cells["torch_tp2_sp"][1] < 1.02 * cells["torch_tp2"][1] and cells["torch_tp2_sp"][0] > 1.25 * cells[
        "torch_tp2"][0]
    for case in (OFFLOAD_TIMED_RUNS[1], AN_HOUR_LATER_RUNS[1], ROUNDS_RUNS[1], ROUNDS_AN_HOUR_LATER_RUNS[1]):
        earlier = _cells(case)
        assert 1.2 < earlier["torch_tp2_sp"][1] / earlier["torch_tp2"][1] < 1.35, case
        assert 1.2 < earlier["torch_tp2_sp"][0] / earlier["torch_tp2"][0] < 1.4, case


def test_out_of_sample_the_unscaled_offload_cell_is_closer_at_one_model_of_three():
    """The rule's first test out of sample: zero2_offload unscaled -2.7%, -14.1% and -4.1% (gpt2-tiny, llama-tiny,
    gpt2-mini) against +2.3%, -7.1% and +13.4% at ZeRO-2's scale; median 4.1% against 7.1%, worst 14.1% against
    13.4%. Over the 15 runs since calibrate times the offload, unscaled is closer in 9: median 4.4% against 8.7%,
    worst 14.5% against 21.2%. Only gpt2-mini's worst cell changed with the rule (13.4% to 7.1%); at 20:45 the offload
    cell ran 2% slower than zero2, the first run to measure it so."""
    unscaled = [_errors(_cells(case))["zero2_offload"] for case in OFFLOAD_UNSCALED_RUNS]
    scaled = [_offload_at_zero2_scale(case) for case in OFFLOAD_UNSCALED_RUNS]
    assert [round(e, 3) for e in unscaled] == [-0.027, -0.141, -0.041], unscaled
    assert [round(e, 3) for e in scaled] == [0.023, -0.071, 0.134], scaled
    runs = (*OFFLOAD_TIMED_RUNS, *AN_HOUR_LATER_RUNS, *ROUNDS_RUNS, *ROUNDS_AN_HOUR_LATER_RUNS, *OFFLOAD_UNSCALED_RUNS)
    pairs = [(abs(_offload_at_zero2_scale(case)), abs(_errors(_cells(case))["zero2_offload"])) for case in runs]
    assert sum(u < s for s, u in pairs) == 9
    assert statistics.median(u for _, u in pairs) < 0.045 < 0.085 < statistics.median(s for s, _ in pairs)
    cells = _cells(OFFLOAD_UNSCALED_RUNS[1])
    assert cells["zero2_offload"][0] > cells["zero2"][0]


def test_two_calibrations_75_minutes_apart_agree_within_five_percent_at_gpt2_mini_only():
    """The stability goal, the 19:20 and 20:35 calibrations on the 20:xx compares: gpt2-mini within 2.9% on all 10
    cells; gpt2-tiny within 13.6% (fsdp 0.864, pipe2 0.887, zero3 1.100; 2 of 8 within 5%); llama-tiny within 29.4%
    (torch_tp2_sp 0.706, the SP layers above; 5 of 13 within 5%)."""
    mini = _agreement(ROUNDS_AN_HOUR_LATER_RUNS[2], OFFLOAD_UNSCALED_RUNS[2])
    assert len(mini) == 10 and max(abs(r - 1) for r in mini.values()) < 0.03, mini
    tiny = _agreement(ROUNDS_AN_HOUR_LATER_RUNS[0], OFFLOAD_UNSCALED_RUNS[0])
    assert sum(abs(r - 1) <= 0.05 for r in tiny.values()) == 2 and 0.13 < max(abs(r - 1) for r in tiny.values()) < 0.14
    llama = _agreement(ROUNDS_AN_HOUR_LATER_RUNS[1], OFFLOAD_UNSCALED_RUNS[1])
    assert min(llama, key=llama.get) == "torch_tp2_sp" and 0.7 < llama["torch_tp2_sp"] < 0.71
    assert sum(abs(r - 1) <= 0.05 for r in llama.values()) == 5


AN_HOUR_AFTER_THE_OFFLOAD_FAMILY_RUNS = ("oos-20261129-2139-gpt2-tiny", "oos-20261129-2145-llama-tiny",
                                         "oos-20261129-2152-gpt2-mini")
"""The same command as OFFLOAD_UNSCALED_RUNS an hour later, from 21:36 on 2026-11-29 (the compares from 21:39, 21:45
and 21:52), nothing else running, the same machine; the planner's code as at 20:35, calibrate's split layers now in 3
rounds per repeat (calibrate_engines.MODEL_ROUNDS, commit d4f0fda: llama-tiny's calibration only); written before
these tests."""


@pytest.mark.parametrize("case", AN_HOUR_AFTER_THE_OFFLOAD_FAMILY_RUNS)
def test_every_model_meets_the_goals_an_hour_after_the_offload_left_zero2_s_scale(case):
    """gpt2-tiny median 6.4%, worst zero1 +9.5%, Spearman 1.00; llama-tiny 4.1%, zero1_tp2 +15.3%, 0.97; gpt2-mini
    1.8%, zero2_offload -9.7%, 1.00: all three goals at every model. With the runs of 20:39 and 20:52, gpt2-tiny and
    gpt2-mini meet them in two runs an hour apart with the same code (the layers' rounds do not touch GPT-2's
    calibration, which times no split layers)."""
    _goals(case)


def test_with_fifteen_samples_the_sequence_parallel_layers_are_priced_as_they_run():
    """The split layers' 15 samples (5 at 20:45): torch_tp2_sp predicted 19.7% above torch_tp2 where it ran 24.8%
    above (1.6% and 27% at 20:45), its cell -6.0% (-25.3% at 20:45)."""
    case = AN_HOUR_AFTER_THE_OFFLOAD_FAMILY_RUNS[1]
    split = read_profile(str(STORED / case / "profile.json")).data["tensor_parallel"]
    assert all(timed["samples"] == 15 for timed in split.values() if isinstance(timed, dict))
    cells = _cells(case)
    assert 1.15 < cells["torch_tp2_sp"][1] / cells["torch_tp2"][1] < 1.2 < cells["torch_tp2_sp"][0] / cells[
        "torch_tp2"][0] < 1.3
    assert -0.07 < _errors(cells)["torch_tp2_sp"] < -0.05


def test_over_six_runs_out_of_sample_the_unscaled_offload_cell_keeps_the_worst_cell_within_the_goal():
    """zero2_offload in the six runs after the rule (20:39-21:52): unscaled -2.7%, -14.1%, -4.1%, -7.1%, +13.9%,
    -9.7%; at ZeRO-2's scale +2.3%, -7.1%, +13.4%, +18.5%, +20.1%, +3.7%. Closer in 3 of 6, median 8.4% against
    10.3%, worst 14.1% against 20.1%: at ZeRO-2's scale llama-tiny's 21:45 cell would have missed the worst cell's goal.
    gpt2-tiny's 21:36 calibration read the offload 0.24 ms per step per million stepped parameters slower than ZeRO-2
    (at 15 samples, a second flip), and its cell was still -7.1% unscaled."""
    runs = (*OFFLOAD_UNSCALED_RUNS, *AN_HOUR_AFTER_THE_OFFLOAD_FAMILY_RUNS)
    pairs = [(abs(_offload_at_zero2_scale(case)), abs(_errors(_cells(case))["zero2_offload"])) for case in runs]
    assert sum(unscaled < scaled for scaled, unscaled in pairs) == 3
    assert statistics.median(u for _, u in pairs) < 0.085 < 0.10 < statistics.median(s for s, _ in pairs)
    assert max(u for _, u in pairs) < 0.15 < 0.2 < max(s for s, _ in pairs)
    assert _offload_at_zero2_scale(AN_HOUR_AFTER_THE_OFFLOAD_FAMILY_RUNS[1]) > 0.2
    rate = read_profile(str(STORED / runs[3] / "profile.json")).data["rates"]["zero_offload_param_s"]
    assert 0 < rate < 5e-10


def test_two_calibrations_an_hour_apart_still_disagree_by_more_than_five_percent():
    """The stability goal, the 20:35 and 21:36 calibrations on the 21:xx compares (``--agree``): gpt2-tiny within 8.5%
    (zero2_offload 0.915, zero3 0.939; 5 of 8 within 5%), gpt2-mini within 10.6% (zero3 0.894; 9 of 10), llama-tiny
    within 20.1% (torch_tp2_sp 1.201, its 20:45 layers read at 5 samples; 7 of 13). Missed: at the 5% goal, each
    run's check scales (the median of three launches, p5-p95 0.86-1.13 against a compare) differ by more."""
    tiny = _agreement(OFFLOAD_UNSCALED_RUNS[0], AN_HOUR_AFTER_THE_OFFLOAD_FAMILY_RUNS[0])
    assert sum(abs(r - 1) <= 0.05 for r in tiny.values()) == 5 and 0.08 < max(abs(r - 1) for r in tiny.values()) < 0.09
    mini = _agreement(OFFLOAD_UNSCALED_RUNS[2], AN_HOUR_AFTER_THE_OFFLOAD_FAMILY_RUNS[2])
    assert sum(abs(r - 1) <= 0.05 for r in mini.values()) == 9 and min(mini, key=mini.get) == "zero3"
    llama = _agreement(OFFLOAD_UNSCALED_RUNS[1], AN_HOUR_AFTER_THE_OFFLOAD_FAMILY_RUNS[1])
    assert max(llama, key=llama.get) == "torch_tp2_sp" and 1.2 < llama["torch_tp2_sp"] < 1.21
    assert sum(abs(r - 1) <= 0.05 for r in llama.values()) == 7


LLAMA_TINY_AN_HOUR_LATER = "oos-20261129-2246-llama-tiny"
"""``python scripts/bench_time_model.py --models llama-tiny --check-repeats 3 --no-doc`` from 22:41 on 2026-11-29
(the compare from 22:46), an hour after AN_HOUR_AFTER_THE_OFFLOAD_FAMILY_RUNS' llama-tiny, nothing else running, the
same machine and code (the split layers' 15 samples included); written before these tests."""


def test_llama_tiny_meets_the_goals_again_an_hour_later_with_the_same_code():
    """Median 6.0%, worst zero3 -14.7%, Spearman 0.98: with 21:45's run, two runs an hour apart with the same code
    meeting all three goals, as gpt2-tiny and gpt2-mini did at 20:39-21:52. torch_tp2_sp, from 15 samples again,
    is -10.4%, and the two calibrations price it within 1.7% of each other (0.706 and 1.201 between the earlier pairs);
    they differ by up to 19.0% in the check-scaled families (fsdp 0.810, zero3 0.874) and in the offload (0.897),
    9 of 13 cells within 5%."""
    _goals(LLAMA_TINY_AN_HOUR_LATER)
    errors = _errors(_cells(LLAMA_TINY_AN_HOUR_LATER))
    assert -0.11 < errors["torch_tp2_sp"] < -0.1
    agree = _agreement(AN_HOUR_AFTER_THE_OFFLOAD_FAMILY_RUNS[1], LLAMA_TINY_AN_HOUR_LATER)
    assert abs(agree["torch_tp2_sp"] - 1) < 0.02 and min(agree, key=agree.get) == "fsdp" and 0.8 < agree["fsdp"] < 0.82
    assert sum(abs(r - 1) <= 0.05 for r in agree.values()) == 9


def _measured_moved(earlier: str, later: str) -> dict[str, float]:
    """strategy -> the later compare's measured step time over the earlier compare's (the same cells, the machine's
    own agreement with itself; ``scripts/bench_time_model.py --agree ... --earlier-cells``)."""
    before = {row.base_strategy: measured_step_s(row) for row in collect([STORED / earlier / "compare"])}
    return {row.base_strategy: measured_step_s(row) / before[row.base_strategy]
            for row in collect([STORED / later / "compare"]) if row.base_strategy in before}


def this_machine_runs(model: str) -> list[str]:
    """The stored protocol runs of ``model`` at 3 check launches on the machine of 2026-11-29 15:44 to 22:52 (kernel
    build v782), in order: 7 of gpt2-tiny, 8 of llama-tiny and 7 of gpt2-mini, 45-75 minutes apart."""
    since = {"gpt2-tiny": "1544", "llama-tiny": "1550", "gpt2-mini": "1557"}[model]
    return [path.name for path in sorted(STORED.glob(f"oos-20261129-*-{model}")) if since <= path.name[13:17] < "2300"]


def _consecutive_on_this_machine() -> list[tuple[str, str]]:
    """Each of :func:`this_machine_runs` paired with the next: 19 pairs."""
    pairs = []
    for model in ("gpt2-tiny", "llama-tiny", "gpt2-mini"):
        runs = this_machine_runs(model)
        pairs += list(zip(runs[:-1], runs[1:], strict=True))
    return pairs


def test_two_calibrations_agree_as_well_as_two_compares_of_the_same_cells_do():
    """The stability goal's floor. Over the 19 consecutive pairs of protocol runs on this machine, the compares
    themselves (2 launches of 15 steps a cell) never measured every cell within 5% of the last run: their worst
    cells differ by 5.5-18.4%, and 136 of 199 cells (68%) are within 5%. The two calibrations' predictions of the
    later compare are within 5% on 132 of 199 (66%), all within 5% in 2 pairs (gpt2-mini 16:32-17:40 and
    19:36-20:52), worst 2.9-29.4%. The goal asks of the predictions what the machine's own measurements do not
    give; scripts/noise_budget.py splits that spread into steps, launches and drift
    (tests/unit/test_noise_budget.py)."""
    pairs = _consecutive_on_this_machine()
    assert len(pairs) == 19
    measured = [_measured_moved(*pair) for pair in pairs]
    predicted = [_agreement(*pair) for pair in pairs]
    worst = [max(abs(ratio - 1) for ratio in moved.values()) for moved in measured]
    assert 0.05 < min(worst) < 0.06 and 0.18 < max(worst) < 0.19
    cells = sum(len(moved) for moved in measured)
    within_measured = sum(abs(ratio - 1) <= 0.05 for moved in measured for ratio in moved.values())
    within_predicted = sum(abs(ratio - 1) <= 0.05 for agree in predicted for ratio in agree.values())
    assert cells == 199 and within_measured == 136 and within_predicted == 132
    assert sum(all(abs(ratio - 1) <= 0.05 for ratio in agree.values()) for agree in predicted) == 2


NINE_CHECK_LAUNCHES_GPT2_MINI = "oos-20261129-2352-gpt2-mini"
"""``python scripts/bench_time_model.py --models gpt2-mini --check-repeats 9 --no-doc`` from 23:42 on 2026-11-29 (the
compare from 23:52), nothing else running, the same machine and planner as the 22:xx runs: each check cell's step the
median of 9 launches (scripts/noise_budget.py forecast a 66% chance that a second such calibration an hour later
agrees on every family within 5%, against 14% at 3 launches); written before these tests."""


def test_nine_check_launches_on_gpt2_mini_meet_the_goals_with_every_cell_within_six_percent():
    """Median 1.5%, worst zero2_offload -5.2% (not check-scaled), Spearman 1.00, every cell in its predicted range.
    Against the 21:49 calibration (3 launches) on this compare, 9 of 10 within 5%: its zero3 check (116.7 ms, the
    median of three) ran 8% under both compares of zero3 (126.3 and 126.3 ms); the nine launches' 128.6 ms is within
    2% of this one."""
    cells = _cells(NINE_CHECK_LAUNCHES_GPT2_MINI)
    median, worst, rho = _figures(cells)
    assert median < 0.02 and worst < 0.06 and rho == pytest.approx(1.0)
    errors = _errors(cells)
    assert max(errors, key=lambda name: abs(errors[name])) == "zero2_offload"
    agree = _agreement(AN_HOUR_AFTER_THE_OFFLOAD_FAMILY_RUNS[2], NINE_CHECK_LAUNCHES_GPT2_MINI)
    assert sum(abs(r - 1) <= 0.05 for r in agree.values()) == 9 and 1.10 < agree["zero3"] < 1.11


NINE_CHECK_LAUNCHES_AN_HOUR_LATER_GPT2_MINI = "oos-20261130-0052-gpt2-mini"
"""The same command as NINE_CHECK_LAUNCHES_GPT2_MINI an hour later, from 00:43 on 2026-11-30 (the compare from 00:52),
nothing else running, the same machine and planner; written before these tests."""


def test_nine_check_launches_an_hour_apart_meet_every_goal_on_gpt2_mini():
    """Issue 27's stability goal met: the 23:42 and 00:43 calibrations (9 launches a check cell) predict every one of
    the later compare's 10 cells within 3.9% of each other (zero2_offload 0.961, not check-scaled; the check cells'
    log ratios 1.7% rms, where scripts/noise_budget.py forecast 2.6% and a 66% chance that all 7 families agree),
    while the two compares themselves differ by up to 7.3% (zero3 1.073; 7 of 10 within 5%). The later run meets
    the accuracy goals too: median 2.5%, worst zero2_offload -6.6%, Spearman 0.99."""
    later = NINE_CHECK_LAUNCHES_AN_HOUR_LATER_GPT2_MINI
    median, worst, rho = _figures(_cells(later))
    assert median < 0.03 and worst < 0.07 and rho > 0.98
    agree = _agreement(NINE_CHECK_LAUNCHES_GPT2_MINI, later)
    assert len(agree) == 10 and max(abs(ratio - 1) for ratio in agree.values()) < 0.04
    assert min(agree, key=agree.get) == "zero2_offload"
    measured = _measured_moved(NINE_CHECK_LAUNCHES_GPT2_MINI, later)
    assert 0.07 < max(abs(ratio - 1) for ratio in measured.values()) < 0.075
    assert sum(abs(ratio - 1) <= 0.05 for ratio in measured.values()) == 7


A_NEW_MACHINE_LLAMA_TINY = "oos-20261205-0229-llama-tiny"
"""``python scripts/bench_time_model.py --models llama-tiny --check-repeats 3`` from 02:22 on 2026-12-05 (the compare
from 02:29), nothing else running: six days and some hundred commits after LLAMA_TINY_AN_HOUR_LATER, on another build
of the machine (kernel v1252, not v782) whose calibrated matmul rate is 0.052 TFLOPS per rank against 0.097; written
before these tests."""


def test_a_fresh_calibration_on_a_new_machine_meets_the_goals_where_the_old_profile_misses_by_a_third():
    """Median 4.6%, worst fsdp -18.8% (its 3 check launches ran 43.6-47.9 ms a step, the compare's two 54.8 ms
    minutes later), Spearman 0.99; held out, torch_tp2_sp -13.2%, torch_tp2_lp +2.4%, zero2_offload -2.9%. The
    calibration of 2026-11-29 22:41, on the other build, predicts the same compare 32% too fast at the median (worst
    fsdp -51%), keeping its ranking (0.97): a profile is this machine's, measured again where the machine changed."""
    cells = _cells(A_NEW_MACHINE_LLAMA_TINY)
    _goals(A_NEW_MACHINE_LLAMA_TINY)
    errors = _errors(cells)
    assert min(errors, key=errors.get) == "fsdp" and -0.19 < errors["fsdp"] < -0.18
    assert max(abs(errors[name]) for name in ("torch_tp2_sp", "torch_tp2_lp", "zero2_offload")) < 0.14
    old = read_profile(str(STORED / LLAMA_TINY_AN_HOUR_LATER / "profile.json"))
    stale = {row.base_strategy: (measured_step_s(row), predict_cell(row, old).step_s)
             for row in collect([STORED / A_NEW_MACHINE_LLAMA_TINY / "compare"])}
    median, worst, rho = _figures(stale)
    assert 0.3 < median < 0.33 and 0.5 < worst < 0.51 and rho > 0.95
    assert all(predicted < measured for measured, predicted in stale.values())  # every cell predicted too fast


A_NEW_MACHINE_GPT2_MINI = "oos-20261205-0248-gpt2-mini"
"""``python scripts/bench_time_model.py --models gpt2-mini --check-repeats 3`` from 02:41 on 2026-12-05 (the compare
from 02:48), nothing else running, right after A_NEW_MACHINE_LLAMA_TINY on the same build; written before these
tests."""


def test_a_fresh_calibration_on_a_new_machine_meets_the_goals_on_gpt2_mini_too():
    """Median 6.7%, worst ddp -18.6% (its 3 check launches ran 52.8-53.6 ms a step, the compare's two 65.5 ms minutes
    later), Spearman 0.96; every cell but zero3 predicted fast, held out the interleaved schedule worst (-18.5%).
    The 2026-11-30 00:43 profile (the other build) predicts this compare 31% too fast at the median, worst -37%."""
    cells = _cells(A_NEW_MACHINE_GPT2_MINI)
    _goals(A_NEW_MACHINE_GPT2_MINI)
    errors = _errors(cells)
    assert min(errors, key=errors.get) == "ddp" and -0.19 < errors["ddp"] < -0.18
    assert [name for name, error in errors.items() if error > 0] == ["zero3"]
    old = read_profile(str(STORED / NINE_CHECK_LAUNCHES_AN_HOUR_LATER_GPT2_MINI / "profile.json"))
    stale = {row.base_strategy: (measured_step_s(row), predict_cell(row, old).step_s)
             for row in collect([STORED / A_NEW_MACHINE_GPT2_MINI / "compare"])}
    median, worst, _ = _figures(stale)
    assert 0.3 < median < 0.32 and 0.37 < worst < 0.38


A_NEW_MACHINE_GPT2_TINY = "oos-20261205-0339-gpt2-tiny"
"""``python scripts/bench_time_model.py --models gpt2-tiny --check-repeats 3`` from 03:34 on 2026-12-05 (the compare
from 03:39), nothing else running, after A_NEW_MACHINE_GPT2_MINI on the same build; written before these tests."""


def test_a_fresh_calibration_on_a_new_machine_meets_the_goals_on_all_three_models():
    """gpt2-tiny: median 8.0%, worst torch_pipe2 +13.9%, Spearman 0.93, the held-out offload -8.9%; with llama-tiny
    and gpt2-mini above, each model of the protocol meets all three goals on the new build. The 2026-11-29 21:39
    profile (the other build) predicts this compare 24% too fast at the median, worst zero2_offload -32%."""
    for case in (A_NEW_MACHINE_LLAMA_TINY, A_NEW_MACHINE_GPT2_MINI, A_NEW_MACHINE_GPT2_TINY):
        _goals(case)
    errors = _errors(_cells(A_NEW_MACHINE_GPT2_TINY))
    assert max(errors, key=lambda name: abs(errors[name])) == "torch_pipe2" and 0.13 < errors["torch_pipe2"] < 0.14
    assert -0.09 < errors["zero2_offload"] < -0.08
    old = read_profile(str(STORED / "oos-20261129-2139-gpt2-tiny" / "profile.json"))
    stale = {row.base_strategy: (measured_step_s(row), predict_cell(row, old).step_s)
             for row in collect([STORED / A_NEW_MACHINE_GPT2_TINY / "compare"])}
    median, worst, _ = _figures(stale)
    assert 0.24 < median < 0.25 and 0.32 < worst < 0.33
    assert all(predicted < measured for measured, predicted in stale.values())
