"""The GPU model's parameter count and tensor count of a model's shape, against what transformers builds (through
``ModelShape``, whose counts tests/unit/test_models.py checks against transformers tensor by tensor): a head tied to
the embedding is one matrix whatever the family. Until 2026-11-30 every Llama-layout shape counted two, so a
Gemma-2B priced 3.03B parameters for its 2.51B (21% more weights, gradients and optimizer states) and a Qwen3-0.6B
0.75B for its 0.60B."""

from __future__ import annotations

import pytest

from dsbench.model_config import resolve_model, shape_from_config
from dsbench.models import PRESETS
from dsbench.plan.gpu_layout import Layout, shape_of_model
from dsbench.plan.gpu_memory import peak_memory
from tests.conftest import DATA

GEMMA_2B = {"model_type": "gemma", "vocab_size": 256_000, "hidden_size": 2048, "intermediate_size": 16384,
            "num_hidden_layers": 18, "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256}
"""Gemma-2B's published shape (the Gemma report, arXiv:2403.08295, Table 1; its config.json's vocabulary)."""
MODELS = {"gemma-2b": shape_from_config(GEMMA_2B, "gemma-2b", "local", None),
          "qwen3-0.6b": resolve_model(str(DATA / "models" / "qwen3-0.6b")),
          "qwen3-8b": resolve_model(str(DATA / "models" / "qwen3-8b")),
          "phi-4": resolve_model(str(DATA / "models" / "phi-4")),
          **{name: PRESETS[name] for name in ("gpt2-xl", "llama-7b", "llama-70b")}}


@pytest.mark.parametrize("name", MODELS)
def test_the_gpu_model_counts_the_models_parameters(name):
    """Within 0.2%: the GPU model neglects norms, biases and GPT-2's learned positions (gpu_layout.Shape)."""
    shape = MODELS[name]
    assert shape_of_model(shape).params() == pytest.approx(shape.num_params(), rel=2e-3)


@pytest.mark.parametrize("name", ["gemma-2b", "qwen3-0.6b", "llama-7b", "gpt2-xl"])
def test_the_tensors_outside_the_blocks_are_the_models(name):
    """Embedding, positions, final norm and head: what transformers holds besides the blocks, tied or not."""
    shape = MODELS[name]
    assert shape_of_model(shape).end_tensors() == len(shape.tensors()) - shape.layers * len(shape.block_tensors())


def test_a_tied_head_holds_one_matrix_on_the_gpu():
    """The peak memory of an unpipelined layout counts the output layer beside the embedding only when it is its
    own: a Gemma-2B's model states read as untied are its vocabulary matrix's states more."""
    from dataclasses import replace

    gpu = shape_of_model(MODELS["gemma-2b"])
    tied, untied = (peak_memory(Layout(s, 2048, "h100-sxm", 8, 8, global_batch=8)) for s in
                    (gpu, replace(gpu, tied=False)))
    matrix_gib = gpu.vocab * gpu.hidden * 2 / 2**30  # its bf16 weights, whole on every GPU (DDP, the layout's default)
    assert untied.terms["weights"] - tied.terms["weights"] == pytest.approx(matrix_gib, rel=1e-6)
