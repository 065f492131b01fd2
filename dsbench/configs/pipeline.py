"""The pipeline section of a DeepSpeed config as dsbench's worker reads it to build the PipelineModule (pure).

DeepSpeed's engine reads ``stages`` and ``activation_checkpoint_interval``; the partition method is given to
``PipelineModule`` by the training script: dsbench reads ``partition_method`` (or DeepSpeed's own
``partition`` key when it names a method).
"""

from __future__ import annotations

from typing import Any

from dsbench.errors import UserError

DEFAULT_PARTITION = "type:BlockPipe"


def pipeline_settings(config: dict[str, Any]) -> tuple[int, str, int]:
    """(stages, partition method, activation-checkpoint interval) from the config's ``pipeline`` section
    (``partition_method``, or DeepSpeed's own ``partition`` key when it names a method)."""
    pipe = config.get("pipeline") or {}
    stages = pipe.get("stages")
    if not isinstance(stages, int) or isinstance(stages, bool) or stages < 1:
        raise UserError(f"pipeline.stages must be an integer >= 1, got {stages!r}")
    method = pipe.get("partition_method") or pipe.get("partition")
    if method in (None, "best"):  # "best" is DeepSpeed's placeholder default; no PipelineModule method has it
        method = DEFAULT_PARTITION
    if not isinstance(method, str) or not (method in ("parameters", "uniform") or method.startswith("type:")):
        raise UserError(f"pipeline.partition_method {method!r}: use parameters, uniform or type:REGEX "
                        "(DeepSpeed's 'profile' is not implemented)")
    interval = pipe.get("activation_checkpoint_interval", 0)
    if not isinstance(interval, int) or isinstance(interval, bool) or interval < 0:
        raise UserError(f"pipeline.activation_checkpoint_interval must be an integer >= 0, got {interval!r}")
    return stages, method, interval
