"""The training precision a DeepSpeed config asks for, read as DeepSpeed 0.19.8 reads it (pure).

DeepSpeed takes the ``bf16`` section, or, only when ``bf16`` is absent, the legacy ``bfloat16``
spelling (runtime/precision_config.py ``get_bfloat16_config``); ``fp16`` is read on its own. Every
place in dsbench that needs a config's precision (worker, planner, explain, validate) asks here.
"""

from __future__ import annotations

from typing import Any, Literal

from dsbench.configs.findings import Finding
from dsbench.errors import UserError

ConfigPrecision = Literal["fp32", "fp16", "bf16", "auto"]


def bf16_section(config: dict[str, Any]) -> Any:
    """The section DeepSpeed reads for bf16: ``bf16``, else ``bfloat16`` (else none)."""
    section = config.get("bf16")
    return section if section is not None else config.get("bfloat16")


def _enabled(section: Any) -> Any:
    return section.get("enabled") if isinstance(section, dict) else None


def bf16_enabled(config: dict[str, Any]) -> bool:
    return _enabled(bf16_section(config)) is True


def fp16_enabled(config: dict[str, Any]) -> bool:
    return _enabled(config.get("fp16")) is True


def config_precision(config: dict[str, Any]) -> ConfigPrecision:
    """``bf16``, ``fp16`` or ``fp32``; ``auto`` when the Trainer is left to decide (an "auto" enabled flag)."""
    if bf16_enabled(config):
        return "bf16"
    if fp16_enabled(config):
        return "fp16"
    if "auto" in (_enabled(bf16_section(config)), _enabled(config.get("fp16"))):
        return "auto"
    return "fp32"


# DeepSpeed's DtypeEnum (runtime/config.py): every spelling it accepts for each dtype, exactly so written (any other
# value stops the engine: ``DtypeEnum(value)`` raises ValueError; configs/types.py refuses it by these spellings;
# grad_accum_dtype and torch_autocast.dtype take them)
DTYPES = {**dict.fromkeys(("fp32", "float32", "float", "torch.float32"), "fp32"),
          **dict.fromkeys(("bf16", "bfloat16", "torch.bfloat16"), "bf16"),
          **dict.fromkeys(("fp16", "float16", "half", "torch.float16"), "fp16"),
          **dict.fromkeys(("int8", "torch.int8"), "int8")}


def data_type(config: dict[str, Any], key: str) -> str | None:
    """``data_types.<key>`` (``grad_accum_dtype``, ``param_dtype``, ``buffer_dtype``) as :data:`DTYPES` names it:
    ``fp32``, ``bf16``, ``fp16`` or ``int8``; None where unset or not one of DeepSpeed's spellings (configs/types.py
    refuses those)."""
    section = config.get("data_types")
    given = section.get(key) if isinstance(section, dict) else None
    return DTYPES.get(given) if isinstance(given, str) else None


def autocast_dtype(config: dict[str, Any]) -> str | None:
    """``bf16`` or ``fp16`` where DeepSpeed's ``torch_autocast`` section is on with that dtype, else None.

    DeepSpeed 0.19.8 (runtime/torch_autocast.py ``autocast_if_enabled``, entered by ``DeepSpeedEngine.forward``)
    runs the forward under ``torch.autocast(dtype)`` over fp32 weights and optimizer states, and reduces the
    gradients (and, under ZeRO-3, gathers the weights) of the Linear and Conv layers in that dtype
    (``init_autocast_params``: ``comm_dtype``); the model dtype stays fp32 (``get_data_types``)."""
    section = config.get("torch_autocast")
    if not isinstance(section, dict) or section.get("enabled") is not True:
        return None
    dtype = section.get("dtype")
    lowered = DTYPES.get(dtype) if isinstance(dtype, str) else None
    return lowered if lowered in ("bf16", "fp16") else None


def run_precision(config: dict[str, Any]) -> ConfigPrecision:
    """The precision a run under this config computes in, as its record, the planner and ``--precision`` name it:
    the 16-bit weights of ``bf16``/``fp16``, else ``torch_autocast``'s dtype (autocast over fp32 weights, what the
    torch engines' ``--precision bf16`` is too), else fp32. :func:`config_precision` is the weights' dtype alone."""
    weights = config_precision(config)
    if weights != "fp32":
        return weights
    return autocast_dtype(config) or "fp32"


CPU_FP16 = "DeepSpeed's CPU accelerator has no fp16 (and accelerate trains fp32 for it on a CPU)"


def device_findings(config: dict[str, Any], cpu_ranks: bool) -> list[Finding]:
    """fp16 enabled for CPU ranks: an error a launch on a machine without GPUs reports before they start (each rank
    would stop at it: worker/setup.check_on_device)."""
    if not (cpu_ranks and fp16_enabled(config)):
        return []
    return [Finding(severity="error", code="fp16-on-cpu", path="fp16.enabled", message=f"true on CPU ranks: {CPU_FP16}",
                    fix="set bf16.enabled true, or fp16.enabled false (fp32)")]


def autocast_findings(config: dict[str, Any]) -> list[Finding]:
    """``torch_autocast`` on with a dtype that autocasts to nothing or to the device's default: torch.autocast
    lowers only to float16 or bfloat16 (any other dtype: "not supported. Disabling autocast"), with None it takes
    the device's default (float16 on CUDA, bfloat16 on CPU), and DeepSpeed's ZeRO optimizers add a loss scaler for a
    named fp16 alone (stage_1_and_2.py: ``get_autocast_dtype() == torch.float16``), while ``init_autocast_params``
    gives the Linear layers' gradients the named dtype for their reduction whatever it is."""
    section = config.get("torch_autocast")
    if not isinstance(section, dict) or section.get("enabled") is not True:
        return []
    dtype = section.get("dtype")
    fix = "set torch_autocast.dtype to bfloat16 (or float16)"
    if dtype is None:
        return [Finding(severity="warning", code="autocast-dtype", path="torch_autocast.dtype",
                        message="not set: torch autocasts to the device's default, float16 on CUDA, where DeepSpeed "
                                "then adds no loss scaler (it adds one for a named float16 only), bfloat16 on CPU",
                        fix=fix)]
    lowered = DTYPES.get(dtype) if isinstance(dtype, str) else None
    if lowered in (None, "bf16", "fp16"):
        return []  # a 16-bit dtype, or one DeepSpeed refuses (configs/types.py names it)
    return [Finding(severity="error" if lowered == "int8" else "warning", code="autocast-dtype",
                    path="torch_autocast.dtype",
                    message=f"{dtype}: torch autocasts only to float16 or bfloat16, so the run computes in fp32"
                            + (", and DeepSpeed reduces the Linear layers' gradients as int8: the model learns nothing"
                               if lowered == "int8"
                               else ""), fix=fix + ", or torch_autocast.enabled false")]


def check_precision(precision: str, cpu: bool, what: str = "--precision fp16") -> None:
    """fp16 on CPU ranks is refused: DeepSpeed's CPU accelerator has no fp16 ("Type fp16 is not supported on your
    device"), and accelerate keeps fp16 (autocast with a gradient scaler) to GPUs, training fp32 for it on a CPU
    (accelerator.py, ``native_amp``). bf16 runs on CPU ranks (DeepSpeed's bf16, torch's CPU autocast)."""
    if cpu and precision == "fp16":
        raise UserError(f"{what} on CPU ranks: {CPU_FP16}: use bf16 or fp32 here")
