"""dsbench's DDP, torch_tp and torch_pp in bf16 or fp16 train fp32 weights under torch.autocast: the planner prices
their fp32 model states (``amp``) and the 16-bit casts of the weights that autograd keeps for the backward.

Oracles: torch's own autograd in one process (the bytes of the 16-bit tensors of a weight's shape that the forward
saves under torch.autocast, as dsbench's engines run it: worker/engines/native.autocast), and the model states of
dsbench's DDP under bf16 as a run counts them from its tensors (4 + 4 + 8 bytes per parameter, no master copy).
"""

from __future__ import annotations

import pytest

from dsbench.models import PRESETS
from dsbench.plan.candidate import Candidate
from dsbench.plan.estimate import estimate
from dsbench.plan.hardware import Link
from dsbench.plan.inputs import Cluster, Workload
from dsbench.plan.memory import accounting_for
from dsbench.plan.rank_memory import autocast_cast_params, autocasts


def _saved_casts(name: str, checkpointing: bool = False) -> int:
    """Bytes of the 16-bit weight casts autograd saved in one forward of ``name`` under bf16 autocast (one sequence
    of 40 tokens, so that no activation has a weight's shape), with every block checkpointed as the worker's
    ``--activation-checkpointing`` does (what a checkpointed block saves is the checkpoint's own, not kept)."""
    import torch

    from dsbench.model_config import resolve_model
    from dsbench.worker.model import build_model

    model = build_model(resolve_model(name), seed=0, gradient_checkpointing=checkpointing)
    shapes = {tuple(p.shape) for p in model.parameters() if p.dim() == 2}
    kept: dict[int, int] = {}

    def pack(t):
        if t.dtype == torch.bfloat16 and {tuple(t.shape), tuple(t.shape[::-1])} & shapes:
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    ids = torch.randint(0, 4096, (1, 40))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return sum(kept.values())


@pytest.mark.parametrize("name", ["llama-tiny", "gpt2-tiny"])
def test_the_casts_autocast_keeps_for_the_backward_are_priced(name):
    """2 bytes per parameter of the blocks' matrices and the head (GPT-2's tied embedding): 708,608 bytes on
    llama-tiny, measured and priced; GPT-2's biases, in its split parameters, are not kept (priced 0.25% over)."""
    measured = _saved_casts(name)
    assert measured == pytest.approx(2 * autocast_cast_params(PRESETS[name], "ddp"), rel=0.005, abs=0)


def test_a_16_bit_ddp_row_holds_fp32_states_and_the_casts():
    """Until 2026-12-04 the ranking priced dsbench's DDP in bf16 as 16-bit weights with an fp32 master copy (the same
    16 bytes per parameter, other parts) and left the casts out; its gradient all-reduce moved 2 bytes a parameter,
    where DDP's buckets hold the fp32 gradients (4)."""
    acc = accounting_for("bf16", "ddp")
    assert (acc.name, acc.params, acc.grads, acc.optimizer, acc.master) == ("amp", 4, 4, 8, 0)
    assert accounting_for("bf16", "zero2").name == accounting_for("bf16", "fsdp").name == "mixed16"
    link = Link("x", 10.0, 0.0, "test")
    cl = Cluster(nodes=1, gpus_per_node=2, gpu_mem_gib=12, peak_tflops=1.0, intra=link, inter=link, host_link=link)
    shape = PRESETS["llama-tiny"]
    rows = {precision: estimate(Candidate(strategy="ddp"), Workload(shape=shape, seq_len=128, micro_batch=2,
                                                                     grad_accum=1, precision=precision), cl)
            for precision in ("bf16", "fp32")}
    assert autocasts(Candidate(strategy="ddp"), "bf16") and not autocasts(Candidate(strategy="ddp"), "fp32")
    assert not autocasts(Candidate(strategy="zero2"), "bf16") and autocasts(Candidate(strategy="zero2",
                                                                                      autocast=True), "bf16")
    assert rows["bf16"].states.total == rows["fp32"].states.total == 16 * shape.num_params()
    grads = [c.bytes_per_rank for row in rows.values() for c in row.comm if "gradient" in c.what]
    assert grads and len(set(grads)) == 1  # fp32 gradients reduced either way
    casts = 2 * autocast_cast_params(shape, "ddp")
    bf16_no_casts = estimate(Candidate(strategy="zero0"), Workload(shape=shape, seq_len=128, micro_batch=2,
                                                                   grad_accum=1, precision="bf16"), cl)
    assert rows["bf16"].activations == pytest.approx(bf16_no_casts.activations + casts)


@pytest.mark.parametrize("name", ["llama-tiny", "gpt2-tiny"])
def test_under_checkpointing_only_the_head_keeps_its_cast(name):
    """A checkpointed block saves no cast (its forward runs again in the backward, casting again): the forward
    keeps the head's (GPT-2's tied embedding's), 524,288 bytes on both. The planner adds the one block being
    recomputed, whose casts live during its backward only (the saved-tensor hook cannot see them)."""
    shape = PRESETS[name]
    p = shape.parts()
    measured = _saved_casts(name, checkpointing=True)
    assert measured == 2 * (p["head"] or p["embedding"])
    priced = 2 * autocast_cast_params(shape, "ddp", checkpointing=True)
    assert priced == pytest.approx(measured + 2 * p["block_split"], rel=1e-9)
    assert priced < 2 * autocast_cast_params(shape, "ddp")


def test_a_pipeline_s_casts_are_held_per_micro_batch_in_flight():
    """Each pipeline forward casts again under its own autocast, and its graph keeps those casts until its backward:
    the ranking holds them as it holds the activations, per micro-batch in flight on each stage (measured on 4 ranks:
    tests/integration/test_engine_ranks.py). Until 2026-12-05 one micro-batch's were added to the busiest stage. A
    cast of 1 GB per layer on llama-tiny's two layers, pp 2 x 4 micro-batches under 1F1B: the first stage holds 2."""
    from dsbench.plan.rank_memory import _activations

    wl = Workload(shape=PRESETS["llama-tiny"], seq_len=128, micro_batch=1, grad_accum=4, precision="bf16")
    cand = Candidate(strategy="ddp", pp=2, engine="torch")
    added = _activations(cand, wl, 4, 2, (1e9, 0.0)) - _activations(cand, wl, 4, 2, (0.0, 0.0))
    assert added == pytest.approx(2e9, rel=1e-3)
    one = Candidate(strategy="ddp", engine="torch")  # no pipeline: one micro-batch, both layers
    assert _activations(one, wl, 4, 2, (1e9, 5e8)) - _activations(one, wl, 4, 2, (0.0, 0.0)) == pytest.approx(2.5e9)
    # under full recompute a block keeps none: the one being recomputed holds its casts, once
    ckpt = Candidate(strategy="ddp", pp=2, engine="torch", checkpointing=True)
    assert _activations(ckpt, wl, 4, 2, (1e9, 0.0)) - _activations(ckpt, wl, 4, 2, (0.0, 0.0)) == pytest.approx(1e9)


@pytest.mark.parametrize("schedule, in_flight", [("1f1b", 2), ("gpipe", 4)])
def test_the_gpu_model_holds_a_pipeline_s_casts_per_micro_batch_in_flight(schedule, in_flight):
    """The GPU memory model's first stage (its busiest under these schedules): fp32 weights and, per micro-batch in
    flight (2 of 4 under 1F1B on 2 stages, all 4 under GPipe), its blocks' 16-bit casts; its embedding, a lookup, casts
    nothing. Until 2026-12-05 one micro-batch's casts of every weight the stage held, the embedding's included."""
    from dsbench.plan.gpu_layout import Layout, Shape
    from dsbench.plan.gpu_memory import GIB, peak_memory

    llama = Shape("llama", 22, 2048, 32, 4, 5632, 32000)
    lay = Layout(llama, 2048, "h100-sxm", 2, 2, pp=2, schedule=schedule, micro_batch=1, global_batch=4,
                 kernels="hf", autocast=True).check()
    params = 11 * llama.layer_params() + 32000 * 2048  # the first stage: 11 blocks and the embedding
    expected = 4 * params + 2 * in_flight * 11 * llama.layer_params()
    assert peak_memory(lay).terms["weights"] * GIB == pytest.approx(expected, rel=1e-9)
