"""One engine per strategy behind one interface; :func:`build_engine` picks it."""

from __future__ import annotations

from typing import Any

from dsbench.worker.engines.base import Engine, EngineOptions, accumulate, warmup_factor

__all__ = ["Engine", "EngineOptions", "accumulate", "build_engine", "warmup_factor"]


def build_engine(strategy: str, model: Any, options: EngineOptions, dist_info: Any) -> Engine:
    """The engine for ``strategy``: single, ddp, fsdp, torch_pp, torch_tp, torch_3d, or deepspeed (its pipeline engine
    when the config has pipeline.stages)."""
    # the layout resolved once (configs.layout: "auto" stages are 1), not the raw pipeline.stages
    if strategy == "deepspeed" and options.dims is not None and options.dims.pp > 1:
        from dsbench.worker.engines.pipeline import DeepSpeedPipelineEngine

        return DeepSpeedPipelineEngine(model, options, dist_info)
    if strategy == "torch_pp":
        from dsbench.worker.engines.model_parallel import TorchPipelineEngine

        return TorchPipelineEngine(model, options, dist_info, options.dims, options.pipeline_schedule)
    if strategy == "torch_3d":
        from dsbench.worker.engines.three_d import Torch3DEngine

        return Torch3DEngine(model, options, dist_info, options.dims, options.pipeline_schedule)
    if strategy == "torch_tp":
        from dsbench.worker.engines.tensor_parallel import TorchTensorParallelEngine

        return TorchTensorParallelEngine(model, options, dist_info, options.dims)
    if strategy == "deepspeed" and options.dims is not None and options.dims.sp > 1:
        from dsbench.worker.engines.deepspeed import UlyssesEngine

        return UlyssesEngine(model, options, dist_info)
    if strategy == "deepspeed":
        from dsbench.worker.engines.deepspeed import DeepSpeedEngine

        return DeepSpeedEngine(model, options, dist_info)
    from dsbench.worker.engines.native import NativeEngine

    return NativeEngine(strategy, model, options, dist_info)
