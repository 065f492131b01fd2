"""``zero_optimization.compute_grad_norm: false`` against what needs the norm.

DeepSpeed's parser takes the switch at ZeRO-1 and ZeRO-2 only (its own refusal elsewhere: configs/deepspeed_check.py).
The ZeRO-1/2 optimizer then refuses it, first thing in its constructor (deepspeed 0.19.8 runtime/zero/
stage_1_and_2.py ``DeepSpeedZeroOptimizer.__init__``), beside gradient clipping (``gradient_clipping`` above 0: the
clip needs the norm) and beside an offloaded optimizer (cpu or nvme); the engine passes both from the config
(runtime/engine.py ``_configure_zero_optimizer``). The ZeRO-1 bf16 case is configs/dtype_check.py's.
"""

from __future__ import annotations

from typing import Any

from dsbench.configs.findings import Finding
from dsbench.configs.overrides import get_path
from dsbench.zero_section import zero_settings

PATH = "zero_optimization.compute_grad_norm"


def check_compute_grad_norm(config: dict[str, Any]) -> list[Finding]:
    """An error for each thing that needs the norm the config turns off (ZeRO-1/2)."""
    zero = zero_settings(config)
    if get_path(config, PATH) is not False or zero.stage not in (1, 2):
        return []
    out = []
    clip = config.get("gradient_clipping", 1.0)  # DeepSpeed 0.19.8 clips at 1.0 when unset (GRADIENT_CLIPPING_DEFAULT)
    if isinstance(clip, int | float) and not isinstance(clip, bool) and clip > 0:
        out.append(Finding(severity="error", code="deepspeed-rejects", path=PATH,
                           message=f"false, but gradient_clipping {clip:g} clips by that norm: DeepSpeed's ZeRO-"
                                   f"{zero.stage} optimizer stops at start-up",
                           fix="delete it, or set gradient_clipping 0"))
    if zero.offload in ("cpu", "nvme"):
        out.append(Finding(severity="error", code="deepspeed-rejects", path=PATH,
                           message=f"false, with the optimizer offloaded ({zero.offload}): DeepSpeed's ZeRO-"
                                   f"{zero.stage} optimizer does not support it and stops at start-up",
                           fix="delete it, or keep the optimizer on the accelerator"))
    return out
