"""Activation memory per rank (issue 28): dsbench/plan/saved.py against the bytes real runs saved for the backward.

Oracle: tests/data/activations/measured.json, written by ``python scripts/bench_activation_memory.py --json ...``
(13 launches on 2026-11-26: llama-tiny and a wider Llama, single-process and torch_tp on 2 CPU ranks, with and
without sequence parallelism, selective and full recompute and the vocabulary-parallel loss; fp32, one micro-batch
of 2 x 128 tokens). Each run's ``saved_activations`` is the unique storages the saved-tensor hooks saw in its first
step, parameters excluded. The model was written from transformers' Llama code, not fitted to these figures.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from dsbench.models import ModelShape
from dsbench.plan.saved import saved_activation_bytes
from tests.conftest import DATA

ROWS = {row["name"]: row for name in ("measured.json", "measured_head_dim.json", "measured_qk_norm.json",
                                      "measured_olmo2.json")
        for row in json.loads((DATA / "activations" / name).read_text())["rows"]}
"""measured_head_dim.json (2026-11-30, 3 launches: ``--only heads_single,heads_tp2,heads_tp2_sp``): a Mistral whose 4
heads are 128 wide on a hidden size of 256 (Mistral-Nemo's layout), single-process and torch_tp on 2 ranks.
measured_qk_norm.json (the same day, ``--only qk_single,qk_tp2,qk_tp2_sp``): the same model as a Qwen3, whose
q_norm and k_norm keep their own tensors. measured_olmo2.json (2026-12-01, ``--only
olmo_single,olmo_tp2,olmo_tp2_sp``): the wider model as an OLMo-2, split by torch_tp since that day (its q_norm and
k_norm on each rank's columns, their mean square reduced over the ranks)."""


def _predicted(row: dict, **change) -> float:
    shape = ModelShape(**{k: v for k, v in row["model"].items() if k in ModelShape.__dataclass_fields__})
    settings = {"tp": row["tp"], "sequence_parallel": row["sequence_parallel"], "loss_parallel": row["loss_parallel"],
                "recompute": row["recompute"], **change}
    return saved_activation_bytes(shape, row["seq_len"], row["micro_batch"], **settings).hooked


@pytest.mark.parametrize("name", list(ROWS))
def test_the_model_predicts_each_measured_run_within_two_percent(name):
    """The issue's goal is 10%; the inventory lands within 0.4% on every run, so 2% guards it."""
    row = ROWS[name]
    measured = max(row["measured_bytes_per_rank"])
    assert _predicted(row) == pytest.approx(measured, rel=0.02)


def test_sequence_parallelism_divides_the_sequence_sharded_part_by_the_tp_degree():
    """What SP saves is the norms' share: each rank keeps its half of them (the regions' gathered inputs stay whole
    under DTensor), measured and predicted alike."""
    whole, sp = (max(ROWS[n]["measured_bytes_per_rank"]) for n in ("wide_tp2", "wide_tp2_sp"))
    row = ROWS["wide_tp2"]
    shape = ModelShape(**{k: v for k, v in row["model"].items() if k in ModelShape.__dataclass_fields__})
    tokens = row["seq_len"] * row["micro_batch"]
    norms = (2 * shape.layers + 1) * (2 * tokens * shape.hidden + tokens) * 4  # every RMSNorm, fp32, on one rank
    assert whole - sp == pytest.approx(norms / 2, rel=0.01)
    assert _predicted(row) - _predicted(row, sequence_parallel=True) == pytest.approx(norms / 2)


def test_full_recompute_keeps_each_block_input_and_the_recomputed_block_apart():
    row = ROWS["single_full"]
    shape = ModelShape(**{k: v for k, v in row["model"].items() if k in ModelShape.__dataclass_fields__})
    full = saved_activation_bytes(shape, row["seq_len"], row["micro_batch"], recompute="full")
    none = saved_activation_bytes(shape, row["seq_len"], row["micro_batch"])
    assert full.recomputing > 0 and full.total > full.hooked and full.layers < none.layers / 10


@pytest.mark.parametrize("name", ["heads_single", "heads_tp2", "heads_tp2_sp"])
def test_heads_wider_than_hidden_over_heads_are_counted_at_their_width(name):
    """q, k, v and the attention's output are heads x head_dim wide: read as the hidden size (the inventory before
    2026-11-30) the prediction misses these runs by 6.8-9.6%; at their width it lands within 0.1%."""
    row = ROWS[name]
    measured = max(row["measured_bytes_per_rank"])
    assert row["model"]["head_dim"] == 128 and row["model"]["hidden"] // row["model"]["heads"] == 64
    assert _predicted(row) == pytest.approx(measured, rel=0.002)
    shape = ModelShape(**{k: v for k, v in row["model"].items() if k in ModelShape.__dataclass_fields__})
    narrow = saved_activation_bytes(replace(shape, head_dim=None), row["seq_len"], row["micro_batch"], tp=row["tp"],
                                    sequence_parallel=row["sequence_parallel"]).hooked
    assert abs(narrow - measured) / measured > 0.05


@pytest.mark.parametrize("name", ["qk_single", "qk_tp2", "qk_tp2_sp"])
def test_qwen3s_query_and_key_norms_keep_their_own_tensors(name):
    """The q_norm/k_norm term (written from transformers' Qwen3RMSNorm before these runs) lands within 0.1%; the
    same heads without it (the model read as a Mistral) miss by 11-16%."""
    row = ROWS[name]
    measured = max(row["measured_bytes_per_rank"])
    assert row["model"]["arch"] == "qwen3"
    assert _predicted(row) == pytest.approx(measured, rel=0.002)
    shape = ModelShape(**{k: v for k, v in row["model"].items() if k in ModelShape.__dataclass_fields__})
    plain = saved_activation_bytes(replace(shape, arch="mistral"), row["seq_len"], row["micro_batch"], tp=row["tp"],
                                   sequence_parallel=row["sequence_parallel"]).hooked
    assert (measured - plain) / measured > 0.1



@pytest.mark.parametrize("name", ["llama-tiny", "qwen2-tiny", "gemma-tiny", "phi3-tiny", "olmo2-tiny"])
def test_the_inventory_holds_for_each_llama_layout_family_measured_in_process(name):
    """One fp32 forward and backward of transformers' own model, its saved tensors counted by the worker's hooks
    (state_bytes.SavedActivations: unique storages, parameters excluded), against the inventory: Gemma's norms
    scale by 1 + weight (a hidden-wide tensor each, which the inventory leaves out) and its embedding scales
    itself, within 0.1% on 2026-11-30, as Llama's and Qwen2's; Phi-3's fused q|k|v keeps 2·q + kv more per token
    than Llama's (4.7% more on phi3-tiny, which the Llama inventory would have missed); OLMo-2's q_norm and k_norm
    keep Qwen3's three tensors over the whole projections, with one rsqrt per token each (written from its code,
    then measured: 0.06%)."""
    import torch

    from dsbench.models import PRESETS
    from dsbench.worker.model import build_model
    from dsbench.worker.state_bytes import SavedActivations

    model = build_model(PRESETS[name], seed=0)
    ids = torch.randint(0, 4096, (2, 128), generator=torch.Generator().manual_seed(0))
    with SavedActivations(model) as saved:
        model(input_ids=ids, labels=ids).loss.backward()
    assert saved_activation_bytes(PRESETS[name], 128, 2).hooked == pytest.approx(saved.bytes, rel=0.002)
    if name == "phi3-tiny":  # the fused term is what closes the gap: as Llama's layers, the count falls short
        llama = replace(PRESETS[name], arch="llama")
        assert saved_activation_bytes(llama, 128, 2).hooked < 0.96 * saved.bytes


def _hooked_bytes(shape: ModelShape) -> int:
    """What one fp32 forward and backward of transformers' own model for ``shape`` saves for the backward (2 x 128
    tokens), as the worker's saved-tensor hooks count it."""
    import torch

    from dsbench.worker.model import build_model
    from dsbench.worker.state_bytes import SavedActivations

    model = build_model(shape, seed=0)
    ids = torch.randint(0, 4096, (2, 128), generator=torch.Generator().manual_seed(0))
    with SavedActivations(model) as saved:
        model(input_ids=ids, labels=ids).loss.backward()
    return saved.bytes


@pytest.mark.parametrize(("activation", "bound"), [("gelu_new", 0.05), ("gelu", 0.07)])
def test_the_planners_gpt2_block_is_what_transformers_keeps(activation, bound):
    """The CPU planner's bytes per GPT-2 block (Korthikanti et al.'s count, fp32, plus the tanh GELU's three ff-wide
    tensors: tanh, 0.5·x and 1 + tanh) against one fp32 forward and backward of transformers' own GPT-2, a block's share
    measured as 4 blocks less 2 (the worker's hooks). Measured 2026-12-01: without the tanh term the count was 39%
    short of the gelu_new block (3.68 MB against 2.23); with it 3.3% over; the exact GELU's block, which has no such
    tensors, 5.8% over."""
    from dsbench.models import PRESETS
    from dsbench.plan.api import build
    from dsbench.plan.candidate import Candidate
    from dsbench.plan.estimate import estimate
    from dsbench.plan.request import PlanRequest

    shape = replace(PRESETS["gpt2-tiny"], hidden=128, intermediate=512, extra={"activation_function": activation})

    def measured(layers: int) -> int:
        return _hooked_bytes(replace(shape, layers=layers))

    def planned(layers: int) -> float:
        workload, cluster, _ = build(PlanRequest(model="gpt2-tiny", gpus=1, seq_len=128, micro_batch=2, grad_accum=1,
                                                 precision="fp32"))
        workload = replace(workload, shape=replace(shape, layers=layers))
        return estimate(Candidate(strategy="ddp"), workload, cluster).activations

    block = (measured(4) - measured(2)) / 2
    assert (planned(4) - planned(2)) / 2 == pytest.approx(block, rel=bound)


@pytest.mark.parametrize("name", ["gpt2-tiny", "neox-tiny"])
def test_the_planners_layer_norm_head_is_what_transformers_keeps(name):
    """The CPU planner's head for GPT-2 and GPT-NeoX (plan/saved.layer_norm_head_bytes) against transformers' own
    model in fp32: the measured bytes of 2 blocks and the head, less the 2 blocks' share (4 blocks less 2, halved).
    Measured 2026-12-01: 4.464 MB (GPT-2) and 4.471 (GPT-NeoX), predicted 4.458; until that day the planner used
    Korthikanti et al.'s logits term, 16-bit logits and their fp32 copy doubled in fp32 (8.389 MB), which put the
    whole 2-block run 35-40% over what the hooks saw."""
    from dsbench.models import PRESETS
    from dsbench.plan.saved import layer_norm_head_bytes

    shape = replace(PRESETS[name], hidden=128, intermediate=512)
    two, four = (_hooked_bytes(replace(shape, layers=layers)) for layers in (2, 4))
    head = two - (four - two)
    assert layer_norm_head_bytes(shape, 2 * 128, 4) == pytest.approx(head, rel=0.01)
