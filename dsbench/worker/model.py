"""Build the Hugging Face causal LM for a shape: random weights from a fixed seed, or local weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsbench.errors import UserError
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
                gradient_checkpointing: bool = False, recompute: str = "none") -> Any:
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
    if gradient_checkpointing or recompute == "full":
        _checkpoint_every_block(model, use_reentrant=False)
    elif recompute == "selective":
        _recompute_attention_core(model)
    elif recompute == "selective-op":  # torch's selective activation checkpointing around every block
        _checkpoint_every_block(model, use_reentrant=False, context_fn=_op_policy_contexts)
    model.config.use_cache = False
    if getattr(model, "loss_type", None) is None:  # GPT-2's class name matches none of transformers' loss types
        model.loss_type = "ForCausalLM"  # the loss transformers falls back to, named so that it does not warn
    return model


def _checkpoint_every_block(model: Any, **checkpoint_kwargs: Any) -> None:
    """Every decoder block under ``torch.utils.checkpoint`` with these keyword arguments: transformers'
    ``activation_checkpointing_enable`` where it exists (5.2x; ``gradient_checkpointing_enable`` is its deprecated
    alias there), else ``gradient_checkpointing_enable`` (5.17, the lent GPU's)."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    if enable is not None:
        enable(activation_checkpointing_kwargs=checkpoint_kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=checkpoint_kwargs)


RECOMPUTED_SDPA = "sdpa_recompute"
"""The attention implementation ``--recompute selective`` registers with transformers: SDPA under a
non-reentrant checkpoint, so the backward recomputes the attention core (Korthikanti et al. 2022 sec. 5) and keeps
only its inputs; with a flash/SDPA kernel the core keeps little beyond them (no s^2 scores), so the saving is the
kernel's own temporaries."""


def _recompute_attention_core(model: Any) -> None:
    import torch
    from torch.utils.checkpoint import checkpoint
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import sdpa_mask

    if model.config._attn_implementation != ATTENTION:
        raise UserError(f"--recompute selective checkpoints the SDPA attention core; this model runs "
                        f"{model.config._attn_implementation!r} attention (use --recompute full or selective-op)")

    def attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> Any:
        device = query.device.type
        if torch.is_autocast_enabled(device):
            # SDPA is on autocast's lower-precision list, so its kernel runs on these same 16-bit copies; cast
            # here, the checkpoint keeps them instead of its fp32 inputs (Llama's RoPE promotes q and k to the
            # fp32 residual stream's dtype): 2x SDPA's own saved bytes, +0.75 GiB at 4 x 2048 on the 1.1B
            # Llama on an H200 before this cast (docs/benchmarks.md, 2026-11-28)
            dtype = torch.get_autocast_dtype(device)
            query, key, value = (tensor.to(dtype) for tensor in (query, key, value))
        return checkpoint(lambda q, k, v, mask: sdpa_attention_forward(module, q, k, v, mask, **kwargs),
                          query, key, value, attention_mask, use_reentrant=False)

    AttentionInterface.register(RECOMPUTED_SDPA, attention)
    AttentionMaskInterface.register(RECOMPUTED_SDPA, sdpa_mask)  # the masks SDPA takes
    model.set_attn_implementation(RECOMPUTED_SDPA)


def _op_policy_contexts() -> Any:
    """dsbench's op policy for torch's selective activation checkpointing: the outputs of matmuls and of the
    attention kernel are saved (the expensive ops), every other op (norms, activations, RoPE, residual adds) is
    recomputed in the backward."""
    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    saved = {aten.mm.default, aten.addmm.default, aten.bmm.default,
             aten._scaled_dot_product_efficient_attention.default, aten._scaled_dot_product_flash_attention.default,
             aten._scaled_dot_product_flash_attention_for_cpu.default,
             aten._scaled_dot_product_cudnn_attention.default}

    def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
        return CheckpointPolicy.MUST_SAVE if op in saved else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


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
