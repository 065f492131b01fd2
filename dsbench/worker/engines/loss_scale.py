"""fp16's dynamic loss scale for the torch engines (single, ddp, fsdp, torch_tp, torch_pp, torch_3d).

fp16 has five exponent bits: a gradient under 2**-24 rounds to zero in the backward's fp16 activations, and small
gradients are lost without a word. So the loss is multiplied by a scale S before the backward and the gradients
divided by S before anything reads them (Micikevicius et al., "Mixed Precision Training", ICLR 2018, section 3.2).
S follows ``torch.amp.GradScaler``'s rule, the scaler accelerate gives DDP and FSDP2 under fp16, with its defaults:
start at 2**16; a step whose gradients hold an inf or a NaN on any rank is skipped, the optimizer's and the LR
scheduler's both (DeepSpeed's engine and accelerate's scheduler skip the scheduler too), and S halves; after 2000
finite steps in a row S doubles. S stays a power of two, so scaling and unscaling are exact in fp32.

Written here rather than taken from torch because these engines reduce, clip and step their gradients' local
shards by hand (DTensor shards, pipeline stages): a skip must be agreed by every rank of the run (a stage that
steps while another skips splits the model), and ``GradScaler`` agrees only over one DTensor's mesh.
``tests/unit/test_loss_scale.py`` checks it against ``GradScaler``, step for step. Disabled (fp32, bf16), every
method is the identity and nothing is synchronised.
"""

from __future__ import annotations

import math
from typing import Any

from dsbench.worker.state_bytes import local_shard

INIT_SCALE = 2.0**16
GROWTH_FACTOR = 2.0
BACKOFF_FACTOR = 0.5
GROWTH_INTERVAL = 2000
"""torch.amp.GradScaler's defaults (accelerate passes none of its own unless the user gives GradScalerKwargs)."""


class LossScale:
    """The loss scale of one run: one per engine, the same value on every rank (each rank takes the same
    decisions from the same all-reduced flag)."""

    def __init__(self, precision: str, comm: Any) -> None:
        self.enabled = precision == "fp16"
        self.scale = INIT_SCALE if self.enabled else 1.0
        self.comm = comm
        """The worker's Collectives: the overflow flag is summed over every rank of the run."""
        self.finite_in_a_row = 0
        self.skipped_steps = 0

    def scaled(self, loss: Any) -> Any:
        """``loss`` times the scale, for the backward (the loss itself when disabled)."""
        return loss * self.scale if self.enabled else loss

    def unscale_(self, grads: list[Any]) -> bool:
        """Divide this rank's gradients (their local shards) by the scale in place; True when every rank's are
        finite. Call once per step, after the backward and before the norm is read."""
        import torch

        if not self.enabled:
            return True
        grads = [local_shard(g) for g in grads]
        bad = torch.zeros((), dtype=torch.float32, device=self.comm.device)
        if grads:
            torch._foreach_mul_(grads, 1.0 / self.scale)  # exact: the scale is a power of two
            # on the gradients' device: the host's under FSDP2's CPU offload, while the flag's collective runs on
            # the rank's device (NCCL has no CPU tensors)
            bad += torch.stack([(~g.isfinite()).any() for g in grads]).sum().to(bad.device)
        # sync point: every rank of the run (every stage, shard and replica) takes the same decision;
        # the host reads the flag, as GradScaler.step reads its found_inf
        return float(self.comm.all_reduce_(bad)) == 0.0

    def update(self, finite: bool) -> bool:
        """Move the scale after a step whose gradients were ``finite`` (GradScaler.update's rule); returns whether
        the optimizer and the LR scheduler step."""
        if not self.enabled:
            return True
        if not finite:
            self.scale *= BACKOFF_FACTOR
            self.finite_in_a_row = 0
            self.skipped_steps += 1
            return False
        self.finite_in_a_row += 1
        if self.finite_in_a_row == GROWTH_INTERVAL:
            self.scale *= GROWTH_FACTOR
            self.finite_in_a_row = 0
        return True

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps, so that a resumed fp16 run scales as the run it continues (accelerate saves its
        GradScaler's state beside the optimizer's); nothing when disabled, so that an fp16 run resumed from an
        fp32 or bf16 checkpoint starts at 2**16."""
        if not self.enabled:
            return {}
        return {"scale": self.scale, "finite_in_a_row": self.finite_in_a_row, "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`'s values (the checkpoint's reader names the file on a ValueError)."""
        if not self.enabled or not state:
            return
        scale, in_a_row, skipped = state.get("scale"), state.get("finite_in_a_row"), state.get("skipped_steps")
        if not (isinstance(scale, float) and math.isfinite(scale) and scale > 0 and isinstance(in_a_row, int)
                and 0 <= in_a_row < GROWTH_INTERVAL and isinstance(skipped, int) and skipped >= 0):
            raise ValueError(f"loss scale state {state!r} is not a positive scale with its counts")
        self.scale, self.finite_in_a_row, self.skipped_steps = scale, in_a_row, skipped
