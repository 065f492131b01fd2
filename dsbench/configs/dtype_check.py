"""The gradient-accumulation dtype against the model's, as DeepSpeed's engine checks them when it wraps the optimizer.

deepspeed 0.19.8 runtime/engine.py ``_do_optimizer_sanity_check``, before the first step: the model dtype is fp16
when fp16 is on, else bf16 when bf16 is on, else fp32 (``get_data_types``), and ``data_types.grad_accum_dtype``,
unset, is the model's.

- Without ZeRO (stage 0) the two must be equal: any other mix stops every rank with NotImplementedError
  ("unsupported mix of model_dtype ... and grad_accum_dtype ..."), bf16 weights with fp32 accumulation included,
  which ZeRO-1 runs.
- At ZeRO-1, bf16 weights with fp32 accumulation (and the optimizer not offloaded to the CPU) step with
  BF16_Optimizer, which needs the gradient norm: ``compute_grad_norm: false`` is a ValueError.

DeepSpeed's ``DeepSpeedConfig`` accepts both, so its parser (configs/deepspeed_check.py) does not see them.
"""

from __future__ import annotations

from typing import Any

from dsbench.configs.findings import Finding
from dsbench.configs.overrides import get_path
from dsbench.configs.precision import config_precision, data_type
from dsbench.zero_section import zero_settings

PATH = "data_types.grad_accum_dtype"


def check_grad_accum_dtype(config: dict[str, Any]) -> list[Finding]:
    """An error for a gradient-accumulation dtype the engine refuses beside the model's (none where the precision
    is left "auto", or the dtype is not one DeepSpeed names)."""
    model = config_precision(config)
    given = get_path(config, "data_types.grad_accum_dtype")
    accum = data_type(config, "grad_accum_dtype")
    if model == "auto" or accum is None:
        return []
    zero = zero_settings(config)
    if zero.stage == 0 and accum != model:
        return [Finding(severity="error", code="deepspeed-rejects", path=PATH,
                        message=f"{given} accumulation beside {model} weights without ZeRO: DeepSpeed's engine stops "
                                f"at start-up (unsupported mix of model_dtype and grad_accum_dtype)",
                        fix=f"delete it (accumulate in {model}), or use zero_optimization.stage 1 or more")]
    grad_norm = get_path(config, "zero_optimization.compute_grad_norm", True)
    if zero.stage == 1 and (model, accum) == ("bf16", "fp32") and zero.offload != "cpu" and grad_norm is False:
        return [Finding(severity="error", code="deepspeed-rejects", path="zero_optimization.compute_grad_norm",
                        message="false, but ZeRO-1 with bf16 weights and fp32 accumulation steps with DeepSpeed's "
                                "BF16_Optimizer, which needs the norm: the engine stops at start-up",
                        fix="delete it, or accumulate in bf16 (data_types.grad_accum_dtype)")]
    return []


def check_param_dtype(config: dict[str, Any]) -> list[Finding]:
    """``data_types.param_dtype`` other than the model dtype the fp16/bf16 flags give: DeepSpeed's engine asserts
    they agree before it casts the module (deepspeed 0.19.8 runtime/engine.py ``_assert_valid_mixed_precision_config``),
    so every rank stops at start-up; DeepSpeed's config parser passes it."""
    model = config_precision(config)
    given = get_path(config, "data_types.param_dtype")
    param = data_type(config, "param_dtype")
    if model == "auto" or param is None or param == model:
        return []
    return [Finding(severity="error", code="deepspeed-rejects", path="data_types.param_dtype",
                    message=f"{given} beside {model} weights (from the fp16/bf16 flags): DeepSpeed's engine stops "
                            "at start-up, as the two must agree",
                    fix=f"delete it (the weights follow the fp16/bf16 flags), or set it to {model}")]

