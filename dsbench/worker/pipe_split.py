"""Split a Hugging Face causal LM into a sequence of layers, for pipeline parallelism (DeepSpeed's and torch's).

The sequence is: token embedding [+ learned positions] -> every decoder block -> final norm -> LM head. It
runs the HF model's own modules, so its logits are the model's (tests check equality) and a split model
keeps the HF weights (random init under the seed, or a local checkpoint).

transformers computes some inputs once, outside the blocks: position ids, the causal mask (``None`` under
SDPA, which then masks causally itself) and, for rotary models, the cos/sin position embeddings. Each block
here recomputes them from its input's shape, so nothing but the hidden states crosses a stage boundary.

A family is one small adapter (:data:`FAMILIES`): where its embedding, blocks, norm, rotary module and head
live, and which mask each block uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from dsbench.errors import UserError


@dataclass(frozen=True)
class Family:
    """Where a model family keeps the parts of the sequence."""

    embed: str
    blocks: str
    norm: str
    positions: str | None = None
    """Learned absolute positions (GPT-2)."""
    dropout: str | None = None
    """Embedding dropout (GPT-2; 0 in dsbench's presets)."""
    rotary: str | None = None
    """The rotary module transformers calls once per forward (Llama-like families)."""
    head: str = "lm_head"


_LLAMA_LIKE = Family(embed="model.embed_tokens", blocks="model.layers", norm="model.norm", rotary="model.rotary_emb")
FAMILIES: dict[str, Family] = {
    "gpt2": Family(embed="transformer.wte", blocks="transformer.h", norm="transformer.ln_f",
                   positions="transformer.wpe", dropout="transformer.drop"),
    # its embedding dropout is 0 in dsbench's models (hidden_dropout); its rotary module turns part of each head
    "gpt_neox": Family(embed="gpt_neox.embed_in", blocks="gpt_neox.layers", norm="gpt_neox.final_layer_norm",
                       rotary="gpt_neox.rotary_emb"),
    "llama": _LLAMA_LIKE,
    "qwen2": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "qwen3": _LLAMA_LIKE,  # its q_norm/k_norm live inside each block's attention
    "gemma": _LLAMA_LIKE,  # its embedding module scales by sqrt(hidden) itself; the tied head reads the weight
    "phi3": _LLAMA_LIKE,  # its fused qkv_proj and gate_up_proj live inside each block
    "olmo2": _LLAMA_LIKE,  # its q/k norms and output norms live inside each block
}


def family_of(model: Any) -> tuple[str, Family]:
    """The adapter for ``model`` (by its config's model_type); a one-line error names the known families."""
    kind = getattr(model.config, "model_type", "?")
    if kind not in FAMILIES:
        raise UserError(f"pipeline parallelism does not know the model family {kind!r}; it splits "
                        f"{', '.join(FAMILIES)} (one adapter each in dsbench/worker/pipe_split.py)")
    return kind, FAMILIES[kind]


def _get(model: Any, path: str) -> Any:
    node = model
    for part in path.split("."):
        node = getattr(node, part)
    return node


class TokenEmbedding(nn.Module):
    """input ids -> token embeddings (also the LM head's weight when the model ties them)."""

    def __init__(self, embedding: nn.Embedding) -> None:
        super().__init__()
        self.embedding = embedding

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embedding(input_ids)


def tied_head(module: TokenEmbedding, hidden: torch.Tensor) -> torch.Tensor:
    """Logits through the tied embedding matrix (GPT-2's lm_head is wte)."""
    return nn.functional.linear(hidden, module.embedding.weight)


class PositionEmbedding(nn.Module):
    """Adds learned absolute positions (GPT-2's wpe) and the embedding dropout."""

    def __init__(self, positions: nn.Embedding, dropout: nn.Module | None) -> None:
        super().__init__()
        self.positions = positions
        self.dropout = dropout or nn.Identity()

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        ids = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
        return self.dropout(hidden + self.positions(ids))


class BlockPipe(nn.Module):
    """One decoder block, with what transformers computes outside it recomputed from the input's shape."""

    def __init__(self, block: nn.Module, config: Any, rotary: nn.Module | None, mask_kind: str) -> None:
        super().__init__()
        self.block = block
        self.config = config
        self.rotary = rotary
        self.mask_kind = mask_kind

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

        positions = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
        make_mask = create_sliding_window_causal_mask if self.mask_kind == "sliding_attention" else create_causal_mask
        mask = make_mask(config=self.config, inputs_embeds=hidden, attention_mask=None, past_key_values=None,
                         position_ids=positions)
        extra = {"position_embeddings": self.rotary(hidden, positions)} if self.rotary is not None else {}
        out = self.block(hidden, attention_mask=mask, position_ids=positions, **extra)
        return out[0] if isinstance(out, tuple) else out


class Norm(nn.Module):
    """The final norm (a wrapper so the pipeline partitioner can name it)."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.norm(hidden)


class LMHead(nn.Module):
    """hidden -> logits with an untied head."""

    def __init__(self, head: nn.Linear) -> None:
        super().__init__()
        self.head = head

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(hidden)


def _mask_kind(config: Any, index: int) -> str:
    """Which causal mask block ``index`` uses, as the family's model forward decides it."""
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        return layer_types[index]
    # Mistral's and Phi-3's models window every layer whenever the config has a window (MistralModel, Phi3Model)
    if getattr(config, "model_type", "") in ("mistral", "phi3") and getattr(config, "sliding_window", None):
        return "sliding_attention"
    return "full_attention"


@dataclass
class Split:
    """The model as a sequence: ``embed`` [``positions``] ``blocks`` ``norm`` then ``head`` (or the tied
    ``embed`` used as the head when ``tied``)."""

    embed: TokenEmbedding
    positions: PositionEmbedding | None
    blocks: list[BlockPipe]
    norm: Norm
    head: LMHead | None
    tied: bool

    def layers(self) -> list[nn.Module]:
        """Every layer but the head, in order (the head is :meth:`logits`)."""
        return [self.embed, *([self.positions] if self.positions else []), *self.blocks, self.norm]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return tied_head(self.embed, hidden) if self.tied else self.head(hidden)


def stage_layers(split: Split) -> list[nn.Module]:
    """The layers as the pipeline runs them, head last (the token embedding again when tied). Entry i is what
    DeepSpeed saves as ``layer_{i:02d}-model_states.pt`` (PipelineModule.ckpt_layer_path); the second copy of
    a tied embedding is saved by neither stage."""
    return [*split.layers(), split.embed if split.tied else split.head]


def split_model(model: Any) -> Split:
    """The HF model as a :class:`Split` of its own modules (no copies)."""
    _, family = family_of(model)
    config = model.config
    rotary = _get(model, family.rotary) if family.rotary else None
    blocks = [BlockPipe(block, config, rotary, _mask_kind(config, i))
              for i, block in enumerate(_get(model, family.blocks))]
    dropout = _get(model, family.dropout) if family.dropout else None
    positions = PositionEmbedding(_get(model, family.positions), dropout) if family.positions else None
    embed = TokenEmbedding(_get(model, family.embed))
    head = _get(model, family.head)
    tied = head.weight is embed.embedding.weight  # transformers ties by sharing the Parameter
    return Split(embed=embed, positions=positions, blocks=blocks, norm=Norm(_get(model, family.norm)),
                 head=None if tied else LMHead(head), tied=tied)


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy, mean over predicted tokens: what transformers' ForCausalLMLoss computes for
    unpadded labels (logits in fp32, labels shifted left, the last position predicting nothing)."""
    vocab = logits.shape[-1]
    shifted = nn.functional.pad(labels, (0, 1), value=-100)[..., 1:]
    return nn.functional.cross_entropy(logits.float().reshape(-1, vocab), shifted.reshape(-1), ignore_index=-100)
