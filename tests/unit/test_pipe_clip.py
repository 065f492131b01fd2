"""The whole-model clip of DeepSpeed's fp32 ZeRO-0 pipeline (dsbench/worker/engines/pipe_clip.py), one process.

Oracle: torch's own ``clip_grad_norm_`` over the same gradients, the tied copy a later stage holds left out of the
norm (it is the owner's gradient again) but scaled with the rest. The two-stage case is the integration parity test
(tests/integration/test_model_parallel.py, pipe2_zero0_gpt2 against one process)."""

from __future__ import annotations

import pytest
import torch

from dsbench.worker.dist import Collectives, DistInfo
from dsbench.worker.engines.pipe_clip import clip_whole_model, first_stage_norm

ONE = DistInfo(rank=0, world_size=1, local_rank=0, device="cpu", backend="gloo", process_group=False)


class Grid:
    def __init__(self, slices: int = 1) -> None:
        self.slices = slices

    def get_slice_parallel_world_size(self) -> int:
        return self.slices

    def get_model_parallel_group(self) -> None:
        return None


class Engine:
    """What the clip reads of DeepSpeed's PipelineEngine."""

    def __init__(self, module: torch.nn.Module, clip: float = 1.0, zero: bool = False, fp16: bool = False,
                 bf16: bool = False, slices: int = 1) -> None:
        self.module, self.mpu = module, Grid(slices)
        self._clip, self._zero, self._fp16, self._bf16 = clip, zero, fp16, bf16

    def gradient_clipping(self) -> float:
        return self._clip

    def zero_optimization(self) -> bool:
        return self._zero

    def fp16_enabled(self) -> bool:
        return self._fp16

    def bfloat16_enabled(self) -> bool:
        return self._bf16


def _module(scale: float) -> torch.nn.Module:
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 4))
    for p in module.parameters():
        p.grad = torch.randn_like(p) * scale
    return module


@pytest.mark.parametrize("scale", [0.01, 3.0])  # below the limit (nothing changes) and above it (all scaled)
def test_the_norm_is_torchs_over_the_owned_gradients_and_every_gradient_is_scaled(scale):
    module, expected = _module(scale), _module(scale)
    tied = module[1].weight
    tied.ds_pipe_replicated = True  # a later stage's copy of a tied weight
    owned = [p for p in expected.parameters() if p is not expected[1].weight]
    torch_norm = torch.nn.utils.clip_grad_norm_(owned, max_norm=1.0)
    coefficient = torch.clamp(1.0 / (torch_norm + 1e-6), max=1.0)
    expected[1].weight.grad.mul_(coefficient)
    norm = clip_whole_model(Engine(module), Collectives(ONE))
    assert float(norm) == pytest.approx(float(torch_norm), rel=1e-6)
    for got, want in zip(module.parameters(), expected.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad)


@pytest.mark.parametrize("engine, replaced", [
    (Engine(torch.nn.Linear(1, 1)), True),  # fp32, no ZeRO optimizer, clipping: DeepSpeed's first-stage norm
    (Engine(torch.nn.Linear(1, 1), clip=0.0), False),  # no clipping
    (Engine(torch.nn.Linear(1, 1), zero=True), False),  # ZeRO-1 computes its own norm
    (Engine(torch.nn.Linear(1, 1), fp16=True), False),
    (Engine(torch.nn.Linear(1, 1), bf16=True), False),
    (Engine(torch.nn.Linear(1, 1), slices=2), False),  # tensor slicing inside the stages: left to DeepSpeed
])
def test_only_the_fp32_zero0_pipeline_is_clipped_by_dsbench(engine, replaced):
    assert first_stage_norm(engine) is replaced
