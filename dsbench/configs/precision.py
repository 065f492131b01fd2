"""The training precision a DeepSpeed config asks for, read as DeepSpeed 0.19.8 reads it (pure).

DeepSpeed takes the ``bf16`` section, or, only when ``bf16`` is absent, the legacy ``bfloat16``
spelling (runtime/precision_config.py ``get_bfloat16_config``); ``fp16`` is read on its own. Every
place in dsbench that needs a config's precision (worker, planner, explain, validate) asks here.
"""

from __future__ import annotations

from typing import Any, Literal

ConfigPrecision = Literal["fp32", "fp16", "bf16", "auto"]


def bf16_section(config: dict[str, Any]) -> Any:
    """The section DeepSpeed reads for bf16: ``bf16``, else ``bfloat16`` (else none)."""
    section = config.get("bf16")
    return section if section is not None else config.get("bfloat16")


def _enabled(section: Any) -> Any:
    return section.get("enabled") if isinstance(section, dict) else None


def bf16_enabled(config: dict[str, Any]) -> bool:
    return _enabled(bf16_section(config)) is True


def fp16_enabled(config: dict[str, Any]) -> bool:
    return _enabled(config.get("fp16")) is True


def config_precision(config: dict[str, Any]) -> ConfigPrecision:
    """``bf16``, ``fp16`` or ``fp32``; ``auto`` when the Trainer is left to decide (an "auto" enabled flag)."""
    if bf16_enabled(config):
        return "bf16"
    if fp16_enabled(config):
        return "fp16"
    if "auto" in (_enabled(bf16_section(config)), _enabled(config.get("fp16"))):
        return "auto"
    return "fp32"
