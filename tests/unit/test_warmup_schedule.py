"""The native engines' LR warm-up against DeepSpeed's own WarmupLR (the oracle): the same LR at every step."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
lr_schedules = pytest.importorskip("deepspeed.runtime.lr_schedules")


def _lrs(scheduler_for, steps: int) -> list[float]:
    """The LR each optimizer step runs at, the scheduler stepped after each optimizer step (as DeepSpeed's engine
    steps it, and the native engines' loop)."""
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    scheduler = scheduler_for(optimizer)
    lrs = []
    for _ in range(steps):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


def _deepspeed_lrs(warmup: int, steps: int) -> list[float]:
    return _lrs(lambda opt: lr_schedules.WarmupLR(opt, warmup_min_lr=0.0, warmup_max_lr=1.0,
                                                  warmup_num_steps=warmup), steps)


def _native_lrs(warmup: int, steps: int) -> list[float]:
    """The native engines' LambdaLR (engines/native.py builds it from warmup_factor)."""
    from dsbench.worker.engines import warmup_factor

    return _lrs(lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda step: warmup_factor(step, warmup)), steps)


@pytest.mark.parametrize("warmup", [1, 2, 3, 8, 15])
def test_native_warmup_runs_each_step_at_deepspeeds_lr(warmup):
    assert _native_lrs(warmup, 24) == pytest.approx(_deepspeed_lrs(warmup, 24), abs=1e-12)


def test_no_warmup_is_a_constant_lr():
    assert _native_lrs(0, 5) == [1.0] * 5
