"""torch_pp's schedule runtime: calibrate's measurement per pass, and what the planner adds for it."""

from __future__ import annotations

from dataclasses import replace

import numpy
import pytest

from dsbench.models import PRESETS
from dsbench.plan.candidate import Candidate
from dsbench.plan.estimate import estimate
from dsbench.plan.hardware import Link
from dsbench.plan.inputs import Cluster, Workload
from dsbench.plan.pipeline_time import PASS_RATE, STEP_RATE, fit_runtime, pass_costs, schedule_seconds
from dsbench.plan.profile import fit_profile

# What calibrate's ranks stored until 2026-11-28 19:00 (dsbench/worker/calibrate_pipe.py): 2 ranks, 4
# micro-batches, 2 chunks per rank under the interleaved schedules; the seconds of 2026-11-28 16:05 on this machine
MEASURED = {"stages": 2, "micro_batches": 4, "virtual_stages": 2, "width": 8,
            "schedules": {"1f1b": {"seconds": 0.00327}, "interleaved": {"seconds": 0.01177},
                          "interleaved-zb": {"seconds": 0.01528}, "deepspeed": {"seconds": 0.00886}}}
# What they store since: each schedule at 2, 4 and 8 micro-batches (the seconds of 2026-11-28 18:47, 2 CPU ranks)
SWEPT = {"stages": 2, "micro_batches": [2, 4, 8], "virtual_stages": 2, "width": 8,
         "schedules": {"1f1b": [{"seconds": 0.00191}, {"seconds": 0.00348}, {"seconds": 0.00754}],
                       "interleaved": [{"seconds": 0.00601}, {"seconds": 0.01048}, {"seconds": 0.02148}],
                       "deepspeed": [{"seconds": 0.00728}, {"seconds": 0.00993}, {"seconds": 0.01489}]}}


def test_a_schedule_s_cost_is_its_step_over_the_passes_a_rank_runs():
    # by hand, from torch's schedules: a forward and a backward per micro-batch per chunk (1F1B: 2 x 4; interleaved
    # over 2 chunks: 2 x 4 x 2), the zero-bubble one splitting each backward into input and weight passes (3 x 4 x 2);
    # DeepSpeed's TrainSchedule a forward and a backward per micro-batch, as 1F1B
    assert pass_costs(MEASURED) == pytest.approx({PASS_RATE["1f1b"]: 0.00327 / 8,
                                                  PASS_RATE["interleaved"]: 0.01177 / 16,
                                                  PASS_RATE["interleaved-zb"]: 0.01528 / 24,
                                                  PASS_RATE["deepspeed"]: 0.00886 / 8})
    noisy = {**MEASURED, "schedules": {"1f1b": {"seconds": -1e-6}}}
    assert pass_costs(noisy) == {PASS_RATE["1f1b"]: 0.0}
    assert pass_costs({}) == {}


def test_the_runtime_is_a_line_through_the_steps_timed_at_several_pass_counts():
    # by hand: the points (4, 1), (8, 2), (16, 4) lie on 0 + 0.25 x passes; (4, 3), (8, 4), (16, 6) on 2 + 0.25 x
    assert fit_runtime([4, 8, 16], [1.0, 2.0, 4.0]) == pytest.approx((0.0, 0.25))
    assert fit_runtime([4, 8, 16], [3.0, 4.0, 6.0]) == pytest.approx((2.0, 0.25))
    # noise: a line below zero at no passes goes through the origin (least squares: sum(xy) / sum(x^2) = 32 / 80 =
    # 0.4), a falling one is a constant, one point is all per pass
    assert fit_runtime([4, 8], [1.0, 3.5]) == pytest.approx((0.0, 0.4))
    assert fit_runtime([4, 8], [3.0, 2.0]) == pytest.approx((2.5, 0.0))
    assert fit_runtime([8], [2.0]) == pytest.approx((0.0, 0.25))


def test_a_schedule_s_runtime_is_fitted_over_the_passes_of_each_micro_batch_count():
    costs = pass_costs(SWEPT)
    for schedule, per_m in SWEPT["schedules"].items():
        # passes a rank runs at 2, 4, 8 micro-batches: 1F1B and DeepSpeed's engine 2M, interleaved over 2 chunks 4M
        passes = [4 * m if schedule == "interleaved" else 2 * m for m in SWEPT["micro_batches"]]
        seconds = [point["seconds"] for point in per_m]
        # the oracle: numpy's least-squares line through the three points, seconds = intercept + slope x passes
        slope, intercept = numpy.polyfit(passes, seconds, 1)
        if intercept >= 0:
            assert costs[STEP_RATE[schedule]] == pytest.approx(intercept)
            assert costs[PASS_RATE[schedule]] == pytest.approx(slope)
        else:
            assert costs[STEP_RATE[schedule]] == 0.0
            assert costs[PASS_RATE[schedule]] == pytest.approx(numpy.linalg.lstsq(
                numpy.array(passes, dtype=float)[:, None], seconds, rcond=None)[0][0])
    assert costs[STEP_RATE["deepspeed"]] > 0.003  # DeepSpeed's engine pays milliseconds per step, whatever its passes
    assert "torch_pp_interleaved_zb_step_s" not in costs  # not timed, not stored


def test_each_pipeline_engine_pays_its_own_measured_runtime():
    costs = {"1f1b": (0.0, 0.4e-3), "interleaved": (0.5e-3, 0.7e-3), "interleaved-zb": (0.0, 0.6e-3),
             "deepspeed": (4e-3, 1.1e-3)}
    interleaved = Candidate(strategy="ddp", pp=2, engine="torch", virtual_stages=2)
    assert schedule_seconds(interleaved, 4, costs) == pytest.approx(0.5e-3 + 16 * 0.7e-3)
    assert schedule_seconds(replace(interleaved, virtual_stages=1), 4, costs) == pytest.approx(8 * 0.4e-3)
    assert schedule_seconds(replace(interleaved, zero_bubble=True), 4, costs) == pytest.approx(24 * 0.6e-3)
    assert schedule_seconds(Candidate(strategy="zero1", pp=2), 4, costs) == pytest.approx(4e-3 + 8 * 1.1e-3)  # pipe2
    assert schedule_seconds(Candidate(strategy="zero1", pp=2), 2, costs) == pytest.approx(4e-3 + 4 * 1.1e-3)
    assert schedule_seconds(Candidate(strategy="zero1", pp=2), 4, {"1f1b": (0.0, 0.4e-3)}) == 0.0  # not torch's
    assert schedule_seconds(Candidate(strategy="ddp", engine="torch"), 4, costs) == 0.0  # no pipeline
    assert schedule_seconds(interleaved, 4, {}) == 0.0  # a profile from before the measurement


def test_the_step_adds_the_runtime_and_prices_the_sends_by_their_bytes_alone():
    shape = PRESETS["gpt2-mini"]
    wl = Workload(shape=shape, seq_len=128, micro_batch=2, grad_accum=2, precision="fp32")
    link = Link("x", 4.5, 128.0, "test")  # 128 µs per point-to-point call
    plain = Cluster(nodes=1, gpus_per_node=2, gpu_mem_gib=12, peak_tflops=1.0, intra=link, inter=link,
                    host_link=link, compute_tflops=0.02, overlap_comm=False)
    measured = replace(plain, pipe_runtime=(("interleaved", 0.0, 0.7e-3),))
    cand = Candidate(strategy="ddp", pp=2, engine="torch", virtual_stages=2)
    before, after = estimate(cand, wl, plain), estimate(cand, wl, measured)
    # the fixed global batch: 2 x pp = 4 micro-batches, 4 x 2 chunks x (forward + backward) passes on a rank
    assert after.framework_s - before.framework_s == pytest.approx(16 * 0.7e-3)
    # the sends' latency, 2 per micro-batch per chunk (4 x 2 x 2 x 128 µs), is now in the measured passes
    assert before.exposed_comm_s - after.exposed_comm_s == pytest.approx(16 * 128e-6)
    assert after.step_s - before.step_s == pytest.approx(16 * (0.7e-3 - 128e-6))


def test_calibrate_s_pipeline_section_becomes_the_profile_s_rates():
    from dsbench.plan.machine_profile import with_profile

    measured = {"schema": "dsbench.measured/1", "collectives": {}, "pipeline": MEASURED, "device": "cpu",
                "compute_per_rank": [{name: {"tflops": 0.02} for name in ("gemm", "attention", "model")}
                                     | {"optimizer": {"params_per_s": 1e8}}]}
    profile = fit_profile(measured)
    assert profile["rates"][PASS_RATE["interleaved"]] == pytest.approx(0.01177 / 16)
    link = Link("x", 4.5, 128.0, "test")
    cl = with_profile(Cluster(nodes=1, gpus_per_node=2, gpu_mem_gib=12, peak_tflops=1.0, intra=link, inter=link,
                              host_link=link), profile)
    # a profile from before the sweep: all of the one step per pass, nothing per step
    old = {"1f1b": 0.00327 / 8, "interleaved": 0.01177 / 16, "interleaved-zb": 0.01528 / 24, "deepspeed": 0.00886 / 8}
    assert {schedule: per_step for schedule, (per_step, _) in cl.pipe_costs.items()} == dict.fromkeys(old, 0.0)
    assert {schedule: per_pass for schedule, (_, per_pass) in cl.pipe_costs.items()} == pytest.approx(old)
    swept = with_profile(cl, fit_profile({**measured, "pipeline": SWEPT}))
    assert swept.pipe_costs["deepspeed"] == pytest.approx(
        (pass_costs(SWEPT)[STEP_RATE["deepspeed"]], pass_costs(SWEPT)[PASS_RATE["deepspeed"]]))


def test_calibrate_s_summary_names_each_engine_s_cost_per_pass():
    import json

    from dsbench.plan.profile_summary import summary_lines
    from tests.conftest import DATA

    stored = DATA / "runs" / "cpu-calibrated" / "oos-20261128-1716-gpt2-mini" / "profile.json"
    profile = json.loads(stored.read_text())
    rates = profile["rates"]
    line = next(line for line in summary_lines(profile) if line.startswith("pipeline engines over 2 ranks"))
    for schedule, key in PASS_RATE.items():
        label = "DeepSpeed pipeline engine" if schedule == "deepspeed" else f"torch {schedule} schedule"
        assert f"{rates[key] * 1e3:,.2f} ms ({label})" in line, line
