"""What ZeRO's gradient reduction refuses at start-up: a pre-division factor or pre-scaled gradients while it
reduce-scatters.

DeepSpeed 0.19.8 asserts both when its ZeRO optimizer is built (runtime/zero/stage_1_and_2.py for ZeRO-2, whose
gradients are partitioned; runtime/zero/stage3.py for ZeRO-3), with ``zero_optimization.reduce_scatter`` on (its
default): "gradient_predivide_factor != 1.0 is not yet supported with ZeRO-2 with reduce scatter enabled", and
"pre-scale gradients is not yet supported ..." (``prescale_gradients`` true is the engine's postscale off).
Measured on 2 CPU ranks (2026-11-30): ZeRO-2 with ``prescale_gradients`` true and a factor of 2 stopped there.
"""

from __future__ import annotations

from typing import Any

from dsbench.configs.findings import Finding
from dsbench.zero_section import zero_settings


def check_reduction(config: dict[str, Any]) -> list[Finding]:
    """The two assertions, each an error naming its key."""
    stage = zero_settings(config).stage
    zero = config.get("zero_optimization")
    scatters = not (isinstance(zero, dict) and zero.get("reduce_scatter") is False)
    if stage not in (2, 3) or not scatters:
        return []
    out = []
    factor = config.get("gradient_predivide_factor", 1.0)
    if isinstance(factor, int | float) and not isinstance(factor, bool) and factor != 1.0:
        out.append(Finding(severity="error", code="deepspeed-rejects", path="gradient_predivide_factor",
                           message=f"DeepSpeed's ZeRO-{stage} refuses a gradient pre-division factor ({factor}) while "
                                   "it reduce-scatters, and stops at start-up",
                           fix="delete gradient_predivide_factor, or set zero_optimization.reduce_scatter false"))
    if config.get("prescale_gradients") is True:
        out.append(Finding(severity="error", code="deepspeed-rejects", path="prescale_gradients",
                           message=f"DeepSpeed's ZeRO-{stage} refuses pre-scaled gradients while it reduce-scatters, "
                                   "and stops at start-up",
                           fix="set prescale_gradients false, or zero_optimization.reduce_scatter false"))
    return out
