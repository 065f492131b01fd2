"""What DeepSpeed's engine stops at when it starts, beyond what its config parser checks: each check in its own
module, with the engine's code it follows."""

from __future__ import annotations

from typing import Any

from dsbench.configs.dtype_check import check_grad_accum_dtype, check_param_dtype
from dsbench.configs.findings import Finding
from dsbench.configs.grad_norm_check import check_compute_grad_norm
from dsbench.configs.zeropp_check import check_hpz


def check_engine(config: dict[str, Any], world_size: int | None) -> list[Finding]:
    """The findings of every engine start-up check (``world_size``: None checks what holds for every one)."""
    return [*check_hpz(config, world_size), *check_grad_accum_dtype(config), *check_param_dtype(config),
            *check_compute_grad_norm(config)]
