"""Which optimizer class DeepSpeed's engine builds for a config, and the two start-up checks it makes of it.

``DeepSpeedConfig`` accepts any ``optimizer.type``; the engine then builds the class (runtime/engine.py
``_configure_basic_optimizer`` and ``get_optimizer_configuration``) and, before the first step, asserts two things
of it (``_configure_optimizer`` and ``_do_optimizer_sanity_check``):

- under ZeRO (stage 1-3), the class is one it has tested with ZeRO (``runtime/zero/utils.py``
  ``ZERO_SUPPORTED_OPTIMIZERS``), unless ``zero_allow_untested_optimizer`` is true;
- with the optimizer offloaded (cpu or nvme), it is ``DeepSpeedCPUAdam`` or ``DeepSpeedCPULion``, unless
  ``zero_force_ds_cpu_optimizer`` is false.

Measured on 2 CPU ranks (`dsbench launch --config`, 2026-11-30): Adafactor at ZeRO-2 and SGD at ZeRO-2 with the
optimizer offloaded stopped at start-up with "You are using an untested ZeRO Optimizer"; RMSprop with
``zero_allow_untested_optimizer`` trained. The names DeepSpeed builds and the classes it has tested are its own,
read by scripts/gen_ds_schema.py into the schema, so this check runs without importing DeepSpeed.
"""

from __future__ import annotations

from typing import Any

from dsbench.configs.findings import Finding
from dsbench.configs.schema import load_schema
from dsbench.zero_section import zero_settings

# the classes DeepSpeed steps an offloaded optimizer with (engine.py ``_configure_optimizer``: isinstance checks)
CPU_OPTIMIZERS = ("DeepSpeedCPUAdam", "DeepSpeedCPULion")
_MUP = {"muadam": "MuAdam", "muadamw": "MuAdamW", "musgd": "MuSGD"}


def built_class(kept: str, params: dict[str, Any], offload: bool) -> str:
    """The class name ``_configure_basic_optimizer`` builds for ``kept`` (the type as DeepSpeedConfig keeps it:
    its own names lower-cased, a ``torch.optim`` class as spelled)."""
    if kept in ("adam", "adamw"):
        if params.get("torch_adam") is True:  # get_optimizer_configuration: torch's class, offloaded or not
            w_mode = kept == "adamw" or params.get("adam_w_mode", True) is not False
            return "AdamW" if w_mode else "Adam"
        return "DeepSpeedCPUAdam" if offload else "FusedAdam"
    if kept == "adagrad":
        return "DeepSpeedCPUAdagrad" if offload else "Adagrad"
    if kept == "lion":
        return "DeepSpeedCPULion" if offload else "FusedLion"
    if kept == "lamb":
        return "FusedLamb"
    if kept == "muon":
        return "MuonWithAuxAdam"
    return _MUP.get(kept, kept)


def check_optimizer(config: dict[str, Any]) -> list[Finding]:
    """What the engine would stop at for the config's optimizer (none for a config without one: the script brings
    it, or for a name DeepSpeed cannot build, which configs/deepspeed_check.py reports)."""
    optimizer = config.get("optimizer")
    name = optimizer.get("type") if isinstance(optimizer, dict) else None
    known = load_schema().optimizers
    if not isinstance(name, str):
        return []
    kept = name.lower() if name.lower() in known["deepspeed"] else name  # DeepSpeedConfig's own step
    if kept not in known["deepspeed"] and kept not in known["torch"]:
        return []
    zero = zero_settings(config)
    params = optimizer.get("params")
    offload = zero.offload in ("cpu", "nvme")
    cls = built_class(kept, params if isinstance(params, dict) else {}, offload)
    tested = known["zero_tested"]
    out = []
    if zero.stage >= 1 and cls not in tested and config.get("zero_allow_untested_optimizer") is not True:
        out.append(Finding(
            severity="error", code="deepspeed-rejects", path="optimizer.type",
            message=f"DeepSpeed builds {cls} for {name!r}, which it has not tested under ZeRO "
                    f"({', '.join(sorted(tested))}): at ZeRO stage {zero.stage} it stops at start-up",
            fix='set "zero_allow_untested_optimizer": true to run it anyway, or use AdamW'))
    if offload and cls not in CPU_OPTIMIZERS and (
            config.get("zero_force_ds_cpu_optimizer", True) is not False):
        out.append(Finding(
            severity="error", code="deepspeed-rejects", path="optimizer.type",
            message=f"the offloaded optimizer steps on the CPU with {' or '.join(CPU_OPTIMIZERS)}; DeepSpeed builds "
                    f"{cls} for {name!r} and stops at start-up",
            fix='use AdamW, Adam or Lion (without torch_adam), or set "zero_force_ds_cpu_optimizer": false'))
    return out
