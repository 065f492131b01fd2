"""What a DeepSpeed config asks of the ranks' accelerator and environment beyond torch: the JIT ops DeepSpeed
loads for it, and the packages of the monitors it enables.

One rule for both places that refuse such a config: a rank asks its own accelerator and environment
(worker/setup.py, before ``deepspeed.initialize``), and a launch onto CPU ranks on this machine asks the op list of
DeepSpeed's CPU accelerator in the schema (scripts/gen_ds_schema.py) and this environment's packages, so the config
is refused before any rank starts (about 6 s sooner on 2 CPU ranks).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib.util import find_spec
from typing import Any

from dsbench.configs.findings import Finding
from dsbench.configs.overrides import get_path
from dsbench.configs.precision import device_findings
from dsbench.ds_schema_file import raw_schema
from dsbench.zero_section import zero_settings

# DeepSpeed's optimizers that load a fused op of the device when they stay on it (runtime/engine.py
# ``_configure_basic_optimizer``: lamb -> FusedLamb, lion without optimizer offload -> FusedLion)
FUSED_OPS = {"lamb": "FusedLambBuilder", "lion": "FusedLionBuilder"}

# DeepSpeed's monitors and the package each imports when enabled (deepspeed/monitor/utils.py, the
# check_*_availability functions called as MonitorMaster builds them on rank 0)
MONITOR_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "comet": "comet_ml"}


@dataclass(frozen=True, slots=True)
class RankRefusal:
    """What a rank would stop at (an op its accelerator lacks, a monitor's missing package): the config's key, what
    the rank names (``label``: the key, or the optimizer), why it stops, and the fix."""

    path: str
    label: str
    reason: str
    fix: str

    def line(self) -> str:
        """The rank's one-line error."""
        return f"{self.label}: {self.reason}: {self.fix}"


def op_refusal(config: dict[str, Any], device: str, has_op: Callable[[str], bool], nodes: int) -> RankRefusal | None:
    """The first op the config makes DeepSpeed load that the ``device`` accelerator lacks (``has_op(builder
    name)``), or None. ``nodes``: how many nodes DeepSpeed counts (ZeRO++'s quantized gradients load the quantizer
    only across nodes)."""
    name = str((config.get("optimizer") or {}).get("type", "")).lower()
    op = FUSED_OPS.get(name)
    if op and not (name == "lion" and zero_settings(config).offload != "none") and not has_op(op):
        offload = "; or offload the optimizer, where Lion runs on the CPU" if name == "lion" else ""
        return RankRefusal("optimizer.type", f"optimizer {name}",
                           f"DeepSpeed runs it with its {op} op, which its {device} accelerator does not have",
                           f"use AdamW, Adam, Adagrad or a torch.optim class{offload}")
    key = _quantizer_key(config, nodes)
    if key and not has_op("QuantizerBuilder"):
        path = f"zero_optimization.{key}"
        return RankRefusal(path, path, f"ZeRO++ quantizes with DeepSpeed's QuantizerBuilder op, which its {device} "
                                       "accelerator does not have",
                           "set it false (ZeRO++'s hpZ, zero_hpz_partition_size, runs without it)")
    return None


def monitor_refusal(config: dict[str, Any], has_package: Callable[[str], bool]) -> RankRefusal | None:
    """A monitor the config enables whose package ``has_package`` says is missing (where DeepSpeed would raise
    ModuleNotFoundError in ``deepspeed.initialize``), or None."""
    for section, package in MONITOR_PACKAGES.items():
        settings = config.get(section)
        if isinstance(settings, dict) and settings.get("enabled") is True and not has_package(package):
            why = f"DeepSpeed's {section} monitor needs the {package} package, which this environment lacks"
            return RankRefusal(f"{section}.enabled", f"{section}.enabled", why,
                               f"pip install {package}, or set {section}.enabled false")
    return None


def installed(package: str) -> bool:
    """Whether this environment can import ``package`` (found on its path; nothing is imported)."""
    return find_spec(package) is not None


def rank_findings(config: dict[str, Any], cpu_ranks: bool, ranks_here: bool) -> list[Finding]:
    """What each rank would stop at. On CPU ranks (a launch on a machine without GPUs): fp16 (precision.py), and the
    first op DeepSpeed's CPU accelerator lacks (its list in the schema, from DeepSpeed itself; one node: the quantized
    gradients' quantizer, which loads across nodes only, stays the rank's check). On ranks that run here, in this
    environment: a monitor whose package is not installed."""
    found = device_findings(config, cpu_ranks)
    refused = op_refusal(config, "cpu", set(raw_schema()["cpu_accelerator_ops"]).__contains__, 1) if cpu_ranks else None
    if refused is not None:
        found.append(Finding(severity="error", code="op-on-cpu", path=refused.path, fix=refused.fix,
                             message=f"{json.dumps(get_path(config, refused.path))} on CPU ranks: {refused.reason}"))
    monitor = monitor_refusal(config, installed) if ranks_here else None
    if monitor is not None:
        found.append(Finding(severity="error", code="monitor-package", path=monitor.path, fix=monitor.fix,
                             message=f"true, but {monitor.reason}"))
    return found


def _quantizer_key(config: dict[str, Any], nodes: int) -> str | None:
    """The ZeRO++ key that makes a ZeRO-3 engine load DeepSpeed's quantizer op, if any: quantized weights at
    ``zero.Init`` (runtime/zero/partition_parameters.py, ``CUDAQuantizer()``); quantized gradients at their first
    reduction when DeepSpeed counts more than one node, world size // ``accelerator.device_count()``
    (runtime/zero/stage3.py ``all_to_all_quant_reduce``; the CPU accelerator's count is LOCAL_SIZE, which torchrun
    leaves unset, so there it counts every rank as a node)."""
    zero = config.get("zero_optimization")
    if zero_settings(config).stage != 3 or not isinstance(zero, dict):
        return None
    keys = ["zero_quantized_weights", "zero_quantized_nontrainable_weights"]
    keys += ["zero_quantized_gradients"] if nodes > 1 else []
    return next((key for key in keys if zero.get(key) is True), None)
