"""The config.json fields a rank's model keeps beside its shape (rotary base, norms' epsilon, activation, windows,
token ids), checked as transformers 5 takes them before any rank starts. Each rule is transformers' own: its strict
config fields' types, its activation and RoPE tables, its layer-type check (tests/unit/test_models.py builds each
refused value with transformers and sees it fail). Until 2026-12-03 a launch passed them through and every rank
stopped on the first one (``KeyError: 'nosuch'`` for an unknown activation), and a string ``max_window_layers`` stopped
``plan`` with an internal error. Pure and stdlib-only."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

ACTIVATIONS = frozenset({"gelu", "gelu_10", "gelu_accurate", "gelu_fast", "gelu_new", "gelu_python", "gelu_python_tanh",
                         "gelu_pytorch_tanh", "hardswish", "laplace", "leaky_relu", "linear", "mish", "prelu",
                         "quick_gelu", "relu", "relu2", "relu6", "sigmoid", "silu", "sqrtsoftplus", "swish", "tanh",
                         "xielu"})
"""transformers 5's ``ACT2FN`` names (a test compares them with the installed transformers'): the activations a
``hidden_act`` or GPT-2's ``activation_function`` can name."""

ROPE_TYPES = frozenset({"default", "dynamic", "linear", "llama3", "longrope", "proportional", "yarn"})
"""``rope_type`` (or the older ``type``) of a ``rope_scaling``/``rope_parameters``: transformers 5's
``ROPE_INIT_FUNCTIONS`` and ``default`` (a test compares them with the installed transformers')."""

LAYER_TYPES = ("full_attention", "sliding_attention")
"""The ``layer_types`` entries the families dsbench builds attend by (Qwen2's, Qwen3's); transformers' other kinds
(chunked attention, ...) belong to other families, and Qwen2's model stops on them."""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _whole(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _token(value: Any) -> bool:
    return value is None or _whole(value, 0) or (isinstance(value, list) and all(_whole(v, 0) for v in value))


def _rope(value: Any) -> bool:
    """null, or an object whose type transformers knows; transformers 5 also nests one per layer type (Gemma 3's)."""
    if value is None:
        return True
    if not isinstance(value, dict):
        return False
    if value and all(isinstance(v, dict) for v in value.values()):
        return all(_rope(v) for v in value.values())
    return value.get("rope_type", value.get("type", "default")) in ROPE_TYPES


_ROPE = (_rope, f"must be null or an object whose rope_type is one of {', '.join(sorted(ROPE_TYPES))}")
_BASE = (lambda v: _number(v) and v > 0, "must be a number above 0")
# transformers' epsilon fields are floats: 0 or 1 as integers are refused (StrictDataclassFieldValidationError)
_EPSILON = (lambda v: isinstance(v, float) and math.isfinite(v) and v >= 0,
            "must be a decimal number of at least 0, such as 1e-06 (transformers takes a float here)")
_ACTIVATION = (lambda v: v in ACTIVATIONS, "must be one of transformers' activations, such as silu, gelu_new or "
                                           "gelu_pytorch_tanh")
_BOOL = (lambda v: isinstance(v, bool), "must be true or false")
_TOKEN = (_token, "must be a token id, a list of them, or null")
# a rotary share outside (0, 1]: the ranks stopped in transformers' rotary module (2026-11-30: 5 gave a shape
# mismatch, -1 an arange error, a string an int() error)
_FRACTION = (lambda v: _number(v) and 0 < v <= 1, "must be a number above 0 and at most 1")

RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "rope_theta": _BASE, "rotary_emb_base": _BASE, "rope_scaling": _ROPE, "rope_parameters": _ROPE,
    "rms_norm_eps": _EPSILON, "layer_norm_epsilon": _EPSILON, "layer_norm_eps": _EPSILON,
    "hidden_act": _ACTIVATION, "activation_function": _ACTIVATION,
    "attention_bias": _BOOL, "mlp_bias": _BOOL, "use_sliding_window": _BOOL, "use_parallel_residual": _BOOL,
    "bos_token_id": _TOKEN, "eos_token_id": _TOKEN,
    "sliding_window": (lambda v: v is None or _whole(v, 1), "must be a whole number of at least 1, or null"),
    "max_window_layers": (lambda v: _whole(v, 0), "must be a whole number of at least 0"),
    "original_max_position_embeddings": (lambda v: _whole(v, 1), "must be a whole number of at least 1"),
    "partial_rotary_factor": _FRACTION, "rotary_pct": _FRACTION,
}
"""Each kept field (model_config._KEPT_EXTRA but ``pad_token_id``, which needs the vocabulary, and ``layer_types``,
which needs the layers) -> (what transformers takes, what to write instead)."""


def _shown(value: Any) -> str:
    """A value as config.json spells it, cut to 40 characters."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def kept_field_problem(cfg: dict[str, Any], layers: int) -> str | None:
    """The first kept field of ``cfg`` that transformers would refuse or stop on, in config.json's spelling, or None."""
    for key, (ok, want) in RULES.items():
        if key in cfg and not ok(cfg[key]):
            return f"{key} {_shown(cfg[key])} {want}"
    types = cfg.get("layer_types")
    if types is not None and not (isinstance(types, list) and len(types) == layers and
                                  all(t in LAYER_TYPES for t in types)):
        return (f"layer_types {_shown(types)} must list {layers} entries (one a layer), each "
                f"{' or '.join(LAYER_TYPES)}, or be null")
    return None
