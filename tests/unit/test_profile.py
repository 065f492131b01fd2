"""Machine profiles (dsbench calibrate -> plan --profile): the fit, the rates, and the planner using them."""

from __future__ import annotations

import json

import pytest

from dsbench.errors import UserError
from dsbench.models import resolve_model
from dsbench.plan.comm import ring_seconds
from dsbench.plan.estimate import Candidate, Cluster, Workload, estimate
from dsbench.plan.hardware import INTERCONNECTS, Link
from dsbench.plan.profile import MEASURED, fit_collective, fit_line, fit_profile, link_from, load_profile, summary_lines
from dsbench.records import flops_per_token


def test_a_line_is_recovered_from_its_points():
    alpha, beta = 50e-6, 1 / 2e9  # 50 µs, 2 GB/s
    points = [(x, alpha + beta * x) for x in (4e3, 6.5e4, 1e6, 1.6e7)]
    got = fit_line(points)
    assert got[0] == pytest.approx(alpha, rel=1e-9) and got[1] == pytest.approx(beta, rel=1e-9)


def test_a_negative_intercept_is_refitted_through_the_origin():
    alpha, beta = fit_line([(1.0, 0.5), (2.0, 2.0), (3.0, 3.5)])
    assert alpha == 0.0 and beta > 0


def test_the_ring_model_decides_the_bytes_each_rank_moves():
    # 4 ranks, 8 MB all-reduce in 4 ms + 100 µs: 2B(n-1)/n = 12 MB moved per rank -> 3 GB/s
    points = [{"bytes": b, "seconds": 100e-6 + 2 * b * 3 / 4 / 3e9} for b in (2**12, 2**18, 2**23)]
    fitted = fit_collective("all-reduce", 4, points)
    assert fitted["bandwidth_gbs"] == pytest.approx(3.0, rel=1e-6)
    assert fitted["alpha_us"] == pytest.approx(100.0, rel=1e-6)
    assert fitted["latency_us_per_step"] == pytest.approx(100.0 / 6, rel=1e-6)  # 2(n-1) ring steps
    assert fitted["fit_worst_error"] < 1e-9


def _measured(rates: list[float]) -> dict:
    compute = [{"gemm": {"tflops": r * 2}, "attention": {"tflops": r}, "model": {"tflops": r},
                "optimizer": {"params_per_s": 1e8}} for r in rates]
    points = [{"bytes": b, "seconds": 1e-3 + b / 1e9} for b in (2**12, 2**16, 2**20, 2**24)]
    return {"schema": MEASURED, "world_size": 2, "nodes": 1, "backend": "gloo", "device": "cpu", "precision": "fp32",
            "seconds": 11.0, "model": {"name": "gpt2-mini"}, "micro_batch": 2, "seq_len": 128,
            "compute": compute[0], "compute_per_rank": compute,
            "collectives": {"world": {"ranks": [0, 1], "size": 2, "all-reduce": {"points": points},
                                      "all-gather": {"points": points}, "reduce-scatter": {"unsupported": "no"},
                                      "p2p": {"points": points}}}}


def test_the_slowest_rank_sets_the_rate_and_each_collective_keeps_its_own_figures():
    profile = fit_profile(_measured([0.05, 0.04]))
    assert profile["rates"]["model_tflops"] == 0.04 and profile["rates"]["gemm_tflops"] == 0.08
    link = link_from(profile, "world")
    assert {kind for kind, _, _ in link.by_kind} == {"all-reduce", "all-gather", "p2p"}
    # all-reduce over 2 ranks moves B per rank: 1 GB/s fitted; its latency is per ring step (2 steps)
    assert link.figures("all-reduce")[0] == pytest.approx(1.0, rel=1e-6)
    assert link.figures("all-reduce")[1] == pytest.approx(500.0, rel=1e-6)
    assert link.figures("reduce-scatter") == (link.bandwidth_gbs, link.latency_us)  # unmeasured: the link's
    assert ring_seconds("all-reduce", 1e6, 2, link) == pytest.approx(1e-3 + 1e6 / 1e9, rel=1e-6)
    assert any("not supported by gloo" in line for line in summary_lines(profile))


def test_the_planner_computes_at_the_measured_rate():
    shape = resolve_model("gpt2-mini")
    wl = Workload(shape=shape, seq_len=128, micro_batch=2, grad_accum=1, precision="fp32")
    base = Cluster(nodes=1, gpus_per_node=2, gpu_mem_gb=12, peak_tflops=1.0, intra=INTERCONNECTS["pcie4"],
                   inter=INTERCONNECTS["pcie4"], host_link=INTERCONNECTS["pcie5"], compute_tflops=0.04)
    e = estimate(Candidate(strategy="ddp"), wl, base)
    expected = flops_per_token(shape.num_params(), shape.layers, shape.hidden, 128) * 2 * 128 / 0.04e12
    assert e.compute_s == pytest.approx(expected, rel=1e-12)


def test_a_file_that_is_not_a_profile_is_refused():
    with pytest.raises(UserError, match="not a dsbench machine profile"):
        load_profile({"schema": "x"}, "p.json")
    with pytest.raises(UserError, match="not dsbench calibrate's measurements"):
        fit_profile({"schema": "x"})


def test_plan_uses_the_profile(cli_run, tmp_path):
    (tmp_path / "p.json").write_text(json.dumps(fit_profile(_measured([0.05, 0.04]))))
    result = cli_run("plan", "--model", "gpt2-mini", "--gpus", "2", "--precision", "fp32", "--gpu-mem", "12",
                     "--profile", "p.json", "--json")
    assert result.exit_code == 0, result.output
    cluster = json.loads(result.output)["cluster"]
    assert cluster["compute_tflops"] == 0.04 and "measured by dsbench calibrate" in cluster["intra"]


def test_link_kinds_default_to_the_link():
    link = Link("x", 10.0, 2.0, "n")
    assert link.figures("p2p") == (10.0, 2.0)


def test_the_rate_between_measured_micro_batches_is_interpolated_in_log2():
    from dsbench.plan.profile import rate_at

    measured = {"1": 0.02, "4": 0.06}
    assert rate_at(measured, 1, 9.9) == 0.02 and rate_at(measured, 4, 9.9) == 0.06
    assert rate_at(measured, 2, 9.9) == pytest.approx(0.04)  # halfway in log2 between 1 and 4
    assert rate_at(measured, 16, 9.9) == 0.06 and rate_at({}, 2, 9.9) == 9.9
