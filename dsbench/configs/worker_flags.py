"""Worker flags against the DeepSpeed config that decides them: on DeepSpeed's ranks the config's batch, optimizer,
scheduler and precision win over the worker's flags (trainspec: ``deepspeed_config``), so a flag it contradicts
would be ignored silently. ``dsbench launch`` checks the flags typed after ``--`` (launch.py), and each rank those
typed next to ``--deepspeed_config`` by hand (worker/resolve.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dsbench.configs.accelerate_worker import script_completes
from dsbench.configs.autofill import CLIP_DEFAULT
from dsbench.configs.precision import run_precision
from dsbench.errors import UserError


def _warmup_steps(config: dict[str, Any]) -> Any:
    """The config's LR warm-up: no scheduler is a constant LR (dsbench renders none for 0 warm-up steps)."""
    scheduler = config.get("scheduler")
    return (scheduler.get("params") or {}).get("warmup_num_steps") if isinstance(scheduler, dict) else 0


# Worker flags (after --) whose value a DeepSpeed config decides on the ranks (its batch, optimizer, scheduler and
# precision win: trainspec.deepspeed_config): field -> (the launch flag that renders it, the config's key, its value).
_CONFIG_DECIDES = {
    "micro_batch": ("--micro-batch", "train_micro_batch_size_per_gpu",
                    lambda c: c.get("train_micro_batch_size_per_gpu")),
    "grad_accum": ("--grad-accum", "gradient_accumulation_steps", lambda c: c.get("gradient_accumulation_steps")),
    "lr": ("--lr", "optimizer.params.lr", lambda c: ((c.get("optimizer") or {}).get("params") or {}).get("lr")),
    "grad_clip": ("--grad-clip", "gradient_clipping", lambda c: c.get("gradient_clipping")),
    "lr_warmup_steps": ("--warmup-steps", "scheduler.params.warmup_num_steps", _warmup_steps),
    "precision": ("--precision", "precision (bf16.enabled, fp16.enabled, torch_autocast)", run_precision),
}


def _decided(field: str, read: Any, config: dict[str, Any], inline: bool) -> tuple[Any, str]:
    """The value the config decides for a worker flag's field on the ranks, and how to say so: a clipping it leaves
    out is DeepSpeed's default, except in accelerate's inline settings, which the worker completes with "auto"."""
    value = read(config)
    if value is None and field == "grad_clip" and not inline:
        return CLIP_DEFAULT, f"leaves gradient_clipping out, so DeepSpeed clips at its default, {CLIP_DEFAULT}"
    if value == 0 and field == "grad_clip" and inline and not isinstance(value, bool):
        # accelerate writes the inline key only when it is truthy (DeepSpeedPlugin: `if self.gradient_clipping:`)
        return CLIP_DEFAULT, f"sets gradient_clipping to 0, which accelerate drops: DeepSpeed clips at {CLIP_DEFAULT}"
    return value, ""


def check_worker_flags(given: Mapping[str, Any], config: dict[str, Any], config_file: str | None,
                       accelerate: bool = False, after: str | None = "-- ", inline: bool = False) -> None:
    """A worker flag (``given``: as typed, trainflags.given_flags; ``after``: how the message shows where it was
    typed, None for dsbench launch's own flag passed on to the worker, spelled as launch spells it) that the
    DeepSpeed config contradicts would be ignored on every rank (the config's value wins): refused in one line, with
    where to set it. A key the config leaves "auto" is filled from the flag by the worker, so it passes; one it does
    not set is DeepSpeed's to derive (dsbench's renders set every one).

    ``accelerate``: the config is an accelerate YAML's DeepSpeed settings (``config_file`` the file that holds
    them), where accelerate's --mixed_precision decides the precision. ``inline``: the settings are the YAML's
    inline ones, which the worker always completes with AdamW and WarmupLR (a file, only when it names no
    optimizer: configs/accelerate_worker.script_completes)."""
    # the worker brings AdamW, and WarmupLR from its flags, where the settings name no scheduler and it completes
    # them as the training script (accelerate_worker.script_completes, as the rank decides it)
    script_scheduler = "scheduler" not in config and script_completes(config, inline)
    for field, (flag, key, read) in _CONFIG_DECIDES.items():
        if field not in given or accelerate and field == "precision" or field == "lr_warmup_steps" and script_scheduler:
            continue
        value, said = _decided(field, read, config, inline)
        if value is None or value == "auto" or value == given[field]:
            continue
        typed = f"{flag} {given[field]}" if after is None else f"{after}--{field.replace('_', '-')} {given[field]}"
        if not config_file:
            fix = f"give {flag} {given[field]} before -- instead, so that dsbench launch renders it into the config"
        elif config_file.endswith(".json"):
            fix = (f"add \"{key}\": {given[field]} (or \"auto\") to {config_file}" if said else
                   f"change {key} in {config_file}, or set it to \"auto\"")
        elif field == "grad_clip" and inline and not given[field]:  # no inline value turns clipping off
            fix = f'name a DeepSpeed JSON with "{key}": 0 in deepspeed_config.deepspeed_config_file of {config_file}'
        else:  # an accelerate YAML's own deepspeed_config section
            fix = f"change deepspeed_config.{key} in {config_file}"
        raise UserError(f"{typed}: the DeepSpeed config {said or f'sets {key} to {value}'}, which the ranks would "
                        f"use; {fix}")
