"""torch_pp's schedule runtime: calibrate's measurement per pass, and what the planner adds for it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dsbench.models import PRESETS
from dsbench.plan.estimate import Candidate, Cluster, Workload, estimate
from dsbench.plan.hardware import Link
from dsbench.plan.pipeline_time import PASS_RATE, pass_costs, schedule_seconds
from dsbench.plan.profile import fit_profile

# What calibrate's ranks store (dsbench/worker/calibrate_pipe.py): 2 ranks, 4 micro-batches, 2 chunks per rank
# under the interleaved schedules; the seconds of 2026-11-28 16:05 on this machine
MEASURED = {"stages": 2, "micro_batches": 4, "virtual_stages": 2, "width": 8,
            "schedules": {"1f1b": {"seconds": 0.00327}, "interleaved": {"seconds": 0.01177},
                          "interleaved-zb": {"seconds": 0.01528}, "deepspeed": {"seconds": 0.00886}}}


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


def test_each_pipeline_engine_pays_its_own_measured_runtime():
    costs = {"1f1b": 0.4e-3, "interleaved": 0.7e-3, "interleaved-zb": 0.6e-3, "deepspeed": 1.1e-3}
    interleaved = Candidate(strategy="ddp", pp=2, engine="torch", virtual_stages=2)
    assert schedule_seconds(interleaved, 4, costs) == pytest.approx(16 * 0.7e-3)
    assert schedule_seconds(replace(interleaved, virtual_stages=1), 4, costs) == pytest.approx(8 * 0.4e-3)
    assert schedule_seconds(replace(interleaved, zero_bubble=True), 4, costs) == pytest.approx(24 * 0.6e-3)
    assert schedule_seconds(Candidate(strategy="zero1", pp=2), 4, costs) == pytest.approx(8 * 1.1e-3)  # pipe2
    assert schedule_seconds(Candidate(strategy="zero1", pp=2), 4, {"1f1b": 0.4e-3}) == 0.0  # not torch's cost
    assert schedule_seconds(Candidate(strategy="ddp", engine="torch"), 4, costs) == 0.0  # no pipeline
    assert schedule_seconds(interleaved, 4, {}) == 0.0  # a profile from before the measurement


def test_the_step_adds_the_runtime_and_prices_the_sends_by_their_bytes_alone():
    shape = PRESETS["gpt2-mini"]
    wl = Workload(shape=shape, seq_len=128, micro_batch=2, grad_accum=2, precision="fp32")
    link = Link("x", 4.5, 128.0, "test")  # 128 µs per point-to-point call
    plain = Cluster(nodes=1, gpus_per_node=2, gpu_mem_gb=12, peak_tflops=1.0, intra=link, inter=link,
                    host_link=link, compute_tflops=0.02, overlap_comm=False)
    measured = replace(plain, pipe_pass_s=(("interleaved", 0.7e-3),))
    cand = Candidate(strategy="ddp", pp=2, engine="torch", virtual_stages=2)
    before, after = estimate(cand, wl, plain), estimate(cand, wl, measured)
    # the fixed global batch: 2 x pp = 4 micro-batches, 4 x 2 chunks x (forward + backward) passes on a rank
    assert after.framework_s - before.framework_s == pytest.approx(16 * 0.7e-3)
    # the sends' latency, 2 per micro-batch per chunk (4 x 2 x 2 x 128 µs), is now in the measured passes
    assert before.exposed_comm_s - after.exposed_comm_s == pytest.approx(16 * 128e-6)
    assert after.step_s - before.step_s == pytest.approx(16 * (0.7e-3 - 128e-6))


def test_calibrate_s_pipeline_section_becomes_the_profile_s_rates():
    from dsbench.plan.api import with_profile

    measured = {"schema": "dsbench.measured/1", "collectives": {}, "pipeline": MEASURED, "device": "cpu",
                "compute_per_rank": [{name: {"tflops": 0.02} for name in ("gemm", "attention", "model")}
                                     | {"optimizer": {"params_per_s": 1e8}}]}
    profile = fit_profile(measured)
    assert profile["rates"][PASS_RATE["interleaved"]] == pytest.approx(0.01177 / 16)
    link = Link("x", 4.5, 128.0, "test")
    cl = with_profile(Cluster(nodes=1, gpus_per_node=2, gpu_mem_gb=12, peak_tflops=1.0, intra=link, inter=link,
                              host_link=link), profile)
    assert cl.pass_s == pytest.approx({"1f1b": 0.00327 / 8, "interleaved": 0.01177 / 16,
                                       "interleaved-zb": 0.01528 / 24, "deepspeed": 0.00886 / 8})


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
