"""Model shapes read from a user's HF ``config.json`` (a local folder or file, or the local HF cache; no downloads),
checked against what dsbench can build and price exactly: transformers' own counts are the oracle
(tests/unit/test_models.py). Pure and stdlib-only, like :mod:`dsbench.models`."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from dsbench.errors import UserError
from dsbench.model_fields import kept_field_problem
from dsbench.models import DECODERS, HEAD_DIM_DEFAULT, LAYER_NORM, PRESETS, TIED_DEFAULT, ModelShape

_KEPT_EXTRA = ("rope_theta", "rms_norm_eps", "layer_norm_epsilon", "hidden_act", "activation_function",
               "attention_bias", "mlp_bias", "bos_token_id", "eos_token_id", "pad_token_id",
               # what attention and positions compute: Llama 3.1's scaled RoPE, Mistral v0.3's absent window (its
               # config class defaults to 4096), Qwen's per-layer windows (kept since 2026-11-30; before, a model
               # built from a config.json alone attended and rotated as the class defaults, not as the config says)
               "rope_scaling", "rope_parameters", "sliding_window", "use_sliding_window", "max_window_layers",
               "layer_types",
               # Phi-3's: RoPE on part of each head (Phi-4-mini's 0.75), LongRoPE's original context
               "partial_rotary_factor", "original_max_position_embeddings",
               # GPT-NeoX's: its rotary share and base, its residual, its LayerNorm's epsilon
               "rotary_pct", "rotary_emb_base", "use_parallel_residual", "layer_norm_eps")
"""config.json fields the worker's model keeps (:meth:`ModelShape.hf_config`): it is built from them when the folder
has no weights; with weights, transformers reads the whole config.json."""


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
        return f"head_dim {json.dumps(head_dim)[:20]} must be a positive integer"  # as config.json spells it
    if heads % kv_heads:
        return f"the {kv_heads} key/value heads do not divide the {heads} heads (grouped-query attention)"
    return None


_FAMILIES = (*LAYER_NORM, *DECODERS)


def _check_family(cfg: dict[str, Any], name: str) -> None:
    """A config.json of a family dsbench does not build refused by name (it would be trained and priced as a dense
    Llama: a Mixtral's experts as one MLP, a Qwen3-MoE's likewise); without ``model_type``, Llama-style fields are
    read as Llama."""
    model_type = cfg.get("model_type")
    if model_type not in (None, *_FAMILIES):  # GPT-2's field names too (gpt_bigcode's are, with one KV head)
        raise UserError(f"{name}: model_type {str(model_type)[:40]!r}: dsbench builds and prices dense GPT-style and "
                        f"Llama-layout decoders ({', '.join(_FAMILIES)}), and would train this as another model")
    biased = [key for key in ("attention_bias", "mlp_bias") if cfg.get(key) is True and model_type not in LAYER_NORM]
    if biased:
        raise UserError(f"{name}: {biased[0]} true: dsbench counts Llama-layout layers without those biases (Qwen2's "
                        "q/k/v biases are its own); use a config without it")


def shape_from_config(cfg: dict[str, Any], name: str, source: str, path: str | None) -> ModelShape:
    """Build a shape from a HF ``config.json`` dict (GPT-2 or Llama-style field names); a family or a head layout
    the shape cannot describe exactly is refused by name (:func:`heads_problem`)."""
    _check_family(cfg, name)
    shape = _shape_from_config(cfg, name, source, path)
    # GPT-2's heads are always hidden / heads; Qwen3Config's head_dim defaults to 128 and GemmaConfig's to 256
    # (transformers), not to that
    stated = cfg.get("head_dim", HEAD_DIM_DEFAULT.get(shape.arch)) if shape.arch not in LAYER_NORM else None
    if stated is None and shape.arch in HEAD_DIM_DEFAULT:  # null: Qwen3Config and GemmaConfig refuse it too
        raise UserError(f"{name}: config.json: head_dim null must be a positive integer (remove it for "
                        f"{shape.arch}'s default, {HEAD_DIM_DEFAULT[shape.arch]})")
    problem = (heads_problem(shape.hidden, shape.heads, shape.kv_heads, stated, shape.arch) or _pad_problem(cfg, shape)
               or kept_field_problem(cfg, shape.layers))
    if problem:
        raise UserError(f"{name}: config.json: {problem}")
    # kept only where it is not hidden / heads, so that a shape that states the default equals one that does not
    return replace(shape, head_dim=stated) if stated and shape.hidden != stated * shape.heads else shape


def _pad_problem(cfg: dict[str, Any], shape: ModelShape) -> str | None:
    """A rotary decoder's embedding takes ``pad_token_id`` as its padding row (``nn.Embedding(padding_idx=...)`` in
    transformers' Llama-family models), which torch refuses outside the vocabulary (GPT-2's and GPT-NeoX's have
    none); every config class takes an integer or null."""
    pad = cfg.get("pad_token_id")
    if pad is not None and (not isinstance(pad, int) or isinstance(pad, bool)):
        return f"pad_token_id {json.dumps(pad)[:20]} must be an integer or null"  # as config.json spells it
    if shape.arch in LAYER_NORM or pad is None or -shape.vocab_size <= pad < shape.vocab_size:
        return None
    return (f"pad_token_id {pad} is outside the {shape.vocab_size}-token vocabulary (the embedding's padding row "
            "must be one of its rows); set it below vocab_size, or null")


_DEFAULT_POSITIONS = {"llama": 2048, "mistral": 4096 * 32, "qwen2": 32768, "qwen3": 32768, "gemma": 8192,
                      "phi3": 4096, "olmo2": 2048, "gpt_neox": 2048}
"""A config.json without ``max_position_embeddings`` gets its config class's default (transformers 5's
Llama/Mistral/Qwen2/Qwen3/Gemma/Phi3/Olmo2/GPTNeoXConfig), as transformers builds it."""


_CEILINGS = {"layers": 10_000, "positions": 2**31 - 1, "vocab": 2**24, "heads": 2**16, "width": 2**22}
"""The largest value dsbench takes for each kind of shape field. Real models sit far below (Llama 3.1 405B: 126 layers,
hidden 16384, MLP 53248, 128 heads; Gemma 3: a 262144-token vocabulary; Llama 4 Scout: 10M positions); the planner
prices a pipeline layer by layer, so a billion layers would take it minutes and gigabytes (1M layers: 26 s, 2026-12-03)
before it said nothing fits."""


def _whole(cfg: dict[str, Any], key: str, kind: str, name: str, default: int | None = None) -> int:
    """config.json's ``key`` as transformers 5's strict config fields take it: a JSON integer, never ``true``, ``64.0``
    or ``"64"`` (its ``StrictDataclassFieldValidationError``); and at least 1, which transformers does not ask of every
    field (a negative width stops the model's constructor, a 0-token vocabulary its first forward, 0 layers or positions
    build a model with no block or no position), and at most :data:`_CEILINGS`. ``default`` when the key is absent
    or null (a null ``n_inner`` or ``num_key_value_heads`` is its config class's own default; for the others the
    model is built with the default stated, which the shape passes on); without one, an absent key is a KeyError,
    which the caller names."""
    value = cfg.get(key) if default is not None else cfg[key]
    if value is None and default is not None:
        return default
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= _CEILINGS[kind]:
        return value
    raise UserError(f"{name}: config.json: {key} {json.dumps(value)[:20]} must be a whole number from 1 to "
                    f"{_CEILINGS[kind]:,}")


def _flag(cfg: dict[str, Any], key: str, name: str, default: bool) -> bool:
    """A boolean field (``tie_word_embeddings``): true or false, as transformers' strict field takes it (a string
    ``"false"`` would be truthy)."""
    value = cfg.get(key, default)
    if not isinstance(value, bool):
        raise UserError(f"{name}: config.json: {key} {json.dumps(value)[:20]} must be true or false")
    return value


def _shape_from_config(cfg: dict[str, Any], name: str, source: str, path: str | None) -> ModelShape:
    model_type = cfg.get("model_type", "")
    try:
        if model_type == "gpt2" or "n_embd" in cfg:
            hidden, heads = _whole(cfg, "n_embd", "width", name), _whole(cfg, "n_head", "heads", name)
            return ModelShape(
                name=name, arch="gpt2", vocab_size=_whole(cfg, "vocab_size", "vocab", name), hidden=hidden,
                layers=_whole(cfg, "n_layer", "layers", name), heads=heads, kv_heads=heads,
                intermediate=_whole(cfg, "n_inner", "width", name, 4 * hidden),  # GPT2Config: null is 4 x n_embd
                max_positions=_whole(cfg, "n_positions", "positions", name, 1024),
                tied_embeddings=_flag(cfg, "tie_word_embeddings", name, True), source=source, path=path,
                extra={k: cfg[k] for k in _KEPT_EXTRA if k in cfg})
        heads = _whole(cfg, "num_attention_heads", "heads", name)
        return ModelShape(
            name=name, arch=model_type if model_type in (*LAYER_NORM, *DECODERS) else "llama",
            vocab_size=_whole(cfg, "vocab_size", "vocab", name), hidden=_whole(cfg, "hidden_size", "width", name),
            layers=_whole(cfg, "num_hidden_layers", "layers", name),
            heads=heads, kv_heads=_whole(cfg, "num_key_value_heads", "heads", name, heads),  # null: one per head
            intermediate=_whole(cfg, "intermediate_size", "width", name),
            max_positions=_whole(cfg, "max_position_embeddings", "positions", name,
                                 _DEFAULT_POSITIONS.get(model_type, 2048)),
            tied_embeddings=_flag(cfg, "tie_word_embeddings", name, TIED_DEFAULT.get(model_type, False)),
            source=source, path=path, extra={k: cfg[k] for k in _KEPT_EXTRA if k in cfg})
    except KeyError as exc:
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
    if not name.strip():  # Path("") is the working folder, which would be read as the model's
        raise UserError(f"--model {name!r}: empty; give a preset ({', '.join(PRESETS)}) or a folder with config.json")
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
