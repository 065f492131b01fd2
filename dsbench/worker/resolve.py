"""The run as it will execute on this rank: one resolution of the spec, its DeepSpeed config and the launcher's
environment (strategy, layout, batch, precision, FSDP's settings, the engine's options), made once before anything
is built, so that every later step reads the same answer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dsbench.configs.accelerate_worker import script_completes, with_script_optimizer
from dsbench.configs.autofill import AutoInputs
from dsbench.configs.loader import load_config_strict
from dsbench.configs.worker_flags import check_worker_flags
from dsbench.errors import UserError
from dsbench.layout_check import check_run_layout
from dsbench.model_config import resolve_model
from dsbench.models import ModelShape
from dsbench.parallel import ParallelDims
from dsbench.trainspec import TrainSpec
from dsbench.worker import accelerate_env, setup
from dsbench.worker.engines.base import EngineOptions


@dataclass(frozen=True, slots=True)
class Resolved:
    """What :func:`resolve` decided for this rank."""

    strategy: str
    shape: ModelShape
    dims: ParallelDims
    """The layout: the DeepSpeed config's (AutoTP degree, pipeline stages) or the torch engines' flags."""
    micro_batch: int
    grad_accum: int
    """Per rank: a DeepSpeed config's own values win over the flags."""
    ds_config: dict[str, Any] | None
    """The DeepSpeed config with "auto" filled and validated (deepspeed strategy only)."""
    precision: str
    fsdp: dict[str, Any] | None
    """FSDP2's settings: accelerate's plugin's from the launcher's environment, else the flags (fsdp only)."""
    options: EngineOptions
    """What the engine is built with, from all of the above and the spec."""


def resolve(spec: TrainSpec, world: int, environ: Mapping[str, str],
            typed: Mapping[str, Any] | None = None) -> Resolved:
    """Strategy (``auto`` from the launcher's environment), model, config, layout and precision; every check that
    needs them (the model splits into the layout, --compile fits it) made here, before the process group.
    ``typed``: the worker flags typed on the command line, which the DeepSpeed config must not contradict."""
    strategy = setup.resolve_strategy(spec.strategy, spec.deepspeed_config, world)
    if strategy == "single" and world > 1:
        raise UserError(f"--strategy single runs one process, but the launcher started {world}")
    shape = resolve_model(spec.model)
    if strategy == "deepspeed":
        ds_config, dims = _deepspeed_config(spec, shape, world, environ)
        # a flag typed beside a config that sets another value would be ignored (dsbench launch checks its own "--"
        # flags before it writes run.json, so a launched rank has none here); "auto" was filled from the flags
        source = (spec.deepspeed_config or environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")
                  or accelerate_env.PLUGIN_SOURCE)
        check_worker_flags(typed or {}, ds_config, source, after="")
        micro, accum = ds_config["train_micro_batch_size_per_gpu"], ds_config.get("gradient_accumulation_steps", 1)
    else:  # torch_tp groups share a batch; torch_pp stages pass one along (torch_3d: both)
        ds_config = None
        dims = ParallelDims(world=world, tp=spec.tp, pp=spec.pipeline_stages, dp_shard=_dp_shard(spec, world, environ))
        micro, accum = spec.micro_batch, spec.grad_accum
    check_run_layout(spec, strategy, shape, dims)  # the launch's own check (layout_check.py), made again here
    precision = setup.precision_of(ds_config, spec.precision)
    fsdp = (accelerate_env.fsdp_settings(spec.fsdp_reshard, spec.fsdp_cpu_offload, spec.activation_checkpointing)
        if strategy == "fsdp" else None)
    return Resolved(strategy=strategy, shape=shape, dims=dims, micro_batch=micro, grad_accum=accum,
                    ds_config=ds_config, precision=precision, fsdp=fsdp,
                    options=_engine_options(spec, accum, precision, fsdp, ds_config, dims))


def _engine_options(spec: TrainSpec, accum: int, precision: str, fsdp: dict[str, Any] | None,
                    ds_config: dict[str, Any] | None, dims: ParallelDims) -> EngineOptions:
    """The training settings every engine takes, from the spec and what this resolution decided."""
    return EngineOptions(lr=spec.lr, weight_decay=spec.weight_decay, betas=(0.9, 0.999), eps=1e-8,
                         grad_clip=spec.grad_clip, warmup_steps=spec.lr_warmup_steps, grad_accum=accum,
                         precision=precision, fsdp_reshard=bool(fsdp and fsdp["reshard"]),
                         fsdp_cpu_offload=bool(fsdp and fsdp["cpu_offload"]), ds_config=ds_config, dims=dims,
                         fsdp_accelerate_amp=bool(fsdp and fsdp.get("accelerate_amp")),
                         pipeline_schedule=spec.pipeline_schedule, virtual_stages=spec.virtual_stages,
                         compile=spec.compile, fused_optimizer=spec.fused_optimizer,
                         sequence_parallel=spec.sequence_parallel, loss_parallel=spec.loss_parallel,
                         seq_len=spec.seq_len)


def _deepspeed_config(spec: TrainSpec, shape: ModelShape, world: int,
                      environ: Mapping[str, str]) -> tuple[dict[str, Any], ParallelDims]:
    """The DeepSpeed config ("auto" filled from the worker's flags, validated) and its layout: --deepspeed_config,
    else the file accelerate names, else accelerate's inline plugin settings."""
    inputs = AutoInputs(micro_batch=spec.micro_batch, grad_accum=spec.grad_accum, data_parallel_size=world,
                        grad_clip=spec.grad_clip, lr=spec.lr, weight_decay=spec.weight_decay,
                        warmup_steps=spec.lr_warmup_steps, train_steps=spec.steps,
                        precision=setup.precision_of(None, spec.precision), hidden_size=shape.hidden)
    path = spec.deepspeed_config or environ.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")
    if path:
        raw, source = load_config_strict(path), path
        if isinstance(raw, dict) and script_completes(raw, inline=False):
            # a config left for the training script to bring its optimizer (as the HF Trainer does for one without
            # an optimizer section): the worker brings the one it renders, as for accelerate's inline settings;
            # DeepSpeed alone would stop at "zero stage N requires an optimizer"
            raw = with_script_optimizer(raw, spec.lr_warmup_steps)[0]
    elif accelerate_env.inline_deepspeed(environ):
        raw, source = accelerate_env.deepspeed_config(spec.lr_warmup_steps)[0], accelerate_env.PLUGIN_SOURCE
    else:
        raise UserError("the deepspeed strategy needs --deepspeed_config FILE (e.g. ds_configs/zero2.json)")
    return setup.complete_ds_config(accelerate_env.with_ulysses(raw, source, environ), source, inputs, world)


def _dp_shard(spec: TrainSpec, world: int, environ: Mapping[str, str]) -> int:
    """FSDP2's shard group: ``--dp-shard``, or the one an accelerate YAML asks for (its ``parallelism_config``, or an
    FSDP1 sharding strategy's; the same when both are given: ``dsbench launch --launcher accelerate --dp-shard S``
    writes it into its YAML)."""
    given, accelerate = spec.dp_shard, accelerate_env.shard_group(environ, world)
    if given and accelerate and given != accelerate:
        raise UserError(f"--dp-shard {given} but accelerate's YAML asks for shard groups of {accelerate}: give one "
                        "of them")
    return given or accelerate
