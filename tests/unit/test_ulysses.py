"""DeepSpeed Ulysses (issue 28): its layout, config and refusals, with DeepSpeed's own code as the oracle where it
has one. The loss parity with one process is tests/integration/test_model_parallel.py's (ulysses2_llama,
zero3_ulysses2_dp2_llama)."""

from __future__ import annotations

import pytest

from dsbench import strategies, strategy_match
from dsbench.configs.api import make_render_spec
from dsbench.configs.layout import config_dims
from dsbench.configs.render import render
from dsbench.errors import UserError
from dsbench.parallel import ParallelDims


def deepspeed_groups(world: int, sp: int, monkeypatch) -> list[list[int]]:
    """The sequence-parallel groups DeepSpeed builds (parallel_state_sp.initialize_sequence_parallel), with its
    process-group calls recorded instead of made."""
    import deepspeed.runtime.sequence_parallel.parallel_state_sp as mpu

    made: list[list[int]] = []
    monkeypatch.setattr(mpu.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(mpu.dist, "get_world_size", lambda *a, **k: world)
    monkeypatch.setattr(mpu.dist, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(mpu.dist, "new_group", lambda ranks, *a, **k: made.append(list(ranks)) or object())
    monkeypatch.setattr(mpu, "_SEQUENCE_PARALLEL_GROUP", None)
    monkeypatch.setattr(mpu, "_SEQUENCE_DATA_PARALLEL_GROUP", None)
    mpu.initialize_sequence_parallel(sequence_parallel_size=sp)
    return made[:world // sp]  # the sequence-parallel groups come first, then the sequence-data-parallel one


@pytest.mark.parametrize(("world", "sp"), [(2, 2), (4, 2), (8, 4), (8, 2)])
def test_the_layout_is_deepspeeds(world, sp, monkeypatch):
    dims = ParallelDims(world=world, sp=sp)
    assert dims.dp == world // sp and dims.model_parallel == sp
    for group in deepspeed_groups(world, sp, monkeypatch):
        # one group reads one replica's samples and holds every slice of their sequences once
        assert {dims.dp_rank(rank) for rank in group} == {dims.dp_rank(group[0])}
        assert sorted(dims.sp_rank(rank) for rank in group) == list(range(sp))
    assert sorted({dims.dp_rank(rank) for rank in range(world)}) == list(range(world // sp))


def test_the_batch_arithmetic_counts_the_sequence_parallel_ranks():
    dims = ParallelDims(world=4, sp=2)
    assert dims.samples_per_step(micro_batch=1, grad_accum=2) == 4  # 2 replicas
    assert dims.accumulation_for(1) == 2 and dims.pure_dp_accumulation(2) == 1  # compare's fixed global batch
    assert dims.rank_share(128) == 64  # each rank computes half of every sequence
    assert dims.deepspeed_batch_ranks() == 2


def test_render_writes_deepspeeds_key_and_deepspeed_accepts_the_batch():
    """DeepSpeedConfig itself (validate's in-process check) asserts the batch with the Ulysses degree."""
    from dsbench.configs.validate import ValidateContext, validate

    spec, _ = make_render_spec({"zero": 1, "ulysses": 2, "world_size": 4, "micro_batch": 2}, model="llama-tiny")
    config, _ = render(spec)
    assert config["sequence_parallel_size"] == 2 and config["train_batch_size"] == 2 * 1 * 2
    assert config_dims(config, 4) == ParallelDims(world=4, sp=2)
    findings = validate(config, ValidateContext(world_size=4))
    assert not [f for f in findings if f.severity == "error"], findings
    broken = validate({**config, "train_batch_size": 8}, ValidateContext(world_size=4))
    assert any("train_batch_size" in f.message for f in broken if f.severity == "error")


@pytest.mark.parametrize(("flags", "words"), [
    ({"zero": 0, "ulysses": 2, "world_size": 2}, "--ulysses 2 needs --zero 1, 2 or 3"),
    ({"zero": 1, "ulysses": 2, "tp": 2, "world_size": 4}, "drop --tp/--pipeline-stages"),
    ({"zero": 1, "ulysses": 2, "world_size": 3}, "world size 3 is not divisible by --ulysses 2"),
    ({"zero": 1, "ulysses": 0, "world_size": 2}, "--ulysses must be >= 1"),
])
def test_bad_layouts_are_one_line(flags, words):
    with pytest.raises(UserError, match=words.replace("(", r"\(").replace("+", r"\+")):
        make_render_spec(flags)


def test_the_model_and_sequence_must_split():
    from dsbench.model_checks import check_ulysses

    with pytest.raises(UserError, match="--seq-len 3 must split into --ulysses 2"):
        check_ulysses(2, 3)
    check_ulysses(2, 128)
    # a sliding window shorter than the sequence, which Ulysses' attention would drop (its causal mask only)
    with pytest.raises(UserError, match="sliding window of 32 tokens, which DeepSpeed's Ulysses does not apply"):
        check_ulysses(2, 128, window=32)
    check_ulysses(2, 32, window=32)
    with pytest.raises(UserError, match="must divide llama-tiny's 4 attention heads"):
        ParallelDims(world=8, sp=8).check_model(name="llama-tiny", heads=4, kv_heads=2, layers=2)
    ParallelDims(world=4, sp=4).check_model(name="m", heads=4, kv_heads=2, layers=2)  # kv heads replicated


def test_compare_names_and_flags():
    ulysses = strategies.get("ulysses2")
    assert (ulysses.zero, ulysses.ulysses, ulysses.model_parallel, ulysses.family) == (1, 2, 2, "ulysses")
    assert ulysses.launch_flags == ("--zero", "1", "--ulysses", "2") and ulysses.planned
    assert strategies.get("zero3_ulysses4").launch_flags == ("--zero", "3", "--ulysses", "4")
    assert strategies.lookup("ulysses1") is None and strategies.lookup("ulysses2_sp") is None
    assert strategy_match.name_of_run("deepspeed", zero=3, ulysses=2) == "zero3_ulysses2"
    assert strategy_match.name_of_run("deepspeed", zero=1, ulysses=2) == "ulysses2"


def test_a_model_without_sdpa_attention_is_refused_in_one_line():
    """DeepSpeed's Ulysses wraps the SDPA path (eager attention needs a 4D mask it cannot shard): refused before
    DeepSpeed's own ValueError from inside register_with_transformers."""
    from types import SimpleNamespace

    from dsbench.worker.engines.base import EngineOptions
    from dsbench.worker.engines.deepspeed import UlyssesEngine

    model = SimpleNamespace(config=SimpleNamespace(_attn_implementation="eager"))
    options = EngineOptions(lr=1e-3, weight_decay=0.0, betas=(0.9, 0.999), eps=1e-8, grad_clip=1.0, warmup_steps=0,
                            grad_accum=1, precision="fp32", ds_config={"train_micro_batch_size_per_gpu": 1},
                            dims=ParallelDims(world=2, sp=2), seq_len=64)
    with pytest.raises(UserError, match="--ulysses needs the model's SDPA attention; this model runs 'eager'"):
        UlyssesEngine(model, options, SimpleNamespace(rank=0))


def _planned(strategy: str, ulysses: int = 1, world: int = 2, ulysses_layer_s: float = 0.0):
    from dsbench.models import PRESETS
    from dsbench.plan.candidate import Candidate
    from dsbench.plan.estimate import estimate
    from dsbench.plan.hardware import Link
    from dsbench.plan.inputs import Cluster, Workload

    link = Link("x", 10.0, 2.0, "test")  # 10 GB/s, 2 us
    cl = Cluster(nodes=1, gpus_per_node=world, gpu_mem_gib=12, peak_tflops=1.0, intra=link, inter=link,
                 host_link=link, compute_tflops=0.04, ulysses_layer_s=ulysses_layer_s)
    wl = Workload(shape=PRESETS["llama-tiny"], seq_len=128, micro_batch=2, grad_accum=1, precision="fp32")
    return estimate(Candidate(strategy=strategy, ulysses=ulysses), wl, cl)


def test_the_planner_prices_ulysses_all_to_all_by_hand():
    """llama-tiny (h 64, 4 heads of 16, 2 key/value heads, 2 layers), seq 128, micro 2, fp32, Ulysses 2 on 2 ranks:
    the fixed global batch makes the one group accumulate 2 micro-batches. Per layer and direction the rank's q and
    o buffers are 64 tokens x 2 samples x 64 x 4 bytes, k and v 64 x 2 x (16 x 2 heads) x 4 (Jacobs et al. 2023:
    all-to-all of q, k, v before attention and of o after it, the same in the backward); each sends half."""
    est = _planned("zero1", ulysses=2)
    [all_to_all] = [c for c in est.comm if c.kind == "all-to-all"]
    q_o = 64 * 2 * 64 * 4
    k_v = 64 * 2 * 32 * 4
    per_direction = 2 * q_o + 2 * k_v  # one layer, forward or backward
    sent = per_direction * 2 * 2 * 2 / 2  # x 2 directions x 2 layers x 2 micro-batches, half of it leaves
    assert all_to_all.bytes_per_rank == sent and all_to_all.calls == 8 * 2 * 2
    assert all_to_all.seconds == pytest.approx(sent / 10e9 + 32 * 1 * 2e-6)


def test_ulysses_keeps_zero1_s_compute_and_states_and_halves_the_activations_linear_terms():
    """The same global batch on the same 2 ranks: ZeRO-1 splits it by samples, Ulysses by tokens; each rank does
    the same matrix work, holds the same ZeRO-1 shard (DeepSpeed partitions over the sequence-data-parallel group),
    and saves half the tokens' activations per micro-batch."""
    zero1, ulysses = _planned("zero1"), _planned("zero1", ulysses=2)
    assert ulysses.compute_s == pytest.approx(zero1.compute_s)
    assert ulysses.states.device == pytest.approx(zero1.states.device)
    assert ulysses.activations < zero1.activations and ulysses.dp == 1 and zero1.dp == 2
    assert ulysses.tokens_per_s < zero1.tokens_per_s  # the all-to-alls are on the critical path
    assert _planned("zero3", ulysses=2).states.device == pytest.approx(_planned("zero3").states.device)


def test_the_ulysses_layer_cost_is_what_its_layers_add_beyond_a_share_of_the_compute_and_the_all_to_alls():
    """calibrate times the model's own layers plain and under Ulysses over 2 ranks (dsbench.worker.calibrate_engines
    .ulysses_trainer); the fit keeps what is left after 1/sp of the plain layers and the layer's 8 all-to-alls."""
    from dsbench.plan.engine_costs import tensor_parallel_costs

    measured = {"layers": 2, "tp": 2, "micro_batch": 2, "seq_len": 128, "hidden": 64, "heads": 4, "kv_heads": 2,
                **{f"{name}_forward_backward": {"seconds": value}
                   for name, value in (("plain", 0.008), ("torch", 0.044), ("ulysses", 0.020))}}
    link = {"all-gather": {"alpha_us": 400.0, "bandwidth_gbs": 1.0, "latency_us_per_step": 400.0}}
    # by hand (llama-tiny's shape as in test_the_planner_prices_ulysses_all_to_all_by_hand): per layer and
    # direction q and o of 64 tokens x 2 samples x 64 x 4 bytes, k and v of 64 x 2 x 32 x 4; both directions, half
    # of it sent; 8 calls of one ring step each at 400 µs
    sent = (2 * 64 * 2 * 64 * 4 + 2 * 64 * 2 * 32 * 4) * 2 / 2
    comm = sent / 1e9 + 8 * 400e-6
    costs = tensor_parallel_costs(measured, link, element_bytes=4)
    assert costs["ulysses_layer_s"] == pytest.approx((0.020 - 0.008 / 2) / 2 - comm, rel=1e-9)
    measured["ulysses_forward_backward"]["seconds"] = 0.004  # noise below the ideal: no cost, never a credit
    assert tensor_parallel_costs(measured, link, element_bytes=4)["ulysses_layer_s"] == 0.0
    del measured["ulysses_forward_backward"]  # a profile written before 2026-11-29 13:00: nothing charged
    assert "ulysses_layer_s" not in tensor_parallel_costs(measured, link, element_bytes=4)


def test_the_planner_charges_the_ulysses_layer_cost_every_layer_and_micro_step_and_only_to_ulysses():
    from dsbench.plan.candidate import Candidate
    from dsbench.plan.interval import framework_timings

    base, ulysses = _planned("zero1", ulysses=2), _planned("zero1", ulysses=2, ulysses_layer_s=3e-3)
    # llama-tiny's 2 layers x the 2 micro-batches one group accumulates for the global batch
    assert ulysses.framework_s - base.framework_s == pytest.approx(2 * 2 * 3e-3)
    assert _planned("zero1", ulysses_layer_s=3e-3).framework_s == _planned("zero1").framework_s
    assert "Ulysses layers" in framework_timings(Candidate(strategy="zero1", ulysses=2))
    assert "Ulysses layers" not in framework_timings(Candidate(strategy="zero1"))


def test_the_planner_offers_no_ulysses_over_a_shorter_sliding_window(tmp_path):
    """The ranking would otherwise recommend a layout the launch refuses (check_ulysses)."""
    import json as _json

    from dsbench.plan.api import build
    from dsbench.plan.recommend import candidates
    from dsbench.plan.request import PlanRequest

    (tmp_path / "config.json").write_text(_json.dumps({
        "model_type": "qwen2", "vocab_size": 4096, "hidden_size": 256, "num_hidden_layers": 4,
        "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 512, "use_sliding_window": True,
        "sliding_window": 64, "max_window_layers": 2}))
    workload, cluster, _ = build(PlanRequest(model=str(tmp_path), gpus=8, seq_len=128, precision="fp32"))
    assert not [c for c in candidates(cluster, workload.shape, 128) if c.ulysses > 1]
    assert [c for c in candidates(cluster, workload.shape, 64) if c.ulysses > 1]
