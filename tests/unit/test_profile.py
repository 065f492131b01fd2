"""Machine profiles (dsbench calibrate -> plan --profile): the fit, the rates, and the planner using them."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from dsbench.errors import UserError
from dsbench.model_config import resolve_model
from dsbench.plan.candidate import Candidate
from dsbench.plan.collective_fit import fit_collective, fit_line
from dsbench.plan.comm import ring_seconds
from dsbench.plan.estimate import estimate
from dsbench.plan.hardware import INTERCONNECTS, Link
from dsbench.plan.inputs import Cluster, Workload
from dsbench.plan.profile import MEASURED, fit_profile, link_from
from dsbench.plan.profile_check import load_profile
from dsbench.plan.profile_summary import summary_lines
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


# calibrate's all-reduce over 2 CPU ranks at --repeats 3 (tests/integration/test_calibrate.py, 2026-11-29 18:41, a
# noisy machine): bytes, seconds. On relative error the 4 MiB sample (1.2 ms, under 4 KiB's 2.6 ms) weighs most and
# the line found no growth: an infinite bandwidth, which the profile check then refused.
NOISY_ALL_REDUCE = [(4096, 2577.4e-6), (16384, 2111.9e-6), (65536, 2168.3e-6), (262144, 2481.3e-6),
                    (1048576, 3956.5e-6), (4194304, 1181.3e-6), (16777216, 7620.9e-6)]


def test_a_noisy_collective_still_gets_a_finite_bandwidth_and_says_how_it_was_fitted():
    points = [{"bytes": b, "seconds": t} for b, t in NOISY_ALL_REDUCE]
    assert fit_line([(b, t) for b, t in NOISY_ALL_REDUCE])[1] == 0.0  # the relative fit alone: no growth
    fitted = fit_collective("all-reduce", 2, points)
    assert fitted["fit"] == "absolute error" and 0 < fitted["bandwidth_gbs"] < 100
    # on absolute error: the largest buffer's 7.6 ms is most of the line (moved bytes = the buffer at n = 2)
    assert fitted["alpha_us"] * 1e-6 + 16777216 / (fitted["bandwidth_gbs"] * 1e9) == pytest.approx(7620.9e-6, rel=0.35)
    # times that fall with size throughout: the largest buffer's bytes over its whole time, a lower bound
    falling = fit_collective("p2p", 2, [{"bytes": b, "seconds": t} for b, t in ((4096, 3e-3), (65536, 2e-3),
                                                                                 (1048576, 1e-3))])
    assert falling["fit"] == "largest buffer" and falling["bandwidth_gbs"] == pytest.approx(1048576 / 1e-3 / 1e9)
    assert falling["alpha_us"] == pytest.approx(1000.0)
    # a clean line keeps the relative fit
    assert fit_collective("p2p", 2, [{"bytes": b, "seconds": 1e-4 + b / 2e9} for b in (4096, 65536, 2**20)])[
        "fit"] == "relative error"


def test_the_summary_says_when_a_noisy_collective_was_fitted_otherwise():
    data = _measured([1.0, 1.0])
    data["collectives"]["world"]["all-reduce"]["points"] = [{"bytes": b, "seconds": t, "p10": t, "p90": t}
                                                            for b, t in NOISY_ALL_REDUCE]
    lines = summary_lines(fit_profile(data))
    assert any("all-reduce" in line and "fitted on absolute" in line for line in lines), lines


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
    base = Cluster(nodes=1, gpus_per_node=2, gpu_mem_gib=12, peak_tflops=1.0, intra=INTERCONNECTS["pcie4"],
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


def _fsdp_measurement() -> dict:
    """calibrate's FSDP2 stack: 8 units of 1,000 bytes over 2 ranks; every figure in seconds."""
    timing = {"plain_forward_backward": 0.010, "plain_step": 0.016, "sharded_forward_backward": 0.050,
              "sharded_step": 0.070}
    return {"units": 8, "tensors_per_unit": 12, "unit_bytes": 1000, "world": 2,
            **{key: {"seconds": value} for key, value in timing.items()}}


def test_fsdp_costs_per_unit_are_what_the_stack_shows_beyond_its_collectives():
    from dsbench.plan.engine_costs import fsdp_unit_costs

    world = {"all-gather": {"alpha_us": 500.0, "bandwidth_gbs": 1.0},
             "reduce-scatter": {"alpha_us": 1000.0, "bandwidth_gbs": 1.0},
             "all-reduce": {"alpha_us": 200.0, "bandwidth_gbs": 1.0}}
    costs = fsdp_unit_costs(_fsdp_measurement(), world)
    # by hand: 40 ms extra over 8 units = 5 ms; one unit's collectives over 2 ranks move 500 bytes each:
    # 2 all-gathers (500 µs + 0.5 µs) and a reduce-scatter (1000 µs + 0.5 µs) = 2.0015 ms
    assert costs["fsdp_unit_s_per_micro_step"] == pytest.approx(5e-3 - 2.0015e-3, rel=1e-9)
    # optimizer: 20 ms sharded, less the plain 6 ms / 2 ranks, less the norm's all-reduce (200 µs + 4 bytes at
    # 1 GB/s), over 8 units
    assert costs["fsdp_unit_s_per_step"] == pytest.approx((20e-3 - 3e-3 - 200.004e-6) / 8, rel=1e-9)


def test_noise_never_makes_fsdp_cheaper_than_the_plain_model():
    from dsbench.plan.engine_costs import fsdp_unit_costs

    measured = _fsdp_measurement()
    measured["sharded_forward_backward"]["seconds"] = 0.005
    costs = fsdp_unit_costs(measured, {"all-gather": {"alpha_us": 1.0, "bandwidth_gbs": 1.0}})
    assert costs["fsdp_unit_s_per_micro_step"] == 0.0


def test_the_planner_adds_fsdp_s_own_work_per_unit_and_micro_step():
    shape = resolve_model("gpt2-mini")  # 4 blocks + the root: 5 fully_shard units (worker.engines.native)
    wl = Workload(shape=shape, seq_len=128, micro_batch=2, grad_accum=3, precision="fp32")
    plain = Cluster(nodes=1, gpus_per_node=2, gpu_mem_gib=12, peak_tflops=1.0, intra=INTERCONNECTS["pcie4"],
                    inter=INTERCONNECTS["pcie4"], host_link=INTERCONNECTS["pcie5"], compute_tflops=0.04)
    measured = replace(plain, fsdp_unit_s=(2e-3, 5e-3))
    fsdp, ddp = Candidate(strategy="fsdp"), Candidate(strategy="ddp")
    assert estimate(fsdp, wl, measured).framework_s == pytest.approx(5 * (2e-3 * 3 + 5e-3))
    assert estimate(fsdp, wl, measured).step_s - estimate(fsdp, wl, plain).step_s == pytest.approx(5 * 11e-3)
    assert estimate(ddp, wl, measured).framework_s == 0.0
    assert estimate(fsdp, wl, plain).framework_s == 0.0  # no profile, no term


def test_a_profile_with_the_fsdp_stack_carries_its_costs_to_the_planner():
    from dsbench.plan.machine_profile import with_profile

    measured = {**_measured([0.05, 0.04]), "fsdp": _fsdp_measurement()}
    profile = fit_profile(measured)
    assert profile["rates"]["fsdp_unit_s_per_micro_step"] > 0 and profile["rates"]["fsdp_unit_s_per_step"] > 0
    assert any(line.startswith("FSDP2 beyond compute") for line in summary_lines(profile))
    base = Cluster(nodes=1, gpus_per_node=2, gpu_mem_gib=12, peak_tflops=1.0, intra=INTERCONNECTS["pcie4"],
                   inter=INTERCONNECTS["pcie4"], host_link=INTERCONNECTS["pcie5"])
    assert with_profile(base, profile).fsdp_unit_s == (profile["rates"]["fsdp_unit_s_per_micro_step"],
                                                       profile["rates"]["fsdp_unit_s_per_step"])


def test_deepspeed_packs_gradients_into_buckets_and_reduces_an_oversized_one_alone():
    from dsbench.plan.comm import bucket_calls

    assert bucket_calls([1, 1, 1], 5) == 1
    assert bucket_calls([3, 3, 3], 5) == 3  # each would overflow the bucket the one before filled
    assert bucket_calls([10, 1, 1], 5) == 2  # the 10 alone, then the two together
    assert bucket_calls([], 5) == 0


@pytest.mark.parametrize("name", ["gpt2-tiny", "llama-tiny", "qwen2-tiny"])
def test_the_tensor_list_is_the_hf_models_parameters(name):
    from dsbench.worker.model import build_model

    shape = resolve_model(name)
    assert shape.tensors() == [p.numel() for p in build_model(shape, 0, False, False).parameters()]


def test_deepspeed_costs_per_reduction_and_per_tensor_from_the_stack():
    from dsbench.plan.engine_costs import zero_costs

    fsdp = _fsdp_measurement()  # plain forward+backward 10 ms, plain step 16 ms: AdamW 6 ms, 3 ms per shard
    zero = {"units": 8, "tensors_per_unit": 12, "width": 64, "world": 2,
            "zero1_step": {"seconds": 0.013 + 96 * 1e-3}, "zero2_step": {"seconds": 0.013 + 96 * 2e-3},
            "zero3_step": {"seconds": 0.013 + 96 * 2e-3 + 96 * 5e-3}}
    # by hand: 8 units x 6 Linear(64, 64); every 4,096-element weight fills a width² bucket, so each of the 96
    # tensors is reduced alone; ZeRO-3's cost beyond those reductions is spread over the same 96 tensors
    costs = zero_costs(zero, fsdp)
    assert costs["zero1_call_s"] == pytest.approx(1e-3) and costs["zero2_call_s"] == pytest.approx(2e-3)
    assert costs["zero3_tensor_s"] == pytest.approx(5e-3)


def test_deepspeed_costs_per_reduction_on_the_model_are_what_it_adds_beyond_its_collectives_bytes():
    """calibrate times the profile's own model plain and under ZeRO-1 and ZeRO-2 (calibrate_engines.
    measure_zero_model); the fit keeps what each stage adds beyond the plain forward+backward, 1/n of the AdamW
    step and its collectives' bytes, per reduction the planner counts."""
    from dataclasses import asdict

    from dsbench.plan.engine_costs import zero_model_costs

    shape = resolve_model("gpt2-mini")
    params = shape.num_params()
    zm = {"world": 2, "micro_batch": 2, "seq_len": 128, "plain_forward_backward": {"seconds": 0.100},
          "plain_step": {"seconds": 0.110}, "zero1_step": {"seconds": 0.150}, "zero2_step": {"seconds": 0.190}}
    link = {kind: {"alpha_us": 500.0, "bandwidth_gbs": 2.0, "latency_us_per_step": 500.0}
            for kind in ("all-reduce", "all-gather", "reduce-scatter")}
    # by hand: the plain step is 100 ms + half of the 10 ms AdamW step; each stage reduce-scatters the fp32
    # gradients and all-gathers the fp32 parameters, each rank of 2 sending half of each at 2 GB/s (no latency:
    # the measured cost holds it); 35 reductions for gpt2-mini's gradients in h² buckets (counted by hand in
    # test_the_planner_prices_deepspeed_by_its_reductions_and_tensors_when_measured), as ZeRO-1 and ZeRO-2 bucket
    # alike
    bytes_s = 2 * (params * 4 / 2) / 2e9
    costs = zero_model_costs(zm, link, shape, "fp32")
    assert costs["zero1_model_call_s"] == pytest.approx((0.150 - 0.105 - bytes_s) / 35, rel=1e-9)
    assert costs["zero2_model_call_s"] == pytest.approx((0.190 - 0.105 - bytes_s) / 35, rel=1e-9)
    zm["zero1_step"]["seconds"] = 0.100  # noise under the plain step: no cost, never a credit
    assert zero_model_costs(zm, link, shape, "fp32")["zero1_model_call_s"] == 0.0
    # a profile holds the shape as a record (dataclasses.asdict and num_params), and the fit reads it back whole
    from dsbench.models import shape_of_record
    from dsbench.plan.profile_summary import _engine_lines

    record = {**asdict(shape), "num_params": params}
    assert shape_of_record(record) == shape
    lines = _engine_lines({"model": record}, {"zero1_model_call_s": 2e-3, "zero2_model_call_s": 3.5e-3})
    assert lines == ["DeepSpeed on gpt2-mini itself, per gradient reduction: 2.00 ms (ZeRO-1) and 3.50 ms (ZeRO-2), "
                     "its collectives' bytes apart"]


def _gpt2_mini_on_two_ranks() -> tuple[Workload, Cluster]:
    """gpt2-mini, micro-batch 2 x 2 micro-steps of 128 tokens, on 2 ranks whose DeepSpeed stack costs 1 and 2 ms per
    ZeRO-1 and ZeRO-2 reduction and 5 ms per ZeRO-3 tensor."""
    wl = Workload(shape=resolve_model("gpt2-mini"), seq_len=128, micro_batch=2, grad_accum=2, precision="fp32")
    return wl, Cluster(nodes=1, gpus_per_node=2, gpu_mem_gib=12, peak_tflops=1.0, intra=INTERCONNECTS["pcie4"],
                       inter=INTERCONNECTS["pcie4"], host_link=INTERCONNECTS["pcie5"], compute_tflops=0.04,
                       deepspeed_s=(1e-3, 2e-3, 5e-3))


def test_the_planner_prices_zero1_and_zero2_at_the_models_cost_and_zero3_at_the_stacks():
    wl, stack = _gpt2_mini_on_two_ranks()
    model = replace(stack, zero_model_call_s=(3e-3, 4e-3))
    # gpt2-mini's 35 reductions: ZeRO-1 once a step, ZeRO-2 every one of the 2 micro-steps
    assert estimate(Candidate(strategy="zero1"), wl, model).framework_s == pytest.approx(35 * 3e-3)
    assert estimate(Candidate(strategy="zero2"), wl, model).framework_s == pytest.approx(35 * 4e-3 * 2)
    assert (estimate(Candidate(strategy="zero3"), wl, model).framework_s ==
            estimate(Candidate(strategy="zero3"), wl, stack).framework_s)


def test_the_planner_prices_deepspeed_by_its_reductions_and_tensors_when_measured():
    from dsbench.plan.calls import collective_calls
    from dsbench.plan.memory import accounting_for

    wl, cl = _gpt2_mini_on_two_ranks()
    shape = wl.shape
    acc = accounting_for("fp32", "zero3")
    for strategy, per_step in (("zero1", 1), ("zero2", 2)):
        calls = collective_calls(Candidate(strategy=strategy), shape, shape.num_params(), wl.reduce_bucket, acc)
        cost = 1e-3 if strategy == "zero1" else 2e-3
        expected = calls.grads * cost * per_step
        assert estimate(Candidate(strategy=strategy), wl, cl).framework_s == pytest.approx(expected)
    calls = collective_calls(Candidate(strategy="zero3"), shape, shape.num_params(), wl.reduce_bucket, acc)
    # gpt2-mini, counted by hand: 4 blocks x 4 weight matrices + wte + wpe gathered. Reductions in ready order
    # (h² = 16,384-element buckets): each block closes 8 (mlp c_proj w, c_fc b, c_fc w, ln_2 b, attn c_proj w,
    # c_attn b, c_attn w each overflow the bucket before them; ln_1 starts the next), 32 for the four, then wpe,
    # wte and the last flush: 35
    assert calls.gather_forward == 18 and calls.grads == 35
    # and its 52 parameter tensors (wte, wpe, 12 per block, ln_f's two) at ZeRO-3's cost each, every micro-step
    assert estimate(Candidate(strategy="zero3"), wl, cl).framework_s == pytest.approx((35 * 2e-3 + 52 * 5e-3) * 2)
    assert estimate(Candidate(strategy="zero1", pp=2), wl, cl).framework_s == 0.0  # the pipeline engine


def test_the_offload_cost_is_what_the_host_optimizer_adds_to_zero2_on_the_model_per_parameter_stepped():
    """calibrate times ZeRO-2 on the model with its optimizer on the host beside ZeRO-2 on the device; the fit keeps
    the difference per parameter of a rank's shard, signed (the host's Adam may step faster)."""
    from dsbench.plan.engine_costs import zero_model_costs

    shape = resolve_model("gpt2-mini")
    params = shape.num_params()
    zm = {"world": 2, "micro_batch": 2, "seq_len": 128, "plain_forward_backward": {"seconds": 0.100},
          "plain_step": {"seconds": 0.110}, "zero1_step": {"seconds": 0.150}, "zero2_step": {"seconds": 0.190},
          "zero2_offload_step": {"seconds": 0.170}}
    link = {kind: {"alpha_us": 500.0, "bandwidth_gbs": 2.0, "latency_us_per_step": 500.0}
            for kind in ("all-reduce", "all-gather", "reduce-scatter")}
    # by hand: 20 ms faster offloaded, over the half of gpt2-mini's parameters each of 2 ranks updates
    costs = zero_model_costs(zm, link, shape, "fp32")
    assert costs["zero_offload_param_s"] == pytest.approx(-0.020 / (params / 2), rel=1e-9)
    del zm["zero2_offload_step"]  # profiles before 2026-11-29 16:30: no such cost
    assert "zero_offload_param_s" not in zero_model_costs(zm, link, shape, "fp32")
    from dsbench.plan.profile_summary import _engine_lines

    # a negative cost is said as a saving (until 2026-12-03: "-2.50 ms per step")
    assert _engine_lines({"model": {}}, {"zero_offload_param_s": -2.5e-9}) == [
        "the optimizer offloaded to the host (ZeRO-2, DeepSpeedCPUAdam) saves 2.50 ms per step per million "
        "parameters a rank updates, against ZeRO-2 on the device"]
    assert _engine_lines({"model": {}}, {"zero_offload_param_s": 1.25e-9})[0].startswith(
        "the optimizer offloaded to the host (ZeRO-2, DeepSpeedCPUAdam) costs 1.25 ms per step")


def test_the_planner_prices_a_zero1_or_zero2_offload_at_the_profiles_measured_cost_and_the_rest_as_before():
    wl, stack = _gpt2_mini_on_two_ranks()
    measured = replace(stack, zero_offload_param_s=-4e-9)
    stepped = wl.shape.num_params() / 2  # each of the 2 ranks updates half the parameters
    for strategy in ("zero1", "zero2"):
        offloaded = Candidate(strategy=strategy, offload="cpu")
        assert estimate(offloaded, wl, measured).offload_s == pytest.approx(stepped * -4e-9)
        assert estimate(offloaded, wl, stack).offload_s > 0  # the host link's and host Adam's guess, unmeasured
        # the rest of the step is ZeRO-1/2's own, so the offload cell differs from it by the measured term alone
        plain = estimate(Candidate(strategy=strategy), wl, measured)
        assert estimate(offloaded, wl, measured).step_s - plain.step_s == pytest.approx(stepped * -4e-9)
    for other in (Candidate(strategy="zero3", offload="cpu"), Candidate(strategy="zero2", offload="nvme"),
                  Candidate(strategy="zero2", offload="cpu", pp=2)):
        assert estimate(other, wl, measured).offload_s == estimate(other, wl, stack).offload_s, other


def test_a_profiles_offload_cost_may_be_negative_but_must_be_a_number():
    from dsbench.errors import UserError
    from dsbench.plan.profile_check import load_profile

    profile = fit_profile(_measured([0.05, 0.04]))
    load_profile({**profile, "rates": {**profile["rates"], "zero_offload_param_s": -3e-9}}, "p.json")
    for bad in (float("nan"), "fast", True):
        with pytest.raises(UserError, match=r"rates.zero_offload_param_s must be a finite number, got"):
            load_profile({**profile, "rates": {**profile["rates"], "zero_offload_param_s": bad}}, "p.json")


def _tp_measurement(**seconds: float) -> dict:
    timing = {"plain": 0.008, "torch": 0.044, "autotp": 0.030, **seconds}
    return {"layers": 2, "tp": 2, "micro_batch": 2, "seq_len": 128, "hidden": 64,
            **{f"{name}_forward_backward": {"seconds": value} for name, value in timing.items()}}


def test_tensor_parallel_costs_per_layer_are_what_splitting_adds_beyond_its_all_reduces():
    from dsbench.plan.engine_costs import tensor_parallel_costs

    link = {"all-reduce": {"alpha_us": 1000.0, "bandwidth_gbs": 1.0}}
    costs = tensor_parallel_costs(_tp_measurement(), link, element_bytes=4)
    # by hand: the layers' ideal split is 8 ms / 2 = 4 ms. 4 all-reduces per layer of 2 x 128 x 64 fp32
    # activations (65,536 bytes; a 2-rank ring sends 2 x 65,536 x 1/2 bytes each): 4 x (1 ms + 65.536 µs)
    all_reduces = 4 * (1e-3 + 65_536e-9)
    assert costs["torch_tp_layer_s"] == pytest.approx((0.044 - 0.004) / 2 - all_reduces, rel=1e-9)
    assert costs["autotp_layer_s"] == pytest.approx((0.030 - 0.004) / 2 - all_reduces, rel=1e-9)
    # noise that makes the split layers look no slower than the ideal split costs nothing, never less
    assert tensor_parallel_costs(_tp_measurement(torch=0.004), link, 4)["torch_tp_layer_s"] == 0.0


def test_olmo2_s_split_layers_pay_their_projection_norms_collectives_apart():
    """OLMo-2's q_norm and k_norm (ProjectionNorm) add per layer 2 all-reduces and 2 reduce-scatters of s·b fp32
    sums of squares, which the planner prices beside the layer's cost (plan/comm.projection_norm_comm)."""
    from dsbench.plan.engine_costs import tensor_parallel_costs

    link = {kind: {"alpha_us": 1000.0, "bandwidth_gbs": 1.0} for kind in ("all-reduce", "reduce-scatter")}
    llama = tensor_parallel_costs(_tp_measurement(), link, element_bytes=4)
    olmo2 = tensor_parallel_costs({**_tp_measurement(), "projection_norms": True}, link, element_bytes=4)
    # by hand: 2 x 128 x 4 = 1,024 bytes each; a 2-rank all-reduce sends 2 x 1,024 / 2, a reduce-scatter 1,024 / 2
    norms = 2 * (1e-3 + 1_024e-9) + 2 * (1e-3 + 512e-9)
    assert olmo2["torch_tp_layer_s"] == pytest.approx(llama["torch_tp_layer_s"] - norms, rel=1e-9)


def test_a_profile_of_a_family_autotp_refuses_is_summarised_with_dtensor_s_figure_only():
    """OLMo-2's layers are timed under DTensor, not AutoTP (calibrate_layers.split_kinds); until 2026-12-01 the
    summary read an AutoTP figure whenever a DTensor one was there (a KeyError ended calibrate)."""
    tp = {key: value for key, value in _tp_measurement().items() if key != "autotp_forward_backward"}
    profile = fit_profile({**_measured([0.05, 0.04]), "tensor_parallel": {**tp, "projection_norms": True}})
    assert "torch_tp_layer_s" in profile["rates"] and "autotp_layer_s" not in profile["rates"]
    line = next(line for line in summary_lines(profile) if line.startswith("tensor parallelism over 2 ranks"))
    assert "(DTensor)" in line and "AutoTP" not in line


def test_a_profile_with_split_layers_carries_their_cost_to_the_planner():
    from dsbench.plan.machine_profile import with_profile

    profile = fit_profile({**_measured([0.05, 0.04]), "tensor_parallel": _tp_measurement()})
    rates = profile["rates"]
    assert rates["torch_tp_layer_s"] > rates["autotp_layer_s"] > 0
    assert any(line.startswith("tensor parallelism over 2 ranks") for line in summary_lines(profile))
    base = Cluster(nodes=1, gpus_per_node=2, gpu_mem_gib=12, peak_tflops=1.0, intra=INTERCONNECTS["pcie4"],
                   inter=INTERCONNECTS["pcie4"], host_link=INTERCONNECTS["pcie5"])
    # a profile without the sequence-parallel stack (written before 2026-11-26 16:00) has no SP cost
    assert with_profile(base, profile).tp_layer_s == (("dtensor", rates["torch_tp_layer_s"]),
                                                      ("autotp", rates["autotp_layer_s"]), ("dtensor_sp", 0.0))
    unsupported = {**_measured([0.05, 0.04]), "tensor_parallel": {"layers": 2, "tp": 2, "unsupported": "gpt2"}}
    assert "torch_tp_layer_s" not in fit_profile(unsupported)["rates"]


def test_the_planner_adds_tensor_parallelism_s_own_work_per_layer_and_micro_step():
    shape = resolve_model("llama-tiny")  # 2 decoder layers
    wl = Workload(shape=shape, seq_len=128, micro_batch=2, grad_accum=1, precision="fp32")
    plain = Cluster(nodes=1, gpus_per_node=2, gpu_mem_gib=12, peak_tflops=1.0, intra=INTERCONNECTS["pcie4"],
                    inter=INTERCONNECTS["pcie4"], host_link=INTERCONNECTS["pcie5"], compute_tflops=0.04)
    measured = replace(plain, tp_layer_s=(("dtensor", 7e-3), ("autotp", 3e-3)))
    # tp 2 on 2 ranks: 1 replica accumulating 2 micro-steps to keep the global batch; 2 layers each
    torch_tp = Candidate(strategy="ddp", tp=2, engine="torch")
    assert estimate(torch_tp, wl, measured).framework_s == pytest.approx(2 * 7e-3 * 2)
    assert estimate(Candidate(strategy="zero1", tp=2), wl, measured).framework_s == pytest.approx(2 * 3e-3 * 2)
    assert estimate(torch_tp, wl, plain).framework_s == 0.0  # no profile, no term
    assert estimate(Candidate(strategy="ddp"), wl, measured).framework_s == 0.0


@pytest.mark.parametrize(("model", "kinds"), [
    ("llama-tiny", {"torch_tp2", "torch_tp2_sp", "zero1_tp2"}),
    ("neox-tiny", {"torch_tp2", "torch_tp2_sp", "zero1_tp2"}),
    ("olmo2-tiny", {"torch_tp2", "torch_tp2_sp"}), ("phi3-tiny", {"torch_tp2", "torch_tp2_sp"}),
    ("gpt2-tiny", {"torch_tp2", "torch_tp2_sp"})])  # GPT-2 and Phi-3 under DTensor since 2026-12-01, not AutoTP
def test_calibrate_times_the_splits_a_launch_of_the_family_runs(model, kinds):
    """Oracle: the compare cells the family's launches accept (compare refuses the rest, as a launch would)."""
    from dsbench.bench.matrix import check_models
    from dsbench.worker.calibrate_layers import split_kinds

    accepted = set()
    for name in ("torch_tp2", "torch_tp2_sp", "zero1_tp2"):
        try:
            check_models([name], [model], 32)
            accepted.add(name)
        except UserError:
            pass
    assert accepted == kinds
    names = {"torch": "torch_tp2", "sp": "torch_tp2_sp", "autotp": "zero1_tp2"}
    assert {names[kind] for kind in split_kinds(resolve_model(model).arch)} == kinds


def test_calibrate_measures_each_distinct_group_once():
    from dsbench.worker.calibrate import groups_of

    assert groups_of(["a", "a"]) == {"world": [0, 1]}
    assert groups_of(["a", "b"]) == {"world": [0, 1]}  # one rank per node: world is the link across nodes
    assert groups_of(["a", "a", "b", "b"]) == {"world": [0, 1, 2, 3], "intra": [0, 1], "inter": [0, 2]}


def test_with_one_rank_per_node_the_world_link_is_the_link_across_nodes():
    from dsbench.plan.profile import compute_group

    profile = fit_profile({**_measured([0.05]), "nodes": 2, "world_size": 2})
    intra, inter = compute_group(profile)
    assert intra is None and inter is not None and inter.note.endswith("world)")
    assert compute_group(fit_profile(_measured([0.05])))[1] is None  # one node: nothing across nodes


@pytest.mark.parametrize(("change", "key"), [
    (lambda p: p["rates"].pop("model_tflops"), "rates.model_tflops"),
    (lambda p: p["rates"].update(model_tflops="x"), "rates.model_tflops"),
    (lambda p: p["rates"].update(adam_params_per_s=float("nan")), "rates.adam_params_per_s"),
    (lambda p: p["rates"].update(zero2_call_s=-1.0), "rates.zero2_call_s"),
    (lambda p: p["rates"]["model_tflops_by_micro_batch"].update({"2": 0}), "rates.model_tflops_by_micro_batch.2"),
    (lambda p: p["collectives"]["world"]["all-reduce"].update(bandwidth_gbs=None),
     "collectives.world.all-reduce.bandwidth_gbs"),
])
def test_a_profile_with_a_bad_figure_is_refused_naming_it(change, key):
    profile = fit_profile(_measured([0.05, 0.04]))
    profile["rates"]["model_tflops_by_micro_batch"] = {"2": 0.04}
    load_profile(json.loads(json.dumps(profile)), "p.json")  # as calibrate wrote it: accepted
    change(profile)
    with pytest.raises(UserError, match=f"p.json: {key}"):
        load_profile(profile, "p.json")


def test_calibrate_states_the_spread_of_each_timing_it_fits_from():
    """Half the p10-p90 range over the median, from the samples themselves (the widest rank's for per-rank ones)."""
    import json

    from dsbench.plan.profile import fit_profile
    from dsbench.plan.profile_summary import summary_lines
    from tests.conftest import DATA

    measured = json.loads((DATA / "runs" / "cpu-calibrated" / "profile-llama-tiny.json").read_text())
    measured = {**measured, "schema": "dsbench.measured/1"}
    profile = fit_profile({key: value for key, value in measured.items() if key not in ("rates", "spread")})
    ranks = [rank["model"] for rank in measured["compute_per_rank"]]
    assert profile["spread"]["forward+backward"] == max((r["p90"] - r["p10"]) / 2 / r["seconds"] for r in ranks)
    zero3 = measured["deepspeed"]["zero3_step"]
    assert profile["spread"]["ZeRO-3 stack step"] == (zero3["p90"] - zero3["p10"]) / 2 / zero3["seconds"]
    assert set(profile["spread"]) == {"forward+backward", "AdamW", "FSDP2 stack step", "ZeRO-1 stack step",
                                      "ZeRO-2 stack step", "ZeRO-3 stack step", "DTensor layers", "AutoTP layers",
                                      "collectives"}
    # a collective's: the median over its message sizes, the widest op of the measured links
    ops = [op["points"] for link in measured["collectives"].values() for op in link.values()
           if isinstance(op, dict) and "points" in op]
    widths = [sorted((p["p90"] - p["p10"]) / 2 / p["seconds"] for p in points) for points in ops]
    assert profile["spread"]["collectives"] == pytest.approx(max(
        (w[len(w) // 2] if len(w) % 2 else (w[len(w) // 2 - 1] + w[len(w) // 2]) / 2) for w in widths))
    line = next(line for line in summary_lines(profile) if line.startswith("spread"))
    assert f"ZeRO-3 stack step ±{profile['spread']['ZeRO-3 stack step']:.0%}" in line


def test_a_profile_with_the_split_backward_carries_the_slowest_rank_s_cost_to_the_planner():
    from dsbench.plan.machine_profile import with_profile

    measured = _measured([0.05, 0.04])
    for rank, split in zip(measured["compute_per_rank"], (0.034, 0.038), strict=True):
        rank["split_backward"] = {"whole": {"seconds": 0.030}, "split": {"seconds": split}, "layers": 4}
    profile = fit_profile(measured)
    assert profile["rates"]["zb_split_layer_s"] == pytest.approx(0.002, rel=1e-12)  # (38 - 30) ms / 4, by hand
    assert any(line.startswith("torch's zero-bubble schedules") for line in summary_lines(profile))
    base = Cluster(nodes=1, gpus_per_node=2, gpu_mem_gib=12, peak_tflops=1.0, intra=INTERCONNECTS["pcie4"],
                   inter=INTERCONNECTS["pcie4"], host_link=INTERCONNECTS["pcie5"])
    assert with_profile(base, profile).zb_split_layer_s == profile["rates"]["zb_split_layer_s"]
    older = fit_profile(_measured([0.05, 0.04]))  # measured before 2026-11-27 05:00: no cost, none charged
    assert "zb_split_layer_s" not in older["rates"] and with_profile(base, older).zb_split_layer_s == 0.0


@pytest.mark.parametrize("value", [float("nan"), -1.0, "abc", True, None])
def test_a_bad_split_backward_cost_in_a_profile_is_one_line_naming_it(value):
    measured = _measured([0.05, 0.04])
    for rank in measured["compute_per_rank"]:
        rank["split_backward"] = {"whole": {"seconds": 0.030}, "split": {"seconds": 0.034}, "layers": 4}
    profile = fit_profile(measured)
    profile["rates"]["zb_split_layer_s"] = value
    with pytest.raises(UserError, match=r"p\.json: rates\.zb_split_layer_s must be a finite number >= 0"):
        load_profile(profile, "p.json")


def test_ranks_beyond_the_cores_share_them():
    """calibrate measures one rank per core (one thread each); a plan with more ranks per node than the machine has
    cores runs each at cores / ranks of those rates, relative to the calibration's own ranks per node. By hand."""
    from dsbench.plan.machine_profile import core_share, with_profile

    profile = {"device": "cpu", "machine": {"cpus": 2}, "world_size": 2, "nodes": 1}
    assert [core_share(profile, ranks) for ranks in (1, 2, 4, 8)] == [1.0, 1.0, 0.5, 0.25]
    assert core_share({**profile, "world_size": 4}, 2) == 2.0  # calibrated oversubscribed: its rates were halved
    assert core_share({**profile, "world_size": 8, "nodes": 4}, 4) == 0.5  # 2 ranks per node when calibrated
    assert core_share({**profile, "device": "cuda:0"}, 8) == core_share({"device": "cpu"}, 8) == 1.0
    fitted = {**fit_profile(_measured([0.05, 0.04])), "machine": {"cpus": 2}}
    base = Cluster(nodes=1, gpus_per_node=2, gpu_mem_gib=12, peak_tflops=1.0, intra=INTERCONNECTS["pcie4"],
                   inter=INTERCONNECTS["pcie4"], host_link=INTERCONNECTS["pcie5"])
    two, four = with_profile(base, fitted), with_profile(replace(base, gpus_per_node=4), fitted)
    assert four.compute_tflops == two.compute_tflops / 2
    assert four.optimizer_params_per_s == two.optimizer_params_per_s / 2
    assert four.deepspeed_s == tuple(2 * s for s in two.deepspeed_s) and four.intra == two.intra  # links as measured


@pytest.mark.parametrize("machine", [{"cpus": 0}, {"cpus": -2}, {"cpus": "2"}, {"cpus": True}, {"cpus": 2.5},
                                     {"cpus": None}, "vm"])
def test_a_bad_core_count_in_a_profile_is_one_line_naming_it(machine):
    profile = {**fit_profile(_measured([0.05, 0.04])), "machine": machine}
    with pytest.raises(UserError, match=r"p\.json: machine\.cpus must be a whole number >= 1"):
        load_profile(profile, "p.json")
