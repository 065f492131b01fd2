"""The GPU time and memory model on heads that are not hidden / heads wide (Mistral-Nemo: 32 heads of 128 on a
hidden size of 5120). Oracle: transformers' own modules of the same config.json, built on the meta device, for the
block's GEMMs and weights; and the model's own pricing of the same layout with the head width left to the hidden
size, for what stays unchanged."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from dsbench.model_config import resolve_model
from dsbench.plan.gpu_layout import Layout, Shape
from dsbench.plan.gpu_memory import peak_memory
from dsbench.plan.gpu_profiles import profile_for
from dsbench.plan.gpu_time import _linears, step_time
from tests.conftest import DATA

NEMO = DATA / "models" / "mistral-nemo"
SMALL = {"model_type": "mistral", "vocab_size": 1000, "hidden_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 128}


def _shape(config: dict) -> Shape:
    return Shape("llama", config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"],
                 config["num_key_value_heads"], config["intermediate_size"], config["vocab_size"],
                 config.get("head_dim") or 0)


def _block_linears(config: dict) -> list[tuple[int, int]]:
    """(in, out) features of the first decoder block's linears, as transformers builds them."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    block = model.model.layers[0]
    return [(m.in_features, m.out_features) for m in block.modules() if isinstance(m, torch.nn.Linear)]


@pytest.mark.parametrize("config", [SMALL, json.loads((NEMO / "config.json").read_text())], ids=["small", "nemo"])
def test_the_blocks_gemms_and_weights_are_transformers_linears(config):
    """_linears' (k, n) per GEMM on one GPU (q, k and v fused into one GEMM, as Megatron fuses them) cover exactly
    the block's linears, and layer_params is their weights."""
    shape = _shape(config)
    lay = Layout(shape, 128, "h100-sxm", 1, 1, global_batch=1)
    linears = _block_linears(config)  # q, k, v, o, gate, up, down
    q, k, v, o, gate, up, down = linears
    assert q[0] == k[0] == v[0] == shape.hidden
    expected = [(shape.hidden, q[1] + k[1] + v[1]), o, (shape.hidden, gate[1] + up[1]), down]
    assert [(int(kk), int(n)) for _, kk, n in _linears(lay)] == expected
    assert shape.layer_params() == sum(i * j for i, j in linears)
    assert o[0] == shape.q_width != shape.hidden  # the attention's output is heads x head_dim wide


def test_a_head_width_stated_at_hidden_over_heads_prices_as_the_default():
    nemo = resolve_model(str(NEMO))
    shape = _shape(json.loads((NEMO / "config.json").read_text()))
    plain = replace(shape, head_dim=0, hidden=shape.heads * shape.head_width)  # 4096 = 32 x 128
    stated = replace(plain, head_dim=plain.hidden // plain.heads)
    for tp in (1, 2):
        lay = Layout(plain, 4096, "h100-sxm", 8, 8, "zero1", tp=tp, global_batch=8)
        same = replace(lay, shape=stated)
        hw = profile_for("h100-sxm")
        assert step_time(same, hw) == step_time(lay, hw) and peak_memory(same) == peak_memory(lay)
    # Mistral-Nemo's "12B": what transformers builds from its config.json, counted on the meta device
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**json.loads((NEMO / "config.json").read_text())))
    assert nemo.num_params() == sum(p.numel() for p in model.parameters()) == 12_247_782_400

