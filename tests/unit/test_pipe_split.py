"""Pipeline splits of Hugging Face models (no processes): the split computes the model's own logits and loss."""

from __future__ import annotations

import pytest
import torch

from dsbench.configs.pipeline import pipeline_settings
from dsbench.errors import UserError
from dsbench.models import PRESETS
from dsbench.worker.engines.model_parallel import stage_layers
from dsbench.worker.engines.tensor_parallel import megatron_plan
from dsbench.worker.model import build_model
from dsbench.worker.pipe_split import BlockPipe, causal_lm_loss, split_model


@pytest.mark.parametrize("name", ["gpt2-tiny", "llama-tiny", "qwen2-tiny", "gemma-tiny", "phi3-tiny", "olmo2-tiny",
                                  "neox-tiny"])
def test_split_model_computes_the_models_logits_and_loss(name):
    """The oracle is the unsplit HF model: same logits bit for bit, same loss as its ForCausalLMLoss."""
    model = build_model(PRESETS[name], seed=0)
    ids = torch.randint(0, PRESETS[name].vocab_size, (2, 48), generator=torch.Generator().manual_seed(1))
    expected = model(input_ids=ids, labels=ids)
    split = split_model(model)
    hidden = ids
    for layer in split.layers():
        hidden = layer(hidden)
    logits = split.logits(hidden)
    assert torch.equal(logits, expected.logits)
    assert causal_lm_loss(logits, ids).item() == pytest.approx(expected.loss.item(), rel=1e-6)
    assert split.tied == (name in ("gpt2-tiny", "gemma-tiny"))  # GPT-2 ties lm_head to wte, Gemma to its embedding
    assert len(split.blocks) == PRESETS[name].layers and all(isinstance(b, BlockPipe) for b in split.blocks)


WINDOWED = {  # config.json fields of a family that windows its attention, a window of 16 on 48 tokens
    "mistral": {"sliding_window": 16},
    "qwen2": {"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 1},  # layer 1 on
    "phi3": {"sliding_window": 16, "pad_token_id": 0},
}


@pytest.mark.parametrize("family", WINDOWED)
def test_a_windowed_models_split_masks_each_block_as_the_model_does(family):
    """Each block of the split makes the mask its model's forward makes (a sliding window where the family's model
    picks one); the oracle is the unsplit model's logits, on a sequence three windows long. Until 2026-11-30 a Phi-3's
    blocks attended causally in full (the mask rule named Mistral only)."""
    from dsbench.model_config import shape_from_config

    config = {"model_type": family, "vocab_size": 4096, "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, **WINDOWED[family]}
    shape = shape_from_config(config, family, "local", None)
    assert shape.sliding_window() == 16
    model = build_model(shape, seed=0)
    ids = torch.randint(0, 4096, (2, 48), generator=torch.Generator().manual_seed(1))
    hidden = ids
    for layer in split_model(model).layers():
        hidden = layer(hidden)
    assert torch.equal(split_model(model).logits(hidden), model(input_ids=ids).logits)


def test_stages_get_equal_shares_of_the_blocks():
    split = split_model(build_model(PRESETS["llama-tiny"], seed=0))  # 2 decoder blocks
    first, last = stage_layers(split, 0, 2), stage_layers(split, 1, 2)
    assert [type(m).__name__ for m in first] == ["TokenEmbedding", "BlockPipe"]
    assert [type(m).__name__ for m in last] == ["BlockPipe", "Norm", "LMHead"]
    gpt2 = split_model(build_model(PRESETS["gpt2-tiny"], seed=0))
    assert [type(m).__name__ for m in stage_layers(gpt2, 1, 2)] == ["BlockPipe", "Norm", "TiedHead"]


def test_an_unknown_family_names_those_it_knows():
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("falcon", vocab_size=64, hidden_size=32, num_hidden_layers=1,
                                  num_attention_heads=2)
    with pytest.raises(UserError, match="does not know the model family 'falcon'; it splits gpt2, gpt_neox, llama"):
        split_model(AutoModelForCausalLM.from_config(config))


@pytest.mark.parametrize("pipeline, expected", [
    ({"stages": 2}, (2, "type:BlockPipe", 0)),
    ({"stages": 4, "partition": "parameters", "activation_checkpoint_interval": 1}, (4, "parameters", 1)),
    ({"stages": 2, "partition": "best"}, (2, "type:BlockPipe", 0)),  # DeepSpeed's placeholder default
    ({"stages": 2, "partition_method": "type:BlockPipe|Norm"}, (2, "type:BlockPipe|Norm", 0)),
])
def test_pipeline_settings_from_the_config(pipeline, expected):
    assert pipeline_settings({"pipeline": pipeline}) == expected


@pytest.mark.parametrize("pipeline, needle", [
    ({"stages": "auto"}, "pipeline.stages must be an integer >= 1"),
    ({"stages": 2, "partition_method": "profile"}, "'profile' is not implemented"),
    ({"stages": 2, "activation_checkpoint_interval": -1}, "activation_checkpoint_interval must be an integer >= 0"),
])
def test_bad_pipeline_sections_are_named(pipeline, needle):
    with pytest.raises(UserError, match=needle):
        pipeline_settings({"pipeline": pipeline})


def test_megatron_plan_covers_every_projection():
    plan = megatron_plan(build_model(PRESETS["llama-tiny"], seed=0))
    assert len(plan) == 2 * 7  # q, k, v, o, gate, up, down per layer
    assert type(plan["model.layers.1.self_attn.o_proj"]).__name__ == "RowwiseParallel"
    assert type(plan["model.layers.0.mlp.up_proj"]).__name__ == "ColwiseParallel"


def test_megatron_plan_splits_phi3_s_fused_projections_where_transformers_plan_does():
    """Oracle: Phi3Config.base_model_tp_plan, whose column-wise modules (qkv_proj, gate_up_proj: it gathers their
    outputs whole) dsbench splits block by block (FusedColumns: each rank whole query groups, its gate and up
    columns alike) and whose row-wise ones it splits as Megatron does (refused before 2026-12-01)."""
    from transformers import Phi3Config

    model = build_model(PRESETS["phi3-tiny"], seed=0)
    plan = megatron_plan(model)
    expected = {f"model.{pattern.replace('*', str(i))}": ("FusedColumns" if kind.startswith("colwise")
                                                          else "RowwiseParallel")
                for pattern, kind in Phi3Config.base_model_tp_plan.items() for i in range(2)}
    assert {name: type(style).__name__ for name, style in plan.items()} == expected
    assert {plan[name].kind for name in expected if "qkv" in name or "gate_up" in name} == {"qkv", "gate_up"}


def test_megatron_plan_splits_gpt2_s_conv1d_layers_with_q_k_and_v_apart():
    """GPT-2 (no tensor-parallel plan in transformers 5: GPT2Config.base_model_tp_plan is None): its four Conv1D
    layers per block, c_attn as three column blocks (q|k|v), the MLP's first column-parallel, both outputs
    row-parallel; under sequence parallelism the first block takes its sequence shard from the 4 positional
    arguments GPT2Model hands it (the first DTensor-laid, the rest left)."""
    model = build_model(PRESETS["gpt2-tiny"], seed=0)
    plan = megatron_plan(model)
    styles = {name: (type(style).__name__, getattr(style, "parts", None)) for name, style in plan.items()}
    assert styles == {f"transformer.h.{i}.{name}": style for i in range(2) for name, style in (
        ("attn.c_attn", ("Conv1DColumns", 3)), ("attn.c_proj", ("Conv1DRows", None)),
        ("mlp.c_fc", ("Conv1DColumns", 1)), ("mlp.c_proj", ("Conv1DRows", None)))}
    modules = dict(model.named_modules())
    assert all(type(modules[name]).__name__ == "Conv1D" for name in plan)
    first = megatron_plan(model, sequence_parallel=True)["transformer.h.0"]
    assert len(first.input_layouts) == len(first.desired_input_layouts) == 4 and first.input_layouts[1:] == (None,) * 3


@pytest.mark.parametrize("name", ["llama-tiny", "qwen2-tiny", "gemma-tiny", "neox-tiny"])
def test_megatron_plan_is_the_tp_plan_transformers_gives_each_family(name):
    """The oracle is transformers' own ``base_model_tp_plan`` for the family (colwise/rowwise by module pattern):
    dsbench's plan splits the same linears the same way, every one of them a module the model has, and no other."""
    model = build_model(PRESETS[name], seed=0)
    plan = megatron_plan(model)
    theirs = type(model.config).base_model_tp_plan
    base = model.base_model_prefix  # "model" or "gpt_neox": transformers' patterns are relative to it
    kinds = {"ColwiseParallel": "colwise", "RowwiseParallel": "rowwise"}
    ours = {name.removeprefix(f"{base}."): kinds[type(style).__name__] for name, style in plan.items()}
    expected = {pattern.replace("*", str(i)): kind for pattern, kind in theirs.items() if pattern.startswith("layers.")
                for i in range(model.config.num_hidden_layers) if kind in ("colwise", "rowwise")}
    assert ours == expected
    modules = dict(model.named_modules())
    assert all(isinstance(modules[name], torch.nn.Linear) for name in plan)


def test_megatron_plan_places_neox_sequence_parallel_regions_by_position():
    """GPTNeoXLayer hands its attention the hidden states positionally (Llama's decoder layer by keyword): the
    gather before each region reads the argument the layer passes, and the norms, head and first block are
    the GPT-NeoX model's own."""
    plan = megatron_plan(build_model(PRESETS["neox-tiny"], seed=0), sequence_parallel=True, loss_parallel=True)
    attention = plan["gpt_neox.layers.1.attention"]
    assert str(attention.input_layouts) == "(Shard(dim=1),)" and attention.input_kwarg_layouts == {}
    assert type(plan["gpt_neox.layers.0.input_layernorm"]).__name__ == "SequenceParallel"
    assert type(plan["gpt_neox.final_layer_norm"]).__name__ == "SequenceParallel"
    assert type(plan["lm_head"]).__name__ == "ColwiseParallel"
    llama = megatron_plan(build_model(PRESETS["llama-tiny"], seed=0), sequence_parallel=True)
    gather = llama["model.layers.1.self_attn"]
    assert gather.input_layouts is None and str(gather.input_kwarg_layouts) == "{'hidden_states': Shard(dim=1)}"


def test_megatron_plan_splits_olmo2s_projection_norms_with_their_columns():
    """OLMo-2's q_norm and k_norm are as wide as their projections: each is a ProjectionNorm (its weight split as
    the projection's outputs, the mean square reduced over the TP ranks), not Qwen3's per-head SequenceParallel;
    under sequence parallelism its norms after attention and the MLP run on sequence shards and hand the residual
    stream local tensors (they are added to it, where Llama's feed a parallel region)."""
    plan = megatron_plan(build_model(PRESETS["olmo2-tiny"], seed=0), sequence_parallel=True)
    assert {type(plan[f"model.layers.1.self_attn.{n}"]).__name__ for n in ("q_norm", "k_norm")} == {"ProjectionNorm"}
    assert "model.layers.1.input_layernorm" not in plan
    norms = [plan[f"model.layers.1.{n}"] for n in ("post_attention_layernorm", "post_feedforward_layernorm")]
    assert [(type(n).__name__, n.use_local_output) for n in norms] == [("SequenceParallel", True)] * 2
    qwen3 = megatron_plan(build_model(PRESETS["llama-tiny"], seed=0), sequence_parallel=True)
    assert qwen3["model.layers.1.input_layernorm"].use_local_output is False
