"""Which optimizer class DeepSpeed's engine builds for a config, and the start-up checks it makes of it.

``DeepSpeedConfig`` accepts any ``optimizer.type``; the engine then builds the class (runtime/engine.py
``_configure_basic_optimizer`` and ``get_optimizer_configuration``) and, before the first step, asserts two things
of it (``_configure_optimizer`` and ``_do_optimizer_sanity_check``), and ``_do_sanity_check`` one of Lamb:

- under ZeRO (stage 1-3), the class is one it has tested with ZeRO (``runtime/zero/utils.py``
  ``ZERO_SUPPORTED_OPTIMIZERS``), unless ``zero_allow_untested_optimizer`` is true;
- with the optimizer offloaded (cpu or nvme), it is ``DeepSpeedCPUAdam`` or ``DeepSpeedCPULion``, unless
  ``zero_force_ds_cpu_optimizer`` is false;
- Lamb runs with a dynamic loss scale (``fp16.loss_scale`` 0).

Measured on 2 CPU ranks (`dsbench launch --config`, 2026-11-30): Adafactor at ZeRO-2 and SGD at ZeRO-2 with the
optimizer offloaded stopped at start-up with "You are using an untested ZeRO Optimizer"; RMSprop with
``zero_allow_untested_optimizer`` trained. The names DeepSpeed builds and the classes it has tested are its own,
read by scripts/gen_ds_schema.py into the schema, so this check runs without importing DeepSpeed.
"""

from __future__ import annotations

import difflib
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
    """What the engine would stop at for the config's optimizer (none for a config without one: the script
    brings it)."""
    optimizer = config.get("optimizer")
    name = optimizer.get("type") if isinstance(optimizer, dict) else None
    known = load_schema().optimizers
    if not isinstance(name, str):
        return []
    kept = name.lower() if name.lower() in known["deepspeed"] else name  # DeepSpeedConfig's own step
    if kept not in known["deepspeed"] and kept not in known["torch"]:
        return [_not_built(name, known)]
    zero = zero_settings(config)
    params = optimizer.get("params")
    offload = zero.offload in ("cpu", "nvme")
    params = params if isinstance(params, dict) else {}
    cls = built_class(kept, params, offload)
    tested = known["zero_tested"]
    out = _argument_findings(kept, params, cls, known["arguments"])
    # both switches as DeepSpeed tests them: their truth (a wrongly typed one is configs/types.py's to name)
    if zero.stage >= 1 and cls not in tested and not config.get("zero_allow_untested_optimizer"):
        out.append(Finding(
            severity="error", code="deepspeed-rejects", path="optimizer.type",
            message=f"DeepSpeed builds {cls} for {name!r}, which it has not tested under ZeRO "
                    f"({', '.join(sorted(tested))}): at ZeRO stage {zero.stage} it stops at start-up",
            fix='set "zero_allow_untested_optimizer": true to run it anyway, or use AdamW'))
    if offload and cls not in CPU_OPTIMIZERS and config.get("zero_force_ds_cpu_optimizer", True):
        out.append(Finding(
            severity="error", code="deepspeed-rejects", path="optimizer.type",
            message=f"the offloaded optimizer steps on the CPU with {' or '.join(CPU_OPTIMIZERS)}; DeepSpeed builds "
                    f"{cls} for {name!r} and stops at start-up",
            fix='use AdamW, Adam or Lion (without torch_adam), or set "zero_force_ds_cpu_optimizer": false'))
    return out + _lamb_loss_scale(config, kept)


def _not_built(name: str, known: dict[str, Any]) -> Finding:
    """A name the engine builds nothing for: ``DeepSpeedConfig`` keeps any ``optimizer.type``, and the engine
    asserts ``_is_supported_optimizer`` at start-up (one of its own names, lower-cased by the config, or a
    ``torch.optim`` class as spelled; engine.py ``_configure_optimizer``). Both lists are DeepSpeed's and torch's
    own, read by scripts/gen_ds_schema.py, so a launch refuses the name before any rank starts."""
    spelled = _closest(name, [*known["torch"], *known["deepspeed"]])
    hint = f"did you mean '{spelled}'? " if spelled else ""
    return Finding(severity="error", code="deepspeed-rejects", path="optimizer.type",
                   message=f"DeepSpeed {load_schema().deepspeed_version} builds no optimizer {name!r}: it steps its "
                           f"own ({', '.join(known['deepspeed'])}) or a torch.optim class by its name",
                   fix=f"{hint}use AdamW (or Adam, Lamb, ... or a torch.optim name such as SGD)")


def _closest(name: str, names: list[str]) -> str | None:
    """The built name a refused one most likely meant: the same in another case (``sgd``: torch's class is
    ``SGD``, and only DeepSpeed's own names are lower-cased), the name before an underscore (the HF Trainer's
    ``adamw_torch``), or a near spelling."""
    lowered = {n.lower(): n for n in names}  # DeepSpeed's spelling wins where both have it (listed last)
    head = name.lower()
    for candidate in (head, head.split("_")[0]):
        if candidate in lowered:
            return lowered[candidate]
    close = difflib.get_close_matches(head, list(lowered), n=1, cutoff=0.8)
    return lowered[close[0]] if close else None


def _lamb_loss_scale(config: dict[str, Any], kept: str) -> list[Finding]:
    """Lamb needs a dynamic loss scale: engine.py ``_do_sanity_check`` asserts ``dynamic_loss_scale()``, which is
    ``fp16.loss_scale == 0`` as ``precision_config.get_float16_config`` reads it (0 when absent, and read even when
    fp16 is off: a static scale left in a disabled section stops the run too)."""
    fp16 = config.get("fp16")
    scale = fp16.get("loss_scale", 0) if isinstance(fp16, dict) else 0
    if kept != "lamb" or isinstance(scale, bool) or not isinstance(scale, int | float) or scale == 0:
        return []
    return [Finding(severity="error", code="deepspeed-rejects", path="fp16.loss_scale",
                    message=f"a static loss scale ({scale:g}) with the Lamb optimizer: DeepSpeed asserts at start-up "
                            "that Lamb has a dynamic one, whether fp16 is on or not",
                    fix="set fp16.loss_scale to 0 (dynamic), or delete it")]


def _handled(kept: str, params: dict[str, Any], cls: str) -> tuple[set[str], set[str]]:
    """The keys DeepSpeed takes out of an optimizer's params, and those it passes to the class itself
    (engine.py ``_configure_basic_optimizer``: Adam's ``adam_w_mode``; ``get_optimizer_configuration``:
    ``torch_adam``, ``fp32_optimizer_states``, and ``foreach`` for torch's Adam; then ``adam_w_mode`` to FusedAdam,
    ``adamw_mode`` and ``fp32_optimizer_states`` to DeepSpeedCPUAdam, ``foreach`` to torch's)."""
    if kept not in ("adam", "adamw"):
        return set(), set()
    taken = {"adam_w_mode", "torch_adam", "fp32_optimizer_states"}
    if params.get("torch_adam") is True:
        return taken | {"foreach"}, {"foreach"}
    return taken, ({"adamw_mode", "fp32_optimizer_states"} if cls == "DeepSpeedCPUAdam" else {"adam_w_mode"})


def _argument_findings(kept: str, params: dict[str, Any], cls: str,
                       arguments: dict[str, list[str] | None]) -> list[Finding]:
    """The params the engine would stop at: ``max_grad_norm`` (its ValueError, for every optimizer), a key the
    class does not take, or one DeepSpeed passes itself (the class's TypeError). ``arguments``: each class's keyword
    arguments, from its signature (the schema); a class not listed (mup's, Muon's param groups) is not checked."""
    out = []
    if "max_grad_norm" in params:
        out.append(Finding(severity="error", code="deepspeed-rejects", path="optimizer.params.max_grad_norm",
                           message="DeepSpeed refuses max_grad_norm as an optimizer parameter and stops at start-up",
                           fix="delete it and set gradient_clipping (the top-level key) instead"))
    takes = arguments.get(cls, None)
    if cls not in arguments or takes is None:
        return out
    taken, passed = _handled(kept, params, cls)
    for key in sorted(set(params) - taken - {"max_grad_norm"}):
        path = f"optimizer.params.{key}"
        if key in passed:
            out.append(Finding(severity="error", code="deepspeed-rejects", path=path,
                               message=f"DeepSpeed passes {key} to {cls} itself, so the class would get it twice",
                               fix=f"delete {path} (Adam without decoupled weight decay: adam_w_mode false)"))
        elif key not in takes:
            out.append(unknown_argument(path, cls, takes))
    return out


def unknown_argument(path: str, cls: str, takes: list[str]) -> Finding:
    """An argument the class DeepSpeed builds does not take (its TypeError at start-up), with the closest it does."""
    key = path.rsplit(".", 1)[-1]
    close = difflib.get_close_matches(key, takes, n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return Finding(severity="error", code="deepspeed-rejects", path=path,
                   message=f"DeepSpeed builds {cls}, which takes no argument {key!r}: it stops at start-up",
                   fix=f"{hint}{cls} takes {', '.join(takes) or 'nothing more'}")
