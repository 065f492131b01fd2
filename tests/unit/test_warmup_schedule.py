"""The native engines' LR warm-up against DeepSpeed's own WarmupLR (the oracle): the same LR at every step."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
lr_schedules = pytest.importorskip("deepspeed.runtime.lr_schedules")


def _deepspeed_lrs(warmup: int, steps: int) -> list[float]:
    """The LR each optimizer step runs at under WarmupLR, stepped as DeepSpeed's engine steps it (after each
    optimizer step)."""
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    scheduler = lr_schedules.WarmupLR(optimizer, warmup_min_lr=0.0, warmup_max_lr=1.0, warmup_num_steps=warmup)
    lrs = []
    for _ in range(steps):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


def _native_lrs(warmup: int, steps: int) -> list[float]:
    """The same under the native engines' LambdaLR (engines/native.py builds it from warmup_factor)."""
    from dsbench.worker.engines import warmup_factor

    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_factor(step, warmup))
    lrs = []
    for _ in range(steps):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


@pytest.mark.parametrize("warmup", [1, 2, 3, 8, 15])
def test_native_warmup_runs_each_step_at_deepspeeds_lr(warmup):
    assert _native_lrs(warmup, 24) == pytest.approx(_deepspeed_lrs(warmup, 24), abs=1e-12)


def test_no_warmup_is_a_constant_lr():
    assert _native_lrs(0, 5) == [1.0] * 5
