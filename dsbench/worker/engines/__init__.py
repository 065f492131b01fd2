"""One engine per strategy behind one interface; :func:`build_engine` picks it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class EngineOptions:
    """Training settings shared by all strategies."""

    lr: float
    weight_decay: float
    betas: tuple[float, float]
    eps: float
    grad_clip: float
    warmup_steps: int
    grad_accum: int
    precision: str
    fsdp_reshard: bool = True
    fsdp_cpu_offload: bool = False
    ds_config: dict[str, Any] | None = None


class Engine(Protocol):
    """What the training loop needs from a strategy."""

    name: str
    model: Any

    def forward_backward(self, input_ids: Any, last_micro: bool) -> Any:
        """Forward and backward of one micro-batch; returns its (unscaled) mean loss as a detached tensor."""

    def step(self) -> None:
        """Optimizer step (and LR schedule) at the end of an optimizer step."""

    def model_state_bytes(self) -> dict[str, Any]:
        """Bytes of params/grads/optimizer states held by this rank, counted from tensors."""

    def lr(self) -> float:
        """Current learning rate."""


def warmup_factor(step: int, warmup_steps: int) -> float:
    """DeepSpeed WarmupLR's log ramp (runtime/lr_schedules.py) with min_lr 0, so native runs match it.

    DeepSpeed uses ``max(2, warmup_num_steps)`` steps and ``log(step + 1) / log(steps)``; 0 warm-up
    steps means no scheduler at all (constant LR), as dsbench renders it.
    """
    import math

    if warmup_steps <= 0:
        return 1.0
    total = max(2, warmup_steps)
    return math.log(step + 1) / math.log(total) if step < total else 1.0


def build_engine(strategy: str, model: Any, options: EngineOptions, dist_info: Any) -> Engine:
    """The engine for ``strategy``: single, ddp, fsdp or deepspeed."""
    if strategy == "deepspeed":
        from dsbench.worker.engines.deepspeed import DeepSpeedEngine

        return DeepSpeedEngine(model, options, dist_info)
    from dsbench.worker.engines.native import NativeEngine

    return NativeEngine(strategy, model, options, dist_info)
