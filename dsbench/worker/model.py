"""Build the Hugging Face causal LM for a shape: random weights from a fixed seed, or local weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsbench.models import ModelShape

ATTENTION = "sdpa"
"""The attention every model is built with: torch's ``scaled_dot_product_attention`` (flash or memory-efficient
kernels on GPU). A model class without it gets transformers' eager attention; the run header's ``speed`` record
says which ran."""
_WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")


def has_weights(shape: ModelShape) -> bool:
    """True when the shape's directory holds weights to load."""
    return bool(shape.path) and any((Path(shape.path) / name).exists() for name in _WEIGHTS)


def build_model(shape: ModelShape, seed: int, trust_remote_code: bool = False,
                gradient_checkpointing: bool = False) -> Any:
    """The model in fp32 on CPU: local weights when present, else random init under ``seed``.

    Every rank and every strategy builds the identical model (same seed, dropout off), which is
    what makes losses comparable across strategies.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    def build(attention: str) -> Any:
        torch.manual_seed(seed)
        if has_weights(shape):
            return AutoModelForCausalLM.from_pretrained(shape.path, dtype=torch.float32, attn_implementation=attention,
                                                        trust_remote_code=trust_remote_code)
        kwargs = shape.hf_config()
        config = AutoConfig.for_model(kwargs.pop("model_type"), **kwargs)
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation=attention,
                                                trust_remote_code=trust_remote_code)

    try:
        model = build(ATTENTION)
    except ValueError as exc:  # transformers refuses SDPA for a class that lacks it (e.g. some remote code)
        if "scaled_dot_product_attention" not in str(exc) and ATTENTION not in str(exc):
            raise
        model = build("eager")
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    return model


def transformer_blocks(model: Any) -> list[Any]:
    """The repeated decoder blocks (GPT-2 ``transformer.h``, Llama ``model.layers``)."""
    for path in ("transformer.h", "model.layers", "gpt_neox.layers", "model.decoder.layers"):
        node = model
        for part in path.split("."):
            node = getattr(node, part, None)
            if node is None:
                break
        if node is not None:
            return list(node)
    raise ValueError(f"cannot find the transformer blocks of {type(model).__name__}")
