"""Render a DeepSpeed config: template fragments -> ``--set`` overrides -> "auto" fill.

Each step is a pure function on fresh dicts. The flag-driven structure (stage, offload,
precision, pipeline, tensor parallel) comes from the fragments in ``ds_configs/templates``;
``--set`` is applied after the flags; "auto" values are then filled from the spec as the HF
Trainer would (see :mod:`dsbench.configs.autofill`), unless ``keep_auto`` leaves them for the
Trainer.
"""

from __future__ import annotations

from typing import Any

from dsbench.configs.autofill import AUTO, DEEPSPEED_DEFAULTS, AutoInputs, fill_auto
from dsbench.configs.batch import for_deepspeed
from dsbench.configs.overrides import apply_overrides, deep_merge, get_path, set_path
from dsbench.configs.scheduler_check import known_scheduler, scheduler_class, scheduler_name
from dsbench.configs.templates import load_template
from dsbench.errors import UserError
from dsbench.parallel import bubble_fraction
from dsbench.spec import RenderSpec


def fragment_names(spec: RenderSpec) -> list[str]:
    """The template fragments a spec is composed from, in merge order."""
    names = ["base", f"zero{spec.zero}"]
    if spec.warmup_steps > 0 or (spec.keep_auto and "warmup_steps" not in spec.explicit):
        names.append("scheduler_warmup")  # no warm-up: no scheduler, constant LR (see validate's warmup check)
    if spec.keep_auto and "precision" not in spec.explicit:
        names += ["fp16", "bf16"]  # both "auto": the Trainer's --fp16/--bf16 decides
    elif spec.precision != "fp32":
        names.append(spec.precision)
    if spec.offload != "none":
        names.append(f"offload_optimizer_{spec.offload}")
    if spec.offload_param != "none":
        names.append(f"offload_param_{spec.offload_param}")
    if spec.pipeline_stages > 1:
        names.append("pipeline")
    if spec.tp > 1:
        names.append("tensor_parallel")
    return names


def compose(spec: RenderSpec) -> dict[str, Any]:
    """Merge the fragments and set the structural values the flags carry."""
    config: dict[str, Any] = {}
    for name in fragment_names(spec):
        config = deep_merge(config, load_template(name))
    for section in ("offload_optimizer", "offload_param"):
        if get_path(config, f"zero_optimization.{section}.device") == "nvme" and spec.nvme_path:
            set_path(config, ["zero_optimization", section, "nvme_path"], spec.nvme_path)
    if spec.pipeline_stages > 1:
        set_path(config, ["pipeline", "stages"], spec.pipeline_stages)
    if spec.tp > 1:
        set_path(config, ["tensor_parallel", "autotp_size"], spec.tp)
    if spec.ulysses > 1:  # DeepSpeed's key for Ulysses (runtime/config.py reads it beside the mpu)
        set_path(config, ["sequence_parallel_size"], spec.ulysses)
    return config


def auto_inputs(spec: RenderSpec, config: dict[str, Any] | None = None) -> AutoInputs:
    """The values "auto" resolves to for this spec.

    With ``keep_auto`` only explicitly given flags count. Batch values already fixed in
    ``config`` (e.g. by ``--set``) are used for the derived ``train_batch_size``.
    """
    given = spec.explicit

    def pick(name: str, value: Any) -> Any:
        return value if (not spec.keep_auto or name in given) else None

    config = config or {}
    micro = get_path(config, "train_micro_batch_size_per_gpu")
    accum = get_path(config, "gradient_accumulation_steps")
    return AutoInputs(
        micro_batch=micro if isinstance(micro, int) else pick("micro_batch", spec.micro_batch),
        grad_accum=accum if isinstance(accum, int) else pick("grad_accum", spec.grad_accum_steps()),
        data_parallel_size=pick("world_size", spec.data_parallel_size()),
        grad_clip=pick("grad_clip", spec.grad_clip),
        lr=pick("lr", spec.lr),  # a --set optimizer.params.lr is the warm-up's peak (fill_auto)
        betas=pick("lr", (0.9, 0.999)),
        eps=pick("lr", 1e-8),
        weight_decay=pick("lr", 0.0),
        warmup_steps=pick("warmup_steps", spec.warmup_steps),
        train_steps=pick("train_steps", spec.train_steps),
        precision=pick("precision", spec.precision),
        hidden_size=spec.hidden_size,
    )


SCHEDULE_FLAGS = ("warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "total_num_steps")
"""A scheduler's parameters the flags fill, as "auto" and then as the HF Trainer fills them (autofill.RULES: 0,
--lr, --warmup-steps, --train-steps), where the scheduler a ``--set`` names takes them and leaves them out."""


def schedule_from_flags(config: dict[str, Any], spec: RenderSpec) -> dict[str, Any]:
    """The config with its scheduler's warm-up and length taken from the flags where a ``--set scheduler.type``
    left them out (DeepSpeed's own defaults, a 1000-step warm-up and WarmupDecayLR's peak of 0.001, are nobody's
    choice). An explicit ``--train-steps`` that no scheduler takes is refused, as every flag a run would ignore."""
    how = scheduler_class(config)
    if "train_steps" in spec.explicit and "total_num_steps" not in (how["takes"] if how else ()):
        name = scheduler_name(config)
        which = f"{name}, which holds its peak after the warm-up" if name else "none: a constant LR"
        raise UserError(f"--train-steps {spec.train_steps} sets a decaying scheduler's total_num_steps, and the "
                        f"rendered config's scheduler has none ({which}): drop it, or name one with "
                        "--set scheduler.type='\"WarmupDecayLR\"' (or WarmupCosineLR)")
    found = known_scheduler(config)
    if found is None:
        return config
    _, how, params = found
    takes = how["takes"]
    # a warm-up of 0 steps is what DeepSpeed refuses (validate's warmup check): then it stays DeepSpeed's default
    fill = [key for key in SCHEDULE_FLAGS if key in takes and key not in params
            and (key != "warmup_num_steps" or spec.warmup_steps >= 1 or spec.keep_auto)]
    # the warm-up template's "auto" values that a scheduler named by --set does not take (WarmupCosineLR has
    # ratios, not warmup_min_lr/warmup_max_lr); a value the user wrote stays, for validate to name
    kept = {key: value for key, value in params.items() if key in takes or value != AUTO}
    return {**config, "scheduler": {**config["scheduler"], "params": {**kept, **dict.fromkeys(fill, AUTO)}}}


def render(spec: RenderSpec) -> tuple[dict[str, Any], list[str]]:
    """Render the config for ``spec``; returns it with notes for the user (stderr)."""
    notes: list[str] = []
    if spec.pipeline_stages > 1 and "zero" not in spec.explicit:
        notes.append(f"no --zero given: ZeRO-{spec.zero} with {spec.pipeline_stages} pipeline stages (DeepSpeed's "
                     "pipeline engine takes stage 0 or 1; ZeRO-1 shards the optimizer states)")
    micro_batches = spec.grad_accum_steps()
    if 1 < spec.pipeline_stages and micro_batches < spec.pipeline_stages:
        idle = bubble_fraction(spec.pipeline_stages, micro_batches)
        notes.append(f"warning: {micro_batches} micro-batch(es) for {spec.pipeline_stages} pipeline stages: each stage "
                     f"idles (P-1)/(M+P-1) = {idle:.0%} of a step; raise --grad-accum to at least "
                     f"{spec.pipeline_stages} (the micro-batches per step)")
    config = schedule_from_flags(apply_overrides(compose(spec), spec.sets), spec)
    config, unresolved = fill_auto(config, auto_inputs(spec, config))
    defaulted = [path for path in unresolved if path in DEEPSPEED_DEFAULTS and not spec.keep_auto]
    for path in defaulted:
        section, key = path.split(".")
        del config[section][key]
    if defaulted:  # one line for all of them: a plain `dsbench launch --zero 3` defaults three
        values = ", ".join(f"{path.split('.')[1]} {DEEPSPEED_DEFAULTS[path]:,}" for path in defaulted)
        notes.append(f"no --model given, so DeepSpeed's defaults apply to {values} (pass --model to size them as the "
                     "HF Trainer does)")
    # under AutoTP with ZeRO-3 DeepSpeed checks train_batch_size against two rank counts: left out, it derives it
    return _sorted(for_deepspeed(config)), notes


def _sorted(data: Any) -> Any:
    """Recursively sort object keys so renders are byte-for-byte reproducible."""
    if isinstance(data, dict):
        return {key: _sorted(data[key]) for key in sorted(data)}
    return data
