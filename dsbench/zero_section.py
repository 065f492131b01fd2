"""What a DeepSpeed config's ``zero_optimization`` section asks for, read once, as DeepSpeed reads it.

DeepSpeed parses the section with pydantic (``runtime/zero/config.py``, ``DeepSpeedZeroConfig``), which in its lax
mode takes a whole float for an integer: ``"stage": 2.0`` is stage 2 and ``"reduce_bucket_size": 5e8`` (as many
users' configs write it) is 500000000. Every reader in dsbench (validation, explain, the planner, the report, the
worker) reads the section here, so none takes 5e8 for "no bucket set" or 2.0 for stage 0. A stage written as a
string (``"3"``) is refused by validation (``configs/types.py``), and reads as 0 here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsbench.ds_schema_file import raw_schema

DEVICES = ("none", "cpu", "nvme")
"""The offload devices DeepSpeed's ``OffloadDeviceEnum`` accepts, exactly so spelled."""


def whole(value: Any) -> int | None:
    """An integer, or a float with no fraction (pydantic's lax int), as an int; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, float) and value.is_integer() else None


@dataclass(frozen=True, slots=True)
class ZeroSettings:
    """The section as DeepSpeed would run it."""

    stage: int
    """0-3; 0 when absent (DeepSpeed's default)."""
    offload: str
    """``offload_optimizer.device``: none, cpu or nvme (an unknown device is validation's to refuse: none here)."""
    offload_param: str
    """``offload_param.device``, as ``offload``."""
    reduce_bucket: int | None
    """``reduce_bucket_size`` in elements, None when unset or "auto"."""
    prefetch_bucket: int | None
    """``stage3_prefetch_bucket_size`` in elements, None when unset or "auto"."""
    quantized_weights: bool = False
    """ZeRO++'s qwZ: ``zero_quantized_weights`` true (Wang et al. 2023, "ZeRO++", section 3.1)."""
    hpz: int = 1
    """ZeRO++'s hpZ: ``zero_hpz_partition_size``, the ranks a secondary copy of the parameters is partitioned over
    (1: none; section 3.2)."""
    quantized_gradients: bool = False
    """ZeRO++'s qgZ: ``zero_quantized_gradients`` true (section 3.3)."""
    offload_ratio: float = 1.0
    """``offload_optimizer.ratio``: the share of the optimizer's sub-groups ZeRO-3 puts on the host, the last ones
    (runtime/zero/stage3.py, ``subgroup_to_device``: "Percentage of offloaded optimizer states to CPU Adam. Only
    valid with ZeRO Stage 3"); 1 under the other stages, which never read it."""


    @property
    def zeropp(self) -> tuple[str, ...]:
        """The ZeRO++ keys the section turns on, in its paper's order (qwZ, hpZ, qgZ); DeepSpeed acts on them at
        stage 3 only."""
        on = (("zero_quantized_weights", self.quantized_weights), ("zero_hpz_partition_size", self.hpz > 1),
              ("zero_quantized_gradients", self.quantized_gradients))
        return tuple(key for key, set_ in on if set_)


def _section(config: Any, key: str) -> dict[str, Any]:
    value = config.get(key) if isinstance(config, dict) else None
    return value if isinstance(value, dict) else {}


def _device(zero: dict[str, Any], key: str) -> str:
    device = _section(zero, key).get("device") if key in zero else _deprecated_device(zero, key)
    return device if device in DEVICES else "none"


def _deprecated_device(zero: dict[str, Any], key: str) -> Any:
    """The offload a deprecated key asks for, as DeepSpeed reads it: ``cpu_offload: true`` is ``offload_optimizer``
    ``{"device": "cpu"}`` (runtime/zero/config.py, the field's ``new_param_fn``; the schema records what it writes).
    Giving both spellings is DeepSpeed's AssertionError, which validation reports."""
    for old, how in raw_schema()["deprecated"].get("zero_optimization", {}).items():
        if how["new"] == key and how["sets_new"] and zero.get(old) is True:
            return (how["from_true"] or {}).get("device")
    return None


def zero_settings(config: Any) -> ZeroSettings:
    """The ``zero_optimization`` section of ``config`` (any JSON value: a missing or malformed section reads as
    DeepSpeed's defaults, which validation reports as it finds them)."""
    zero = _section(config, "zero_optimization")
    stage = whole(zero.get("stage"))
    return ZeroSettings(stage=stage if stage in (0, 1, 2, 3) else 0, offload=_device(zero, "offload_optimizer"),
                        offload_param=_device(zero, "offload_param"),
                        reduce_bucket=whole(zero.get("reduce_bucket_size")),
                        prefetch_bucket=whole(zero.get("stage3_prefetch_bucket_size")),
                        quantized_weights=zero.get("zero_quantized_weights") is True,
                        hpz=whole(zero.get("zero_hpz_partition_size")) or 1,
                        quantized_gradients=zero.get("zero_quantized_gradients") is True,
                        offload_ratio=_ratio(zero) if stage == 3 else 1.0)


def _ratio(zero: dict[str, Any]) -> float:
    """``offload_optimizer.ratio`` as pydantic reads it (a number in [0, 1]; validation refuses anything else)."""
    ratio = _section(zero, "offload_optimizer").get("ratio", 1.0)
    return float(ratio) if isinstance(ratio, int | float) and not isinstance(ratio, bool) and 0 <= ratio <= 1 else 1.0


def stage_as_read(config: Any) -> bool:
    """Whether the config's stage is absent or one that :func:`zero_settings` reads as written (0-3, whole)."""
    stage = _section(config, "zero_optimization").get("stage")
    return stage is None or (not isinstance(stage, str) and whole(stage) in (0, 1, 2, 3))
