"""The training precision a DeepSpeed config asks for, read as DeepSpeed 0.19.8 reads it (pure).

DeepSpeed takes the ``bf16`` section, or, only when ``bf16`` is absent, the legacy ``bfloat16``
spelling (runtime/precision_config.py ``get_bfloat16_config``); ``fp16`` is read on its own. Every
place in dsbench that needs a config's precision (worker, planner, explain, validate) asks here.
"""

from __future__ import annotations

from typing import Any, Literal

from dsbench.configs.findings import Finding
from dsbench.errors import UserError

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


CPU_FP16 = "DeepSpeed's CPU accelerator has no fp16 (and accelerate trains fp32 for it on a CPU)"


def device_findings(config: dict[str, Any], cpu_ranks: bool) -> list[Finding]:
    """fp16 enabled for CPU ranks: an error a launch on a machine without GPUs reports before they start (each rank
    would stop at it: worker/setup.check_on_device)."""
    if not (cpu_ranks and fp16_enabled(config)):
        return []
    return [Finding(severity="error", code="fp16-on-cpu", path="fp16.enabled", message=f"true on CPU ranks: {CPU_FP16}",
                    fix="set bf16.enabled true, or fp16.enabled false (fp32)")]


def check_precision(precision: str, cpu: bool, what: str = "--precision fp16") -> None:
    """fp16 on CPU ranks is refused: DeepSpeed's CPU accelerator has no fp16 ("Type fp16 is not supported on your
    device"), and accelerate keeps fp16 (autocast with a gradient scaler) to GPUs, training fp32 for it on a CPU
    (accelerator.py, ``native_amp``). bf16 runs on CPU ranks (DeepSpeed's bf16, torch's CPU autocast)."""
    if cpu and precision == "fp16":
        raise UserError(f"{what} on CPU ranks: {CPU_FP16}: use bf16 or fp32 here")
