"""Gradient clipping of DeepSpeed's fp32 ZeRO-0 pipeline by the whole model's gradient norm.

DeepSpeed 0.19.8 clips a pipeline that uses no ZeRO optimizer and neither fp16 nor bf16 with
``runtime/utils.clip_grad_norm_`` (``DeepSpeedEngine.clip_fp32_gradients``). That function counts a parameter's
gradient only where ``mpu.get_model_parallel_rank() == 0`` (or the parameter is Megatron's tensor-parallel one),
and under a pipeline the stages are the model-parallel ranks, so the norm it sums over them is the first stage's
alone: every later stage's gradients are left out. Found 2026-11-30 by the parity test (gpt2-tiny, 2 stages,
global batch 4): the norm was 1.047 where one process's was 1.318, and the losses drifted from one process's by
1.0e-4 in 12 steps; with the norm below, they agree to 2e-7 and the norm equals one process's to every printed
digit. ZeRO-1 (``stage_1_and_2.py``) computes its own norm, right (2e-7 in the same test); DeepSpeed's fp16 and
bf16 optimizers compute theirs elsewhere too, by the tensor-parallel rank (0 on every stage of a pipeline grid),
so they count every stage (read in 0.19.8, not run: the CPU runs are fp32).

The norm below is the one a single process takes (``torch.nn.utils.clip_grad_norm_``): every stage's gradients,
the tied copy that a later stage holds (``ds_pipe_replicated``) counted once, on the stage that owns it.
"""

from __future__ import annotations

from typing import Any


def first_stage_norm(engine: Any) -> bool:
    """Whether DeepSpeed would clip this pipeline by its first stage's gradients (the case the module describes).
    Tensor slicing inside the stages (a slice-parallel degree above 1) is left to DeepSpeed."""
    return (engine.gradient_clipping() > 0 and not engine.zero_optimization() and not engine.fp16_enabled()
            and not engine.bfloat16_enabled() and engine.mpu.get_slice_parallel_world_size() == 1)


def clip_whole_model(engine: Any, comm: Any) -> Any:
    """Scale every gradient of this stage by max_norm / (norm + 1e-6), at most 1, where norm is the 2-norm of
    the whole model's gradients (torch's ``clip_grad_norm_`` formula, as DeepSpeed's own uses); returns it.
    ``comm``: the rank's :class:`dsbench.worker.dist.Collectives`."""
    import torch

    params = [p for p in engine.module.parameters() if p.grad is not None]
    owned = [p.grad.detach().float() for p in params if not getattr(p, "ds_pipe_replicated", False)]
    squares = torch.zeros((), device=comm.device)
    for grad in owned:
        squares += torch.linalg.vector_norm(grad) ** 2
    # sync point: every stage of this replica adds its squares (the data-parallel replicas hold the same
    # gradients: DeepSpeed reduced them before the optimizer step)
    comm.all_reduce_(squares, group=engine.mpu.get_model_parallel_group())
    norm = squares.sqrt()
    scale = torch.clamp(engine.gradient_clipping() / (norm + 1e-6), max=1.0)
    for p in params:
        p.grad.mul_(scale.to(p.grad.dtype))
    return norm
