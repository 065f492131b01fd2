"""What ``dsbench launch`` refuses before any process starts: a model that does not split as the layout asks, a
``--resume`` that could not continue its checkpoint (pure; the ranks check both again), and counts typed beside a
hostfile that disagree with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsbench import checkpoints, trainspec
from dsbench.configs import accelerate, accelerate_worker
from dsbench.configs.batch import config_batch
from dsbench.configs.layout import config_dims, in_config_keys
from dsbench.configs.precision import run_precision
from dsbench.errors import UserError
from dsbench.io import check_creatable_folder
from dsbench.layout_check import check_run_layout
from dsbench.model_config import resolve_model
from dsbench.models import ModelShape
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


def check_yaml_layout(train: trainspec.TrainSpec, yaml_config: dict[str, Any], processes: int,
                      path: str) -> list[str]:
    """:func:`check_layout` for a user's accelerate YAML: its Ulysses groups (``parallelism_config`` sp_size under
    DeepSpeed) and its processes, a refusal naming the YAML's setting where the check names ``--ulysses``. Returns
    the notes of what the worker does differently from a script under the YAML."""
    sp = accelerate.ulysses_degree(yaml_config)
    try:
        check_layout(train, None, processes, dims=ParallelDims(world=processes, sp=sp) if sp > 1 else None)
    except UserError as error:
        raise UserError(f"{path}: " + in_config_keys(str(error), {"--ulysses": "parallelism_config sp_size"})
                        if sp > 1 else str(error)) from None
    return accelerate_worker.worker_notes(yaml_config, compiled=train.compile)


def _definition(train: trainspec.TrainSpec, shape: ModelShape, dims: ParallelDims,
                config: dict[str, Any] | None) -> dict[str, Any]:
    """The run's definition as each rank will record it (worker/run.py ``_definition``), less what only the ranks
    resolve: the global batch when the DeepSpeed config leaves its micro-batch or accumulation "auto", the
    precision when neither the config nor ``--precision`` states it (a rank may read accelerate's variable)."""
    if config is None:
        micro, accum, precision = train.micro_batch, train.grad_accum, train.precision
    else:
        batch = config_batch(config, dims.world, dims)  # as DeepSpeed derives what the config leaves out
        micro, accum = (batch.micro, batch.accum) if batch else (None, None)
        precision = run_precision(config)
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
