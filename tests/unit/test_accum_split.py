"""scripts/bench_accum_split.py: each strategy's step split into a part per micro-step and a part per step, measured
and predicted (issues 27 and 28).

Oracle: ``tests/data/runs/cpu-calibrated/accum-split-20261128-1853-gpt2-mini``, a fresh ``dsbench calibrate
--num-gpus 2 --model gpt2-mini`` (18:53, no --check, so no step scale) and then every strategy at 1 and 4
accumulation steps per replica, 2 launches each (18:53-19:01, written by the throwaway form of the script before it
was kept; stored before any change it checks).
"""

from __future__ import annotations

import pytest

from tests.conftest import DATA, load_script

CASE = DATA / "runs" / "cpu-calibrated" / "accum-split-20261128-1853-gpt2-mini"


def _script():
    return load_script("bench_accum_split")


def test_the_split_is_the_line_through_the_accumulation_counts():
    # by hand: 10 + 40 x accum measured (50 at 1, 170 at 4), 5 + 40 x accum predicted (45, 165)
    parts = _script().split({1: (0.050, 0.045), 4: (0.170, 0.165)})
    assert parts["micro-step"] == pytest.approx((0.040, 0.040))
    assert parts["step"] == pytest.approx((0.010, 0.005))


def _parts() -> dict[str, dict[str, tuple[float, float]]]:
    script = _script()
    return {name: script.split(by_accum) for name, by_accum in
            script.steps_by_accum(CASE, str(CASE / "profile.json")).items()}


def test_a_pipeline_s_micro_steps_are_priced_within_five_percent():
    # the passes of every micro-batch: the stages' compute through the bubble's closed form and the schedules'
    # runtime per pass (plan/pipeline_time.py); measured -2.9% (pipe2), +3.5% (torch_pipe2), +1.0% (interleaved)
    parts = _parts()
    for name in ("pipe2", "torch_pipe2", "torch_pipe2_interleaved2"):
        measured, predicted = parts[name]["micro-step"]
        assert abs(predicted / measured - 1) <= 0.05, (name, measured, predicted)


@pytest.mark.xfail(strict=True, reason="measured 2026-11-28 18:53-19:01: the data-parallel strategies' micro-steps "
                   "run 21-26% slower than the profile's forward+backward (ddp 51.5 ms vs 40.6, fsdp 88.3 vs 65.6, "
                   "zero2 114.7 vs 90.6), and every strategy's part per step is 2-31 ms above the model's "
                   "(docs/planner.md)")
def test_every_part_of_every_step_is_priced_within_ten_percent():
    for name, parts in _parts().items():
        for part, (measured, predicted) in parts.items():
            assert abs(predicted / measured - 1) <= 0.10, (name, part, measured, predicted)


CHECKED = DATA / "runs" / "cpu-calibrated" / "accum-split-20261128-1917-gpt2-mini-checked"
"""Out of sample for the added correction (chosen on :data:`CASE`): ``dsbench calibrate --num-gpus 2 --model
gpt2-mini --check`` at 19:17 (its torch_pipe2 and pipe2 check cells at 1 accumulation step: +17.3 and +28.0 ms,
stored as ``check.step_residual_ms``), then ``python scripts/bench_accum_split.py --profile P --model gpt2-mini
--strategies torch_pipe2,pipe2,torch_pipe2_interleaved2,torch_pipe2_zb2`` (19:19-19:23, 2 launches per cell)."""


def test_a_pipeline_s_check_added_holds_at_four_micro_steps_where_the_scale_over_corrects():
    import copy

    from dsbench.plan.machine_profile import read_profile
    from dsbench.plan.verify import measured_step_s, predict_cell
    from dsbench.report.collect import collect

    added = read_profile(str(CHECKED / "profile.json"))
    scaled = copy.deepcopy(added)  # the same check read as before 2026-11-28 19:20: a ratio for every family
    del scaled.data["check"]["step_residual_ms"]
    errors = {}
    for row in collect([CHECKED / "ga4"]):
        measured = measured_step_s(row)
        errors[row.base_strategy] = tuple(predict_cell(row, p).step_s / measured - 1 for p in (added, scaled))
    assert set(errors) == {"torch_pipe2", "pipe2", "torch_pipe2_interleaved2", "torch_pipe2_zb2"}
    # measured: added -1.8% (torch_pipe2), +8.5% (pipe2), +8.2% (interleaved), +7.1% (zero bubble); scaled +12.4%,
    # +31.4%, +24.1%, +23.3%
    for name, (with_added, with_scale) in errors.items():
        assert abs(with_added) <= 0.10 and abs(with_added) < abs(with_scale), (name, with_added, with_scale)


AGAIN = DATA / "runs" / "cpu-calibrated" / "accum-split-20261128-2222-gpt2-mini"
""":data:`CASE`'s data-parallel strategies again, three and a half hours later on the same machine: a fresh
``dsbench calibrate --num-gpus 2 --model gpt2-mini`` (22:22, no --check), then ``python scripts/bench_accum_split.py
--profile P --model gpt2-mini --strategies ddp,fsdp,zero2`` (22:25-22:29). Written before this test."""


def test_ddp_s_micro_step_gap_was_the_hour_not_the_model():
    """At 18:53 every data-parallel micro-step ran 21-26% above the profile's forward+backward; at 22:22 ddp's is
    priced within 3% (41.2 against 40.2 ms), while FSDP's and ZeRO-2's stay 15-20% fast: what they miss lies in
    their own per-micro-step work beyond the forward and backward they share with ddp (not yet taken apart)."""
    script = _script()
    parts = {name: script.split(by_accum) for name, by_accum in
             script.steps_by_accum(AGAIN, str(AGAIN / "profile.json")).items()}
    errors = {name: predicted / measured - 1 for name, (measured, predicted) in
              ((n, p["micro-step"]) for n, p in parts.items())}
    assert abs(errors["ddp"]) <= 0.03, errors
    assert -0.25 < errors["fsdp"] < -0.10 and -0.25 < errors["zero2"] < -0.15, errors
