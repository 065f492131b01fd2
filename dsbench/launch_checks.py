"""What ``dsbench launch`` refuses before any process starts: a model that does not split as the layout asks, a
``--resume`` that could not continue its checkpoint (pure; the ranks check both again), and counts typed beside a
hostfile that disagree with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsbench import checkpoints, trainspec
from dsbench.configs.layout import config_dims, int_or_none
from dsbench.configs.precision import config_precision
from dsbench.errors import UserError
from dsbench.io import check_creatable_folder
from dsbench.layout_check import check_run_layout
from dsbench.models import ModelShape, resolve_model
from dsbench.parallel import ParallelDims, pipeline_notes


def check_layout(train: trainspec.TrainSpec, config: dict[str, Any] | None, world: int,
                 resume: bool = False, dims: ParallelDims | None = None) -> list[str]:
    """Before any process starts: the model splits as the layout asks (heads, layers, family), and with ``resume``
    the checkpoint of ``--resume`` can continue as this run; returns notes. ``dims``: the config's layout where the
    caller has worked it out."""
    shape = resolve_model(train.model)
    if dims is None and config is not None:
        dims = config_dims(config, world)
        if dims is None:
            return []  # validate() reported it
    elif dims is None:
        dims = ParallelDims(world=world, tp=train.tp, pp=train.pipeline_stages, dp_shard=train.dp_shard)
    check_run_layout(train, train.strategy, shape, dims)  # the check each rank makes again (layout_check.py)
    if train.checkpoint_dir:  # the worker checks again; a launch refuses it before any rank starts
        check_creatable_folder(Path(train.checkpoint_dir), "--checkpoint-dir")
    if resume and train.resume:
        checkpoints.check_before_launch(train.resume, train.strategy, train.steps, train.warmup,
                                        _definition(train, shape, dims, config), dims.world, dims.tp, dims.pp)
    pipelined = train.strategy in trainspec.PIPELINED
    return pipeline_notes(dims.pp, train.grad_accum) if pipelined else []


def _definition(train: trainspec.TrainSpec, shape: ModelShape, dims: ParallelDims,
                config: dict[str, Any] | None) -> dict[str, Any]:
    """The run's definition as each rank will record it (worker/run.py ``_definition``), less what only the ranks
    resolve: the global batch when the DeepSpeed config leaves its micro-batch or accumulation "auto", the
    precision when neither the config nor ``--precision`` states it (a rank may read accelerate's variable)."""
    if config is None:
        micro, accum, precision = train.micro_batch, train.grad_accum, train.precision
    else:
        micro = int_or_none(config.get("train_micro_batch_size_per_gpu"))
        accum = int_or_none(config.get("gradient_accumulation_steps", 1))
        precision = config_precision(config)
    run = checkpoints.definition(shape.to_dict(), train.seq_len, train.seed,
                                 dims.samples_per_step(micro, accum) if micro and accum else None, precision)
    return {key: value for key, value in run.items() if value not in (None, "auto")}


def check_hostfile_overrides(overrides: dict[str, int], world: int, nodes: int, hostfile: str) -> dict[str, int]:
    """With --hostfile, the hostfile's hosts and slots are the machines and processes; typed counts must agree."""
    for key, value in (("num_processes", world), ("num_machines", nodes)):
        if key in overrides and overrides[key] != value:
            raise UserError(f"--{key.replace('_', '-')} {overrides[key]} disagrees with {hostfile} ({value}): drop it "
                            "(the hostfile says how many)")
    return {"num_processes": world, "num_machines": nodes}


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
    "precision": ("--precision", "precision (bf16.enabled, fp16.enabled)", config_precision),
}


def check_worker_flags(user_args: tuple[str, ...] | list[str], config: dict[str, Any], config_file: str | None,
                       accelerate: bool = False) -> None:
    """A worker flag after ``--`` that the DeepSpeed config contradicts would be ignored on every rank (the config's
    value wins): refused in one line, with where to set it. A key the config leaves "auto" is filled from the flag
    by the worker, so it passes; one it does not set is DeepSpeed's to derive (dsbench's renders set every one).

    ``accelerate``: the config is an accelerate YAML's DeepSpeed settings (``config_file`` the file that holds
    them), where the worker adds AdamW and WarmupLR from its flags when the settings have none
    (configs/accelerate_worker.with_script_optimizer) and accelerate's --mixed_precision decides the precision."""
    given = trainspec.given_flags(user_args)
    for field, (flag, key, read) in _CONFIG_DECIDES.items():
        if field not in given or accelerate and (field == "precision" or field == "lr_warmup_steps"
                                                  and "scheduler" not in config):
            continue
        value = read(config)
        if value is None or value == "auto" or value == given[field]:
            continue
        typed = f"-- --{field.replace('_', '-')} {given[field]}"
        if not config_file:
            fix = f"give {flag} {given[field]} before -- instead, so that dsbench launch renders it into the config"
        elif accelerate and not config_file.endswith(".json"):  # the YAML's own deepspeed_config section
            fix = f"change {key} in {config_file}"
        else:
            fix = f"change {key} in {config_file}, or set it to \"auto\""
        raise UserError(f"{typed}: the DeepSpeed config sets {key} to {value}, which the ranks would use; {fix}")
