"""The CPU planner's torch_tp options (issue 28): sequence parallelism and the vocabulary-parallel loss.

Oracles: the collectives counted by hand from Korthikanti et al. 2022 sec. 4.2.2 (SP turns each of TP's all-reduces
into a reduce-scatter and an all-gather of the same tensor) and from dsbench's DTensor plan
(dsbench/worker/engines/tensor_parallel.megatron_plan), the ring formulas of plan/comm.py's docstring (seeds/001), and
llama-tiny's own sizes (tests/data/models: 2 layers, hidden 64, vocabulary 4096, an untied head).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from dsbench.model_config import resolve_model
from dsbench.plan.candidate import Candidate
from dsbench.plan.engine_costs import tensor_parallel_costs
from dsbench.plan.estimate import estimate
from dsbench.plan.hardware import INTERCONNECTS, Link
from dsbench.plan.inputs import Cluster, Workload
from dsbench.plan.interval import framework_timings

LAYERS, HIDDEN, VOCAB, SEQ, MICRO = 2, 64, 4096, 128, 2
ACTIVATIONS = SEQ * MICRO * HIDDEN * 4  # one s·b·h fp32 tensor: 65,536 bytes
LINK = Link("by hand", bandwidth_gbs=1.0, latency_us=100.0, note="")
CLUSTER = Cluster(nodes=1, gpus_per_node=2, gpu_mem_gib=12, peak_tflops=1.0, intra=LINK, inter=LINK,
                  host_link=INTERCONNECTS["pcie5"], compute_tflops=0.04)


def _estimate(cluster: Cluster = CLUSTER, **options):
    workload = Workload(shape=resolve_model("llama-tiny"), seq_len=SEQ, micro_batch=MICRO, grad_accum=1,
                        precision="fp32")
    return estimate(Candidate(strategy="ddp", tp=2, engine="torch", **options), workload, cluster)


def _collectives(est) -> dict[str, tuple[str, float, int]]:
    """What each collective moves (tp 2 on 2 ranks: one replica, so the data-parallel ones move nothing)."""
    return {c.what: (c.kind, c.bytes_per_rank, c.calls) for c in est.comm if c.bytes_per_rank}


def test_sequence_parallelism_trades_each_all_reduce_for_a_reduce_scatter_and_an_all_gather():
    # tp 2 on 2 ranks: one replica accumulating 2 micro-steps for the global batch of pure data parallelism
    micro_steps = 2
    plain, sp = _collectives(_estimate()), _collectives(_estimate(sequence_parallel=True))
    assert plain == {"activations (TP, 4 per layer)": ("all-reduce", 4 * LAYERS * micro_steps * ACTIVATIONS,
                                                       4 * LAYERS * micro_steps)}  # 2 x B x 1/2 per call
    # per layer per micro-step 4 of each, plus the head's gather (forward) and scatter (backward) and the first
    # block's shard gathered back in the backward; a 2-rank ring sends B x 1/2 per call
    gathers, scatters = (4 * LAYERS + 2) * micro_steps, (4 * LAYERS + 1) * micro_steps
    assert sp == {"activations (TP+SP, 4 per layer, 2 at the ends)": ("all-gather", gathers * ACTIVATIONS / 2, gathers),
                  "activations (TP+SP, 4 per layer, 1 at the head)": ("reduce-scatter", scatters * ACTIVATIONS / 2,
                                                                      scatters)}


def test_the_vocabulary_parallel_loss_splits_the_head_and_reduces_three_figures_per_token():
    micro_steps, tokens = 2, SEQ * MICRO
    plain, lp = _estimate(), _estimate(loss_parallel=True)  # estimates
    added = {k: v for k, v in _collectives(lp).items() if k not in _collectives(plain)}
    assert added == {"loss over vocabulary shards (3 per micro-step)": ("all-reduce", 3 * micro_steps * tokens * 4,
                                                                        3 * micro_steps),
                     "LM head input gradient (TP)": ("all-reduce", micro_steps * ACTIVATIONS, micro_steps)}
    # with SP the head's input gradient is the reduce-scatter SP already counts
    both = _collectives(_estimate(loss_parallel=True, sequence_parallel=True))
    assert "LM head input gradient (TP)" not in both and "loss over vocabulary shards (3 per micro-step)" in both
    # the head's 4096 x 64 weights split over 2 ranks: half of them, with their gradient and Adam's 2 moments, fp32
    assert plain.states.device - lp.states.device == pytest.approx(VOCAB * HIDDEN / 2 * 4 * 4)
    # each rank keeps its half of the fp32 logits for the loss's backward (plan/saved.py's head)
    assert plain.activations - lp.activations == pytest.approx(tokens * VOCAB * 4 / 2)
    assert lp.compute_s < plain.compute_s


def test_the_sequence_parallel_layer_cost_is_what_sp_adds_beyond_its_gathers_and_scatters():
    measured = {"layers": 2, "tp": 2, "micro_batch": 2, "seq_len": 128, "hidden": 64,
                **{f"{name}_forward_backward": {"seconds": value}
                   for name, value in (("plain", 0.008), ("torch", 0.044), ("autotp", 0.030), ("sp", 0.060))}}
    link = {kind: {"alpha_us": alpha, "bandwidth_gbs": 1.0}
            for kind, alpha in (("all-reduce", 1000.0), ("all-gather", 400.0), ("reduce-scatter", 600.0))}
    costs = tensor_parallel_costs(measured, link, element_bytes=4)
    # by hand: ideal split 8 ms / 2; per layer 4 all-gathers and 4 reduce-scatters of 65,536 bytes, each sending
    # half of it at 1 GB/s (32.768 µs) after its latency
    per_layer = 4 * (400e-6 + 32.768e-6) + 4 * (600e-6 + 32.768e-6)
    assert costs["torch_tp_sp_layer_s"] == pytest.approx((0.060 - 0.004) / 2 - per_layer, rel=1e-9)
    del measured["sp_forward_backward"]  # a profile written before SP was measured
    assert "torch_tp_sp_layer_s" not in tensor_parallel_costs(measured, link, element_bytes=4)


def test_the_planner_charges_sp_its_own_layer_cost_and_plain_dtensor_s_without_one():
    measured = replace(CLUSTER, tp_layer_s=(("dtensor", 7e-3), ("autotp", 3e-3), ("dtensor_sp", 11e-3)))
    # 2 layers x 2 micro-steps
    assert _estimate(measured, sequence_parallel=True).framework_s == pytest.approx(2 * 2 * 11e-3)
    assert _estimate(measured).framework_s == pytest.approx(2 * 2 * 7e-3)
    # a profile written before SP was measured
    older = replace(CLUSTER, tp_layer_s=(("dtensor", 7e-3), ("autotp", 3e-3), ("dtensor_sp", 0.0)))
    assert _estimate(older, sequence_parallel=True).framework_s == pytest.approx(2 * 2 * 7e-3)


def test_the_loss_parallel_head_cost_is_what_it_adds_beyond_its_split_and_its_all_reduces():
    measured = {"layers": 2, "tp": 2, "micro_batch": 2, "seq_len": 128, "hidden": 64,
                **{f"{name}_forward_backward": {"seconds": value}
                   for name, value in (("plain", 0.008), ("torch", 0.044), ("autotp", 0.030), ("head", 0.010),
                                       ("lp", 0.020))}}
    link = {"all-reduce": {"alpha_us": 1000.0, "bandwidth_gbs": 1.0}}
    # by hand: the whole head and loss split 2 ways, 5 ms; the loss's 3 all-reduces of 2 x 128 fp32 figures
    # (1,024 bytes: a 2-rank ring sends 2 x 1,024 x 1/2 bytes, 1.024 µs) and the head's input gradient (65,536
    # bytes: 65.536 µs), after 1 ms of latency each
    lp_comm = 3 * (1e-3 + 1.024e-6) + (1e-3 + 65.536e-6)
    costs = tensor_parallel_costs(measured, link, element_bytes=4)
    assert costs["torch_tp_lp_head_s"] == pytest.approx(0.020 - 0.005 - lp_comm, rel=1e-9)
    del measured["lp_forward_backward"]  # a profile written before the head was measured: no cost, none charged
    assert "torch_tp_lp_head_s" not in tensor_parallel_costs(measured, link, element_bytes=4)


def test_the_planner_charges_the_loss_parallel_head_every_micro_step():
    measured = replace(CLUSTER, lp_head_s=5e-3)
    # tp 2 on 2 ranks: 2 micro-steps per step; plain DTensor layers cost nothing in this cluster
    assert _estimate(measured, loss_parallel=True).framework_s == pytest.approx(2 * 5e-3)
    assert _estimate(measured).framework_s == 0.0
    assert "DTensor loss-parallel head" in framework_timings(Candidate(strategy="ddp", tp=2, engine="torch",
                                                                      loss_parallel=True))


@pytest.mark.parametrize("options, name", [({"sequence_parallel": True}, "torch_tp2_sp"),
                                           ({"loss_parallel": True}, "torch_tp2_lp"),
                                           ({"sequence_parallel": True, "loss_parallel": True}, "torch_tp2_sp_lp")])
def test_a_plan_row_names_and_reads_back_its_options(options, name):
    row = _estimate(**options).to_dict()
    assert row["name"] == name and Candidate.from_dict(row) == Candidate(strategy="ddp", tp=2, engine="torch",
                                                                         **options)


def test_fsdp_under_torch_s_pipeline_holds_its_stage_gathered_with_unsharded_gradients():
    """torch_3d (FSDP2 inside torch's pipeline schedules): every micro-batch's backward but the last runs without
    gradient sync or resharding (torch/distributed/pipelining/stage.py), so the buffers are the whole stage's fp32
    weights gathered plus its fp32 gradients unsharded; dsbench's own FSDP2 engine syncs on the last micro-step only
    (worker/engines/native.py). By hand from llama-tiny's sizes."""
    from dsbench.plan.memory import held_params

    workload = Workload(shape=resolve_model("llama-tiny"), seq_len=SEQ, micro_batch=MICRO, grad_accum=1,
                        precision="fp32")
    cluster = replace(CLUSTER, gpus_per_node=8)
    three_d = estimate(Candidate(strategy="fsdp", tp=2, pp=2, engine="torch"), workload, cluster)
    stage = held_params(workload.shape, tp=2, pp=2)
    assert three_d.buffers == pytest.approx(stage * (4 + 4))
    # without a pipeline, one step of one micro-batch: two gathered blocks (current, prefetched), one block's grads
    fsdp = Candidate(strategy="fsdp", engine="torch")
    shape = workload.shape
    block = (shape.num_params() - shape.vocab_size * shape.hidden) / shape.layers
    assert estimate(fsdp, workload, cluster).buffers == pytest.approx(2 * block * 4 + block * 4)
    # accumulating 2 micro-steps, dsbench's engine reduce-scatters on the last only: the whole model's fp32 grads
    accumulating = estimate(fsdp, replace(workload, grad_accum=2), cluster)
    assert accumulating.buffers == pytest.approx(2 * block * 4 + held_params(shape) * 4)


def test_the_split_backward_cost_is_what_the_split_adds_per_layer():
    """calibrate's one-stage measurement (forward + torch's whole backward, forward + its input- and weight-gradient
    passes): the difference over the layers, the slowest rank's; zero when noise makes it negative; none stored
    for a profile measured before it."""
    from dsbench.plan.engine_costs import split_backward_cost

    split = {"whole": {"seconds": 0.030}, "split": {"seconds": 0.036}, "layers": 4}
    assert split_backward_cost(split) == pytest.approx(0.0015, rel=1e-12)  # (36 - 30) ms / 4 layers, by hand
    assert split_backward_cost({**split, "split": {"seconds": 0.029}}) == 0.0


def test_the_planner_charges_the_split_backward_to_the_zero_bubble_schedule_only():
    """pp 2 on 2 ranks, one replica accumulating 2 micro-batches (the global batch of pure data parallelism):
    each rank's chunks hold half of llama-tiny's 2 layers, so the zero-bubble schedule pays 1 layer x 2
    micro-batches x the cost; interleaved 1F1B runs the whole backward and pays nothing."""
    workload = Workload(shape=resolve_model("llama-tiny"), seq_len=SEQ, micro_batch=MICRO, grad_accum=1,
                        precision="fp32")
    measured = replace(CLUSTER, zb_split_layer_s=2e-3)

    def framework(cluster: Cluster, zero_bubble: bool) -> float:
        cand = Candidate(strategy="ddp", pp=2, engine="torch", virtual_stages=2, zero_bubble=zero_bubble)
        return estimate(cand, workload, cluster).framework_s

    assert framework(measured, True) - framework(CLUSTER, True) == pytest.approx(LAYERS / 2 * 2 * 2e-3)
    assert framework(measured, False) == framework(CLUSTER, False)


def test_olmo2s_projection_norms_add_their_statistics_collectives():
    """OLMo-2's q_norm and k_norm span every TP rank's columns: per layer and micro-step 2 all-reduces forward and
    2 reduce-scatters backward of the s·b fp32 sums of squares (counted with torch's CommDebugMode on the
    ProjectionNorm of a 2-rank mesh, 2026-12-01), on top of Llama's collectives; a Llama-family model has none."""
    micro_steps, stats = 2, SEQ * MICRO * 4
    workload = Workload(shape=resolve_model("olmo2-tiny"), seq_len=SEQ, micro_batch=MICRO, grad_accum=1,
                        precision="fp32")
    olmo = _collectives(estimate(Candidate(strategy="ddp", tp=2, engine="torch"), workload, CLUSTER))
    calls = 2 * LAYERS * micro_steps
    assert {k: v for k, v in olmo.items() if "projection norms" in k} == {
        "projection norms (OLMo-2 TP, 2 per layer)": ("all-reduce", calls * stats, calls),  # 2 x B x 1/2 per call
        "projection norms' gradients (2 per layer)": ("reduce-scatter", calls * stats / 2, calls)}
    assert not [k for k in _collectives(_estimate()) if "projection norms" in k]


def test_the_gpu_model_prices_olmo2s_projection_norms_beside_its_tp_all_reduces():
    """The GPU model's TP collectives of an OLMo-2 block are Llama's and 2 all-reduces of b·s fp32 statistics."""
    from dsbench.plan.gpu_comm import group_gbs, ring_seconds, tp_comm_seconds
    from dsbench.plan.gpu_layout import Layout, shape_of_model
    from dsbench.plan.gpu_profiles import profile_for
    from tests.conftest import DATA

    olmo = shape_of_model(resolve_model(str(DATA / "models" / "olmo-2-7b")))
    hw = profile_for("h100-sxm")
    layouts = [Layout(shape, 4096, "h100-sxm", 8, 8, tp=4, micro_batch=2, global_batch=4)
               for shape in (olmo, replace(olmo, family="llama"))]
    added = tp_comm_seconds(layouts[0], hw) - tp_comm_seconds(layouts[1], hw)
    expected = 2 * ring_seconds("all_reduce", 4 * 2 * 4096, 4, group_gbs(4, layouts[0], hw), hw)
    assert added == pytest.approx(expected) and added > 0
