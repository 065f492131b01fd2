"""Model shapes: the families dsbench builds, their parameter counts, and the named presets (a user's
``config.json`` is read into a shape by :mod:`dsbench.model_config`).

Pure and stdlib-only: rendering ("auto" bucket sizes from the hidden size) and planning need the
shape of a model, never its weights. The training worker turns a shape into a transformers
config with :meth:`ModelShape.hf_config`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

Arch = Literal["gpt2", "gpt_neox", "llama", "qwen2", "mistral", "qwen3", "gemma", "phi3", "olmo2"]
LAYER_NORM = ("gpt2", "gpt_neox")
"""GPT-style families: LayerNorms with a weight and a bias, a GELU MLP of two biased matrices, q|k|v in one biased
matrix. GPT-2 learns its positions; GPT-NeoX (Pythia, GPT-NeoX-20B; transformers' GPTNeoXLayer) rotates part of each
head (``rotary_pct``, a quarter by default), keeps the q, k and v of each head together in ``query_key_value``, and
by default adds the attention and the MLP to the same residual (``use_parallel_residual``)."""
LLAMA_LIKE = ("llama", "qwen2", "mistral", "qwen3", "gemma")
"""Rotary decoder families with Llama's layout (RMSNorm, gated MLP, q/k/v/o): Qwen2 adds q/k/v biases, Qwen3 an
RMSNorm over each query and key head (``q_norm``, ``k_norm``: transformers' Qwen3Attention); Gemma (the first, as
transformers' GemmaForCausalLM builds it) has the same tensors, with a tanh-GELU gate, RMSNorms that scale by
1 + weight, and its embedding scaled by sqrt(hidden) inside the embedding module (GemmaTextScaledWordEmbedding)."""
FUSED = ("phi3",)
"""Families with Llama's layers but two fused projections per block (transformers' Phi3Attention and Phi3MLP, as
in Phi-3 and Phi-4): one ``qkv_proj`` whose outputs are q, then k, then v, and one ``gate_up_proj``, gate then up. The
same parameters as Llama's, in fewer tensors. A column split of a fused weight would hand a rank parts of two
projections, so dsbench splits them with no tensor parallelism (Megatron-style or AutoTP); pipelines, ZeRO, FSDP,
DDP and Ulysses take them whole."""
PROJECTION_NORM = ("olmo2",)
"""Families whose attention normalises the whole query and key projections before RoPE (transformers'
Olmo2Attention: ``q_norm`` over heads x head width, ``k_norm`` over key/value heads x head width, each mean square over
every head at once), and whose blocks normalise their outputs (``post_attention_layernorm``,
``post_feedforward_layernorm``) where Llama's normalise their inputs. A column split of q_proj would leave each rank
the mean square of its own heads, so dsbench splits them with no tensor parallelism (as :data:`FUSED`)."""
DECODERS = (*LLAMA_LIKE, *FUSED, *PROJECTION_NORM)
"""Every rotary decoder family: Llama's layout of blocks (``model.embed_tokens``, ``model.layers``, ``model.norm``),
separate or fused projections, norms before or after (what pipelines, ZeRO, FSDP and Ulysses split)."""
QK_NORM = ("qwen3",)
"""Families whose attention normalises each query and key head before RoPE (one head_dim-wide RMSNorm weight each,
shared by the heads)."""
HEAD_DIM_DEFAULT = {"qwen3": 128, "gemma": 256}
"""Families whose transformers config class defaults ``head_dim`` to a width of its own, not hidden / heads
(Qwen3Config 128, GemmaConfig 256): a config.json without one gets it, and a shape of theirs always states it."""
TIED_DEFAULT = {"gemma": True}
"""Families whose config class ties the LM head to the embedding unless config.json says otherwise (the others'
default to untied)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelShape:
    """The dimensions of a decoder-only transformer."""

    name: str
    """Preset name, local path or hub id the shape came from."""
    arch: Arch
    """Model family: ``gpt2`` (learned positions, LayerNorm, GELU MLP) or a Llama-like one (``llama``,
    ``qwen2``, ``mistral``, ``qwen3``, ``gemma``, ``phi3`` with fused projections, ``olmo2`` with normalised
    projections and outputs: RoPE, RMSNorm, a gated MLP)."""
    vocab_size: int
    hidden: int
    """Hidden size (``n_embd`` / ``hidden_size``)."""
    layers: int
    heads: int
    kv_heads: int
    """Key/value heads (grouped-query attention); equals ``heads`` for GPT-2."""
    intermediate: int
    """MLP inner size (4·hidden for GPT-2)."""
    max_positions: int
    tied_embeddings: bool
    head_dim: int | None = None
    """Width of one attention head, where config.json states one that is not ``hidden / heads`` (Mistral-Nemo:
    32 heads of 128 on a hidden size of 5120); None: ``hidden / heads``, as transformers' configs default it. Read it
    through :attr:`head_width`."""
    source: str = "preset"
    """Where the shape came from: ``preset``, ``local`` (a directory) or ``hub-cache``."""
    path: str | None = None
    """Directory holding config.json (and maybe weights) for ``local``/``hub-cache`` shapes."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Other config.json fields kept for building the HF config (e.g. rope_theta)."""

    @property
    def head_width(self) -> int:
        """The width of one attention head: ``head_dim`` where stated, else ``hidden / heads``."""
        return self.head_dim or self.hidden // self.heads

    @property
    def q_width(self) -> int:
        """The queries' width (heads x head width): the output of q_proj and the input of o_proj, which is the
        hidden size unless config.json states a wider or narrower head_dim."""
        return self.heads * self.head_width

    @property
    def kv_width(self) -> int:
        """The width of the keys (and of the values): key/value heads x head width."""
        return self.kv_heads * self.head_width

    @property
    def block_matrices(self) -> int:
        """Weight matrices in one decoder block (the modules ZeRO-3 gathers one by one): GPT-2's c_attn, c_proj, c_fc
        and c_proj, GPT-NeoX's query_key_value, dense and the MLP's two, Phi-3's o_proj, qkv_proj, gate_up_proj and
        down_proj: 4; the other Llama-layout families' q, k, v, o, gate, up and down: 7."""
        return 4 if self.arch in LAYER_NORM or self.arch in FUSED else 7

    def sliding_window(self) -> int | None:
        """The tokens some layer's attention is limited to, as transformers' config of this shape sets it (None:
        every layer attends to the whole causal prefix). Mistral windows every layer (MistralConfig's default
        4096; None in v0.3); Qwen2/Qwen3 the layers ``layer_types`` names, or with ``use_sliding_window`` those from
        ``max_window_layers`` on (their configs' defaults: 4096 tokens, from layer 28); Phi-3 every layer where
        config.json states one (Phi3Config's default: none; Phi-3-mini-4k's 2047)."""
        if self.arch not in ("mistral", "qwen2", "qwen3", "phi3"):
            return None  # Llama's, Gemma's and GPT-2's configs have no window
        window = self.extra.get("sliding_window", None if self.arch == "phi3" else 4096)
        if self.arch in ("mistral", "phi3") or window is None:
            return window
        types = self.extra.get("layer_types")
        if types is not None:
            return window if "sliding_attention" in types else None
        used = self.extra.get("use_sliding_window", False) and self.layers > self.extra.get("max_window_layers", 28)
        return window if used else None

    def parts(self) -> dict[str, int]:
        """Parameter counts of the model's pieces, per HF implementation (they sum to :meth:`num_params`).

        ``block_split`` is what Megatron-style tensor parallelism splits in one decoder block (the attention and
        MLP matrices, and the biases of column-parallel layers); ``block_whole`` what it keeps whole (norms,
        biases of row-parallel layers). ``head`` is 0 when the LM head is the tied embedding.
        """
        h, ff, v = self.hidden, self.intermediate, self.vocab_size
        if self.arch == "gpt2":
            # c_attn (+ bias), attention c_proj, c_fc (+ bias), MLP c_proj
            split = h * 3 * h + 3 * h + h * h + h * ff + ff + ff * h
            whole = 2 * h + 4 * h  # the two row-parallel biases, two LayerNorms (weight + bias)
            return {"embedding": v * h, "positions": self.max_positions * h, "block_split": split,
                    "block_whole": whole, "final_norm": 2 * h, "head": 0 if self.tied_embeddings else v * h}
        if self.arch == "gpt_neox":
            bias = self.extra.get("attention_bias", True)  # GPTNeoXConfig's default; the MLP's are always there
            # query_key_value (+ bias), dense, dense_h_to_4h (+ bias), dense_4h_to_h
            split = h * 3 * h + (3 * h if bias else 0) + h * h + h * ff + ff + ff * h
            whole = (h if bias else 0) + h + 4 * h  # the two row-parallel biases, two LayerNorms (weight + bias)
            return {"embedding": v * h, "positions": 0, "block_split": split, "block_whole": whole, "final_norm": 2 * h,
                    "head": 0 if self.tied_embeddings else v * h}
        q, kv = self.q_width, self.kv_width
        split = h * q + 2 * h * kv + q * h + 3 * h * ff  # q, k, v, o (transformers' LlamaAttention); gate, up, down
        if self.arch == "qwen2":
            split += q + 2 * kv  # Qwen2's q/k/v biases
        # two RMSNorms; Qwen3's q_norm and k_norm, one head wide each (every TP rank keeps them whole), OLMo-2's over
        # the whole projections
        whole = 2 * h + sum(self.qk_norm_widths())
        return {"embedding": v * h, "positions": 0, "block_split": split, "block_whole": whole,
                "final_norm": h, "head": 0 if self.tied_embeddings else v * h}

    def block_tensors(self) -> list[int]:
        """Element counts of one decoder block's parameter tensors, in the HF module's registration order (GPT-2:
        ln_1, c_attn, attn c_proj, ln_2, c_fc, mlp c_proj, each weight then bias; GPT-NeoX: its two LayerNorms,
        query_key_value, dense, dense_h_to_4h, dense_4h_to_h; Llama: q, k, v, o, gate, up, down,
        the two RMSNorms; Qwen2 adds q/k/v biases, Qwen3 and OLMo-2 q_norm and k_norm after o; Phi-3: o, the fused
        q|k|v, the fused gate|up, down, the two RMSNorms). They sum to the block's share of :meth:`parts`."""
        h, ff = self.hidden, self.intermediate
        if self.arch == "gpt2":
            return [h, h, h * 3 * h, 3 * h, h * h, h, h, h, h * ff, ff, ff * h, h]
        if self.arch == "gpt_neox":  # the two LayerNorms first (GPTNeoXLayer registers them before its modules)
            bias = self.extra.get("attention_bias", True)
            return [h, h, h, h, h * 3 * h, *([3 * h] if bias else []), h * h, *([h] if bias else []), ff * h, ff,
                    h * ff, h]
        q, kv = self.q_width, self.kv_width
        if self.arch in FUSED:  # Phi3Attention registers o_proj before qkv_proj
            return [h * q, (q + 2 * kv) * h, 2 * ff * h, h * ff, h, h]
        bias = self.arch == "qwen2"
        attention = [q * h, *([q] if bias else []), kv * h, *([kv] if bias else []), kv * h, *([kv] if bias else []),
                     h * q, *self.qk_norm_widths()]
        return [*attention, ff * h, ff * h, h * ff, h, h]  # OLMo-2's two norms are its outputs', the others' inputs'

    def qk_norm_widths(self) -> tuple[int, ...]:
        """The widths of the query and key norms' weights: Qwen3's one head wide each (shared by the heads), OLMo-2's
        the whole projections (q, then k); none for the other families."""
        if self.arch in QK_NORM:
            return (self.head_width, self.head_width)
        return (self.q_width, self.kv_width) if self.arch in PROJECTION_NORM else ()

    def tensors(self) -> list[int]:
        """Element counts of every parameter tensor, in ``model.parameters()`` order (a tied head is the embedding,
        counted once). They sum to :meth:`num_params`."""
        p = self.parts()
        ends = [p["embedding"], *([p["positions"]] if p["positions"] else [])]
        final = [self.hidden, self.hidden] if self.arch in LAYER_NORM else [self.hidden]
        return [*ends, *self.block_tensors() * self.layers, *final, *([p["head"]] if p["head"] else [])]

    def num_params(self) -> int:
        """Exact parameter count of the HF implementation (embeddings counted once if tied)."""
        p = self.parts()
        return (p["embedding"] + p["positions"] + self.layers * (p["block_split"] + p["block_whole"])
                + p["final_norm"] + p["head"])

    def hf_config(self) -> dict[str, Any]:
        """Keyword arguments for ``transformers.AutoConfig.for_model`` (dropout off for parity)."""
        if self.arch == "gpt2":
            cfg = dict(model_type="gpt2", vocab_size=self.vocab_size, n_embd=self.hidden, n_layer=self.layers,
                       n_head=self.heads, n_inner=self.intermediate, n_positions=self.max_positions,
                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=self.tied_embeddings,
                       bos_token_id=0, eos_token_id=0)
        elif self.arch == "gpt_neox":
            cfg = dict(model_type="gpt_neox", vocab_size=self.vocab_size, hidden_size=self.hidden,
                       num_hidden_layers=self.layers, num_attention_heads=self.heads,
                       intermediate_size=self.intermediate, max_position_embeddings=self.max_positions,
                       tie_word_embeddings=self.tied_embeddings, bos_token_id=0, eos_token_id=0, attention_dropout=0.0,
                       hidden_dropout=0.0)
        else:
            cfg = dict(model_type=self.arch, vocab_size=self.vocab_size, hidden_size=self.hidden,
                       num_hidden_layers=self.layers, num_attention_heads=self.heads,
                       num_key_value_heads=self.kv_heads, intermediate_size=self.intermediate,
                       max_position_embeddings=self.max_positions, tie_word_embeddings=self.tied_embeddings,
                       bos_token_id=0, eos_token_id=0, attention_dropout=0.0,
                       # Qwen3Config's and GemmaConfig's own defaults are not hidden / heads: always stated for them
                       **({"head_dim": self.head_width} if self.head_dim or self.arch in HEAD_DIM_DEFAULT else {}),
                       # Phi3Config's padding id defaults to 32000, outside a smaller vocabulary (its embedding
                       # would refuse it); the tokenizer's own pads nothing here, and a config.json's is kept below
                       **({"pad_token_id": None} if self.arch in FUSED else {}))
        cfg.update(self.extra)
        return cfg

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description (recorded in run headers)."""
        out = asdict(self)
        out["num_params"] = self.num_params()
        return out


def _gpt2(name: str, vocab: int, hidden: int, layers: int, heads: int, positions: int) -> ModelShape:
    return ModelShape(name=name, arch="gpt2", vocab_size=vocab, hidden=hidden, layers=layers, heads=heads,
                      kv_heads=heads, intermediate=4 * hidden, max_positions=positions, tied_embeddings=True)


def _llama(name: str, vocab: int, hidden: int, layers: int, heads: int, kv: int, ff: int, pos: int) -> ModelShape:
    return ModelShape(name=name, arch="llama", vocab_size=vocab, hidden=hidden, layers=layers, heads=heads,
                      kv_heads=kv, intermediate=ff, max_positions=pos, tied_embeddings=False)


# Tiny shapes use the embedded tokenizer's 4096-token vocabulary; the others are the published shapes
# (GPT-2: Radford et al. 2019 / HF gpt2*; llama-1b: TinyLlama-1.1B; llama-7b: Llama-2-7B).
PRESETS: dict[str, ModelShape] = {
    m.name: m
    for m in [
        _gpt2("gpt2-tiny", 4096, 64, 2, 4, 256),
        _gpt2("gpt2-mini", 4096, 128, 4, 4, 256),
        _gpt2("gpt2", 50257, 768, 12, 12, 1024),
        _gpt2("gpt2-medium", 50257, 1024, 24, 16, 1024),
        _gpt2("gpt2-large", 50257, 1280, 36, 20, 1024),
        _gpt2("gpt2-xl", 50257, 1600, 48, 25, 1024),
        _llama("llama-tiny", 4096, 64, 2, 4, 2, 176, 256),
        replace(_llama("qwen2-tiny", 4096, 64, 2, 4, 2, 176, 256), arch="qwen2"),
        replace(_llama("gemma-tiny", 4096, 64, 2, 4, 2, 176, 256), arch="gemma", tied_embeddings=True),
        replace(_llama("phi3-tiny", 4096, 64, 2, 4, 2, 176, 256), arch="phi3"),
        replace(_llama("olmo2-tiny", 4096, 64, 2, 4, 2, 176, 256), arch="olmo2"),
        replace(_gpt2("neox-tiny", 4096, 64, 2, 4, 256), arch="gpt_neox", tied_embeddings=False),
        _llama("llama-1b", 32000, 2048, 22, 32, 4, 5632, 2048),
        _llama("llama-7b", 32000, 4096, 32, 32, 32, 11008, 4096),
        _llama("llama-13b", 32000, 5120, 40, 40, 40, 13824, 4096),
        _llama("llama-70b", 32000, 8192, 80, 64, 8, 28672, 4096),
    ]
}

def shape_of_record(data: dict[str, Any]) -> ModelShape:
    """The shape a record holds (a profile's ``model``: :func:`dataclasses.asdict` of it, with ``num_params``)."""
    return ModelShape(**{f.name: data[f.name] for f in fields(ModelShape) if f.name in data})
