"""Model shapes: named presets and shapes read from a local or cached HF ``config.json``.

Pure and stdlib-only: rendering ("auto" bucket sizes from the hidden size) and planning need the
shape of a model, never its weights. The training worker turns a shape into a transformers
config with :meth:`ModelShape.hf_config`.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from dsbench.errors import UserError

Arch = Literal["gpt2", "llama", "qwen2", "mistral", "qwen3"]
LLAMA_LIKE = ("llama", "qwen2", "mistral", "qwen3")
"""Rotary decoder families with Llama's layout (RMSNorm, SwiGLU, q/k/v/o); Qwen2 adds q/k/v biases, Qwen3 an
RMSNorm over each query and key head (``q_norm``, ``k_norm``: transformers' Qwen3Attention)."""
QK_NORM = ("qwen3",)
"""Families whose attention normalises each query and key head before RoPE (one head_dim-wide RMSNorm weight each,
shared by the heads)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelShape:
    """The dimensions of a decoder-only transformer."""

    name: str
    """Preset name, local path or hub id the shape came from."""
    arch: Arch
    """Model family: ``gpt2`` (learned positions, LayerNorm, GELU MLP) or a Llama-like one (``llama``,
    ``qwen2``, ``mistral``, ``qwen3``: RoPE, RMSNorm, SwiGLU)."""
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
        q, kv = self.q_width, self.kv_width
        split = h * q + 2 * h * kv + q * h + 3 * h * ff  # q, k, v, o (transformers' LlamaAttention); gate, up, down
        if self.arch == "qwen2":
            split += q + 2 * kv  # Qwen2's q/k/v biases
        # two RMSNorms; Qwen3's q_norm and k_norm, one head wide each (every TP rank keeps them whole)
        whole = 2 * h + (2 * self.head_width if self.arch in QK_NORM else 0)
        return {"embedding": v * h, "positions": 0, "block_split": split, "block_whole": whole,
                "final_norm": h, "head": 0 if self.tied_embeddings else v * h}

    def block_tensors(self) -> list[int]:
        """Element counts of one decoder block's parameter tensors, in the HF module's registration order (GPT-2:
        ln_1, c_attn, attn c_proj, ln_2, c_fc, mlp c_proj, each weight then bias; Llama: q, k, v, o, gate, up, down,
        the two RMSNorms; Qwen2 adds q/k/v biases, Qwen3 q_norm and k_norm after o). They sum to the block's share of
        :meth:`parts`."""
        h, ff = self.hidden, self.intermediate
        if self.arch == "gpt2":
            return [h, h, h * 3 * h, 3 * h, h * h, h, h, h, h * ff, ff, ff * h, h]
        q, kv = self.q_width, self.kv_width
        bias = self.arch == "qwen2"
        attention = [q * h, *([q] if bias else []), kv * h, *([kv] if bias else []), kv * h, *([kv] if bias else []),
                     h * q, *([self.head_width] * 2 if self.arch in QK_NORM else [])]
        return [*attention, ff * h, ff * h, h * ff, h, h]

    def tensors(self) -> list[int]:
        """Element counts of every parameter tensor, in ``model.parameters()`` order (a tied head is the embedding,
        counted once). They sum to :meth:`num_params`."""
        p = self.parts()
        ends = [p["embedding"], *([p["positions"]] if p["positions"] else [])]
        final = [self.hidden, self.hidden] if self.arch == "gpt2" else [self.hidden]
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
        else:
            cfg = dict(model_type=self.arch, vocab_size=self.vocab_size, hidden_size=self.hidden,
                       num_hidden_layers=self.layers, num_attention_heads=self.heads,
                       num_key_value_heads=self.kv_heads, intermediate_size=self.intermediate,
                       max_position_embeddings=self.max_positions, tie_word_embeddings=self.tied_embeddings,
                       bos_token_id=0, eos_token_id=0, attention_dropout=0.0,
                       # Qwen3Config's own default is 128, not hidden / heads: always stated for it
                       **({"head_dim": self.head_width} if self.head_dim or self.arch in QK_NORM else {}))
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
        _llama("llama-1b", 32000, 2048, 22, 32, 4, 5632, 2048),
        _llama("llama-7b", 32000, 4096, 32, 32, 32, 11008, 4096),
        _llama("llama-13b", 32000, 5120, 40, 40, 40, 13824, 4096),
        _llama("llama-70b", 32000, 8192, 80, 64, 8, 28672, 4096),
    ]
}

_KEPT_EXTRA = ("rope_theta", "rms_norm_eps", "layer_norm_epsilon", "hidden_act", "activation_function",
               "attention_bias", "mlp_bias", "bos_token_id", "eos_token_id", "pad_token_id")


def shape_of_record(data: dict[str, Any]) -> ModelShape:
    """The shape a record holds (a profile's ``model``: :func:`dataclasses.asdict` of it, with ``num_params``)."""
    return ModelShape(**{f.name: data[f.name] for f in fields(ModelShape) if f.name in data})


def heads_problem(hidden: int, heads: int, kv_heads: int, head_dim: Any = None, arch: str | None = None
                  ) -> str | None:
    """Why ``heads`` attention heads of ``kv_heads`` key/value groups cannot lay out ``hidden``, or None. Without a
    stated ``head_dim`` each head is hidden / heads wide, so the heads must divide the hidden size (and always for
    ``arch`` llama: transformers' ``LlamaConfig.validate_architecture`` refuses it even with a head_dim); a stated
    one (Mistral-Nemo's) must be a positive integer. Grouped-query attention repeats each key/value head over
    heads / kv_heads query heads (transformers' ``repeat_kv``), so kv_heads must divide heads."""
    if heads < 1 or kv_heads < 1:
        return f"{heads} heads and {kv_heads} key/value heads: each must be at least 1"
    if (head_dim is None or arch == "llama") and hidden % heads:
        return f"the {heads} heads do not divide the hidden size {hidden}"
    if head_dim is not None and (not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim < 1):
        return f"head_dim {str(head_dim)[:20]!r} must be a positive integer"
    if heads % kv_heads:
        return f"the {kv_heads} key/value heads do not divide the {heads} heads (grouped-query attention)"
    return None


_FAMILIES = ("gpt2", *LLAMA_LIKE)


def _check_family(cfg: dict[str, Any], name: str) -> None:
    """A config.json of a family dsbench does not build refused by name (it would be trained and priced as a dense
    Llama: a Mixtral's experts as one MLP, a Qwen3-MoE's likewise); without ``model_type``, Llama-style fields are
    read as Llama."""
    model_type = cfg.get("model_type")
    if model_type not in (None, *_FAMILIES):  # GPT-2's field names too (gpt_bigcode's are, with one KV head)
        raise UserError(f"{name}: model_type {str(model_type)[:40]!r}: dsbench builds and prices dense GPT-2 and "
                        f"Llama-layout decoders ({', '.join(_FAMILIES)}), and would train this as another model")
    biased = [key for key in ("attention_bias", "mlp_bias") if cfg.get(key) is True and model_type != "gpt2"]
    if biased:
        raise UserError(f"{name}: {biased[0]} true: dsbench counts Llama-layout layers without those biases (Qwen2's "
                        "q/k/v biases are its own); use a config without it")


def shape_from_config(cfg: dict[str, Any], name: str, source: str, path: str | None) -> ModelShape:
    """Build a shape from a HF ``config.json`` dict (GPT-2 or Llama-style field names); a family or a head layout
    the shape cannot describe exactly is refused by name (:func:`heads_problem`)."""
    _check_family(cfg, name)
    shape = _shape_from_config(cfg, name, source, path)
    # GPT-2's heads are always hidden / heads; Qwen3Config's head_dim defaults to 128 (transformers), not to that
    stated = cfg.get("head_dim", 128 if shape.arch in QK_NORM else None) if shape.arch != "gpt2" else None
    problem = heads_problem(shape.hidden, shape.heads, shape.kv_heads, stated, shape.arch)
    if problem:
        raise UserError(f"{name}: config.json: {problem}")
    # kept only where it is not hidden / heads, so that a shape that states the default equals one that does not
    return replace(shape, head_dim=stated) if stated and shape.hidden != stated * shape.heads else shape


def _shape_from_config(cfg: dict[str, Any], name: str, source: str, path: str | None) -> ModelShape:
    model_type = cfg.get("model_type", "")
    try:
        if model_type == "gpt2" or "n_embd" in cfg:
            hidden = int(cfg["n_embd"])
            return ModelShape(
                name=name, arch="gpt2", vocab_size=int(cfg["vocab_size"]), hidden=hidden, layers=int(cfg["n_layer"]),
                heads=int(cfg["n_head"]), kv_heads=int(cfg["n_head"]),
                intermediate=int(cfg.get("n_inner") or 4 * hidden), max_positions=int(cfg.get("n_positions", 1024)),
                tied_embeddings=bool(cfg.get("tie_word_embeddings", True)), source=source, path=path,
                extra={k: cfg[k] for k in _KEPT_EXTRA if k in cfg})
        heads = int(cfg["num_attention_heads"])
        return ModelShape(
            name=name, arch=model_type if model_type in LLAMA_LIKE else "llama", vocab_size=int(cfg["vocab_size"]),
            hidden=int(cfg["hidden_size"]),
            layers=int(cfg["num_hidden_layers"]), heads=heads, kv_heads=int(cfg.get("num_key_value_heads") or heads),
            intermediate=int(cfg["intermediate_size"]), max_positions=int(cfg.get("max_position_embeddings", 2048)),
            tied_embeddings=bool(cfg.get("tie_word_embeddings", False)), source=source, path=path,
            extra={k: cfg[k] for k in _KEPT_EXTRA if k in cfg})
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{name}: config.json lacks a usable {exc} (need GPT-2 or Llama-style fields)") from None


def _hub_cache_config(repo_id: str) -> Path | None:
    """The cached ``config.json`` of a hub model, if it is already in the local HF cache (no download)."""
    root = Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", Path.home() / ".cache/huggingface"))
                / "hub")
    snapshots = root / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    if not snapshots.is_dir():
        return None
    found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    return found[0] if found else None


def resolve_model(name: str) -> ModelShape:
    """Resolve ``--model``: a preset name, a local directory with config.json, or a cached hub id."""
    if name in PRESETS:
        return PRESETS[name]
    local = Path(name)
    if local.is_dir():
        cfg_path = local / "config.json"
        if not cfg_path.is_file():
            raise UserError(f"--model {name}: directory has no config.json")
        return shape_from_config(_read_config(cfg_path), name, "local", str(local))
    if local.is_file() and local.name.endswith(".json"):
        return shape_from_config(_read_config(local), name, "local", str(local.parent))
    cached = _hub_cache_config(name) if "/" in name or name.replace("-", "").isalnum() else None
    if cached is not None:
        return shape_from_config(_read_config(cached), name, "hub-cache", str(cached.parent))
    raise UserError(f"--model {name!r}: not a preset ({', '.join(PRESETS)}), a local directory with config.json, "
                    "or a hub model in the local cache (no downloads)")


def _read_config(path: Path) -> dict[str, Any]:
    from dsbench.io import read_json

    data = read_json(path, "model config")  # a regular, bounded UTF-8 file: never a FIFO, never 100k deep
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object")
    return data
