"""What every engine shares: the options, the interface the loop calls, the LR warm-up and micro-step accumulation."""

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
    fsdp_accelerate_amp: bool = False
    """FSDP2 in 16 bits as accelerate 1.15 prepares it (a user's FSDP YAML): gradients reduced and outputs cast in
    the 16-bit dtype (``FullyShardedDataParallelPlugin.set_mixed_precision``), the forward under autocast
    (``Accelerator.native_amp``); dsbench's own FSDP2 reduces in fp32 without autocast, as torchtitan does."""
    ds_config: dict[str, Any] | None = None
    dims: Any = None
    """The run's ParallelDims (torch_pp / torch_tp build their meshes from it)."""
    pipeline_schedule: str = "1f1b"
    virtual_stages: int = 1
    """torch_pp's chunks per rank under the interleaved schedule."""
    compile: bool = False
    """torch.compile the model's transformer blocks (native) or the DeepSpeed engine (its ``compile()``)."""
    fused_optimizer: bool = False
    """torch AdamW ``fused=True`` (native strategies)."""
    sequence_parallel: bool = False
    """torch_tp: norms on sequence shards (TrainSpec.sequence_parallel)."""
    loss_parallel: bool = False
    """torch_tp: the loss on vocabulary shards (TrainSpec.loss_parallel)."""
    seq_len: int = 0
    """Tokens per sample (Ulysses registers its attention for this length)."""


class Engine(Protocol):
    """What the training loop needs from a strategy."""

    name: str
    model: Any
    measure_states: bool
    """Set by the loop for the step whose model-state bytes are counted (gradients exist only inside it)."""

    def train_step(self, batches: list[Any]) -> Any:
        """One optimizer step over ``batches`` (one per micro-step); returns the mean loss as a detached
        0-d tensor on the rank's device (never read on the host here: the loop gathers it later)."""

    def model_state_bytes(self) -> dict[str, Any]:
        """Bytes of params/grads/optimizer states held by this rank, counted from tensors."""

    def lr(self) -> float:
        """Current learning rate."""

    def skipped_steps(self) -> int:
        """Optimizer steps skipped so far because an fp16 gradient overflowed (0 in fp32 and bf16); a host value."""


def warmup_factor(step: int, warmup_steps: int) -> float:
    """The LR factor during optimizer step ``step`` (0-based) under DeepSpeed's WarmupLR (runtime/lr_schedules.py, log
    ramp, min_lr 0), so native runs match it.

    The engine sets min_lr when it builds the scheduler and steps the scheduler after each optimizer step, so step 0
    runs at min_lr and step k >= 1 at gamma(k - 1) = log(k) / log(steps), with ``steps = max(2, warmup_num_steps)``,
    and 1 once k - 1 reaches ``steps``. 0 warm-up steps means no scheduler at all (constant LR), as dsbench renders
    it. (Before 2026-11-29 this was gamma(k), one step ahead of DeepSpeed: tests/unit/test_warmup_schedule.py.)
    """
    import math

    if warmup_steps <= 0:
        return 1.0
    total = max(2, warmup_steps)
    if step == 0:
        return 0.0
    return math.log(step) / math.log(total) if step - 1 < total else 1.0


def accumulate(engine: Any, batches: list[Any]) -> Any:
    """``train_step`` for engines that expose micro-steps: zero_grad, forward/backward per micro-batch (the
    gradient reduction happens on the last one), optimizer step; the mean of the micro-batch losses."""
    import torch

    engine.zero_grad()
    losses = [engine.forward_backward(batch, last_micro=(m == len(batches) - 1)) for m, batch in enumerate(batches)]
    engine.step()
    return torch.stack(losses).mean()


class TorchAdamWEngine:
    """What the engines that step torch AdamW share (DDP/FSDP/single, torch_tp, torch_pp): a step accumulates its
    micro-batches (:func:`accumulate`; torch_pp's schedule does it itself), fp16 scales its loss (engines/
    loss_scale.py), the model states are counted from the tensors the optimizer holds, and the LR is the
    optimizer's."""

    model: Any
    optimizer: Any
    scheduler: Any
    loss_scale: Any
    """engines/loss_scale.LossScale: enabled under fp16, the identity otherwise."""
    grad_norm: Any = None
    """The last step's gradient norm before clipping (0-d tensor; None without --grad-clip)."""
    stage_names: Any = None
    """A pipeline rank's :class:`~dsbench.worker.dcp_state.StageNames` (torch_pp, torch_3d): its checkpoint names
    each tensor as the model does; None where the engine holds the model under the model's own names."""

    def train_step(self, batches: list[Any]) -> Any:
        return accumulate(self, batches)

    def step_optimizer(self, finite: bool) -> None:
        """The optimizer's and the LR scheduler's step, both skipped when ``finite`` is False: an fp16 gradient
        overflowed on some rank (every rank got the same flag from LossScale.unscale_)."""
        if self.loss_scale.update(finite):
            self.optimizer.step()
            self.scheduler.step()

    def model_state_bytes(self) -> dict[str, Any]:
        from dsbench.worker.state_bytes import count_native

        return count_native(self.model, self.optimizer)

    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def skipped_steps(self) -> int:
        return self.loss_scale.skipped_steps

    def replicas(self) -> tuple[Any, Any] | None:
        """The process group this rank's copy of its parameters is replicated over (None: every rank) and those
        parameters, for worker/replicas.py; None when nothing is replicated."""
        return None
