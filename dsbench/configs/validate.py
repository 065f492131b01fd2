"""Validate a DeepSpeed config: the checks DeepSpeed lacks, then DeepSpeed's own parser.

Every check is a pure function ``config -> list[Finding]``. :func:`validate` runs them all and collects every
problem (never only the first). DeepSpeed's own ``DeepSpeedConfig`` is applied last, lazily imported, with its world
size patched to the data-parallel size being checked (see :mod:`dsbench.configs.deepspeed_check`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from dsbench.configs.autofill import AutoInputs, auto_paths, resolve_value
from dsbench.configs.batch import BATCH_KEYS, checked_twice, derive_batch
from dsbench.configs.device_ops import rank_findings
from dsbench.configs.diagnostics import check_diagnostics
from dsbench.configs.engine_checks import check_engine
from dsbench.configs.findings import Finding
from dsbench.configs.inert_check import check_inert
from dsbench.configs.layout import int_or_none, layout_of, parallel_degrees, ulysses_degree
from dsbench.configs.optimizer_check import check_optimizer
from dsbench.configs.overrides import get_path
from dsbench.configs.pipeline import pipeline_settings
from dsbench.configs.precision import autocast_findings, bf16_enabled, fp16_enabled
from dsbench.configs.reduction_check import check_reduction
from dsbench.configs.scheduler_check import check_schedule, check_scheduler
from dsbench.configs.schema import unknown_keys
from dsbench.configs.types import check_types
from dsbench.errors import UserError
from dsbench.parallel import ParallelDims, bubble_fraction
from dsbench.zero_section import stage_as_read, zero_settings

WARMUP_SCHEDULERS = ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR")


@dataclass(frozen=True, kw_only=True, slots=True)
class ValidateContext:
    """What the config is checked against."""

    world_size: int | None = None
    """Total ranks; ``None`` checks only what holds for every world size."""
    allow_auto: bool = False
    """Downgrade unresolved "auto" values to warnings (for configs meant for the HF Trainer)."""
    layout: ParallelDims | str | None = None
    """The layout on ``world_size`` ranks, or why the degrees cannot lay them out, worked out once (layout_of)."""
    cpu_ranks: bool = False
    """The ranks are CPU processes (a launch on a machine without GPUs): what they cannot run is an error."""
    ranks_here: bool = False
    """The ranks run on this machine, in this environment: a package a monitor imports must be here."""


def _layout(config: dict[str, Any], ctx: ValidateContext) -> ParallelDims | str | None:
    """The context's layout (a check called on its own works it out), None without a world size."""
    if ctx.world_size is None:
        return None
    return ctx.layout if ctx.layout is not None else layout_of(config, ctx.world_size)


def _data_parallel_size(config: dict[str, Any], ctx: ValidateContext) -> int | None:
    """The ranks DeepSpeed's batch arithmetic counts (:meth:`ParallelDims.deepspeed_batch_ranks`), or None."""
    found = _layout(config, ctx)
    return found.deepspeed_batch_ranks() if isinstance(found, ParallelDims) else None


def check_parallel_degrees(config: dict[str, Any], ctx: ValidateContext) -> list[Finding]:
    """Tensor/pipeline degrees must divide the world size."""
    problem = _layout(config, ctx)
    if not isinstance(problem, str):
        return []
    pp, tp = parallel_degrees(config)
    sp = ulysses_degree(config)
    path = "sequence_parallel_size" if sp > 1 else "tensor_parallel.autotp_size" if tp > 1 else "pipeline.stages"
    return [Finding(severity="error", code="degree-not-dividing", path=path, message=problem,
                    fix=f"use a world size that is a multiple of {pp * tp * sp}, or change {path}")]


def check_batch(config: dict[str, Any], ctx: ValidateContext) -> list[Finding]:
    """train_batch_size = micro x grad_accum x data-parallel size, derived as DeepSpeed derives it.

    Mirrors ``DeepSpeedConfig._set_batch_related_parameters`` + ``_batch_assertion``
    (deepspeed/runtime/config.py): missing values are derived with integer division, then the
    product is asserted, so e.g. train 10, micro 3 on 2 ranks derives grad_accum 1 and fails.
    """
    values = {k: get_path(config, k) for k in BATCH_KEYS}
    bad = [Finding(severity="error", code="batch-type", path=k,
                   message=f"must be a positive integer, got {json.dumps(v)}", fix=f"set {k} to an integer >= 1")
           for k, v in values.items() if v is not None and v != "auto" and (int_or_none(v) or 0) < 1]
    if bad:
        return bad
    tb, mb, ga = (int_or_none(values[k]) for k in BATCH_KEYS)
    if "auto" in values.values():
        return []  # reported by check_auto, with what each would resolve to
    if tb is None and mb is None:
        return [Finding(severity="error", code="batch-missing", path="train_batch_size",
                        message="neither train_batch_size nor train_micro_batch_size_per_gpu is set",
                        fix="set train_micro_batch_size_per_gpu (and gradient_accumulation_steps)")]
    if ctx.world_size is None:
        return _batch_without_world(tb, mb, ga)
    if (dp := _data_parallel_size(config, ctx)) is None:
        return []  # check_parallel_degrees reports it
    derived = derive_batch(tb, mb, ga, dp)
    tb2, mb2, ga2 = derived.train, derived.micro, derived.accum
    if tb2 == mb2 * ga2 * dp and mb2 > 0 and ga2 > 0:
        return []
    return [Finding(severity="error", code="batch-mismatch", path="train_batch_size",
                    message=f"train_batch_size {tb2} != micro {mb2} x grad_accum {ga2} x data-parallel {dp} "
                            f"= {mb2 * ga2 * dp} (world {ctx.world_size}"
                            + (f" / {ctx.world_size // dp} pipeline stages)" if dp != ctx.world_size else ")")
                            + (" (DeepSpeed counts AutoTP ranks here)" if parallel_degrees(config)[1] > 1 else ""),
                    fix=_batch_fix(tb, mb, ga, dp))]


def _batch_fix(tb: int | None, mb: int | None, ga: int | None, dp: int) -> str:
    """The train_batch_size values DeepSpeed takes beside the keys given: all three, their product; else a multiple
    of the given factors x the data-parallel ranks (``derive_batch`` derives the rest), the two nearest named."""
    if mb is not None and ga is not None:
        return f"set train_batch_size to {mb * ga * dp}, or drop it and let DeepSpeed derive it"
    step = (mb or 1) * (ga or 1) * dp
    below = max(step, (tb or 0) // step * step)
    named = f"a multiple of {step} ({below} or {below + step})"
    return f"set train_batch_size to {named}, or drop it and let DeepSpeed derive it" if mb else f"make it {named}"


def _batch_without_world(tb: int | None, mb: int | None, ga: int | None) -> list[Finding]:
    """Without a world size, all three given must imply a whole data-parallel size."""
    if tb is None or mb is None or ga is None or tb % (mb * ga) == 0:
        return []
    return [Finding(severity="error", code="batch-mismatch", path="train_batch_size",
                    message=f"train_batch_size {tb} is not a multiple of micro {mb} x grad_accum {ga} = {mb * ga}, "
                            "so no data-parallel size satisfies train = micro x accum x dp",
                    fix=f"set train_batch_size to a multiple of {mb * ga}")]


def check_combinations(config: dict[str, Any], ctx: ValidateContext) -> list[Finding]:
    """Combinations DeepSpeed ignores silently (warning) or rejects late (error)."""
    out: list[Finding] = []
    zero = zero_settings(config)
    stage, opt_dev, par_dev = zero.stage, zero.offload, zero.offload_param
    if stage_as_read(config):  # a stage DeepSpeed would not run as written is check_types' error, not a combination
        out += _offload_combinations(config, stage, opt_dev, par_dev)
    zeropp = zero.zeropp
    if zeropp and stage < 3:
        out.append(Finding(severity="warning", code="zeropp-below-zero3", path=f"zero_optimization.{zeropp[0]}",
                           message=f"ZeRO++ settings ({', '.join(zeropp)}) only act at ZeRO stage 3; at stage "
                                   f"{stage} they are ignored",
                           fix="set zero_optimization.stage to 3, or delete them"))
    if fp16_enabled(config) and bf16_enabled(config):
        out.append(Finding(severity="error", code="fp16-and-bf16", path="bf16.enabled",
                           message="fp16 and bf16 are both enabled; DeepSpeed asserts at start-up",
                           fix="enable only one of fp16.enabled / bf16.enabled"))
    warmup = int_or_none(get_path(config, "scheduler.params.warmup_num_steps"))
    if get_path(config, "scheduler.type") in WARMUP_SCHEDULERS and warmup is not None and warmup < 2:
        zero = warmup < 1
        out.append(Finding(severity="error" if zero else "warning", code="warmup-below-2",
                           path="scheduler.params.warmup_num_steps",
                           message=f"DeepSpeed raises ValueError for warmup_num_steps {warmup}" if zero else
                           "DeepSpeed raises warmup_num_steps 1 to 2 (runtime/lr_schedules.py), so step 1 runs at "
                           "warmup_min_lr and makes no update",
                           fix="delete the scheduler for a constant LR, or use warmup_num_steps >= 2"))
    if checked_twice(config) and "train_batch_size" in config:
        out.append(Finding(severity="warning", code="autotp-zero3-train-batch", path="train_batch_size",
                           message=f"AutoTP (autotp_size {parallel_degrees(config)[1]}) with ZeRO-3: DeepSpeed 0.19.8 "
                                   "checks train_batch_size against every rank at start-up, then against the "
                                   "data-parallel ranks (world / autotp_size) when ZeRO-3 partitions the parameters, "
                                   "so no value passes both (dsbench's worker leaves it out)",
                           fix="delete train_batch_size and set train_micro_batch_size_per_gpu: DeepSpeed derives it"))
    out += _pipeline_combinations(config, stage, opt_dev)
    return out


def _offload_combinations(config: dict[str, Any], stage: int, opt_dev: Any, par_dev: Any) -> list[Finding]:
    """Offloads that ZeRO's stage ignores, NVMe below stage 3 (kept in CPU RAM), NVMe without a folder."""
    out: list[Finding] = []
    if par_dev not in (None, "none") and stage < 3:
        out.append(Finding(severity="warning", code="offload-param-below-zero3", path="zero_optimization.offload_param",
                           message=f"parameter offload to {par_dev} is ignored at ZeRO stage {stage}: only stage 3 "
                                   "partitions (and so offloads) parameters",
                           fix="set zero_optimization.stage to 3, or delete offload_param"))
    if opt_dev not in (None, "none") and stage == 0:
        out.append(Finding(severity="warning", code="offload-optimizer-zero0",
                           path="zero_optimization.offload_optimizer",
                           message="optimizer offload is ignored at ZeRO stage 0",
                           fix="set zero_optimization.stage to 1, 2 or 3, or delete offload_optimizer"))
    if opt_dev == "nvme" and stage in (1, 2):
        out.append(Finding(severity="warning", code="nvme-optimizer-below-zero3",
                           path="zero_optimization.offload_optimizer.device",
                           message=f"NVMe optimizer offload at ZeRO stage {stage} silently keeps optimizer states in "
                                   "CPU RAM (ZeRO-Infinity NVMe swapping needs stage 3)",
                           fix="use device 'cpu', or zero_optimization.stage 3"))
    for section, dev in (("offload_optimizer", opt_dev), ("offload_param", par_dev)):
        path = f"zero_optimization.{section}.nvme_path"
        if dev == "nvme" and stage == 3 and not get_path(config, path):
            out.append(Finding(severity="error", code="nvme-without-path", path=path,
                               message="NVMe offload needs a folder for its swap files; DeepSpeed fails at "
                                       "initialisation without one",
                               fix=f"set {path} to a folder on a fast local disk"))
    return out


def _pipeline_combinations(config: dict[str, Any], stage: int, opt_dev: Any) -> list[Finding]:
    """What DeepSpeed's pipeline engine rejects or wastes: ZeRO-2/3, a bad section, too few micro-batches,
    bf16 with optimizer offload."""
    out: list[Finding] = []
    pp, tp = parallel_degrees(config)
    if pp > 1 and stage >= 2:
        out.append(Finding(severity="error", code="pipeline-zero2", path="zero_optimization.stage",
                           message=f"pipeline parallelism ({pp} stages) with ZeRO stage {stage}: DeepSpeed's "
                                   "PipelineEngine asserts 'ZeRO-2 and ZeRO-3 are incompatible with pipeline "
                                   "parallelism' at initialisation",
                           fix="use zero_optimization.stage 0 or 1 with a pipeline"))
    if pp > 1 and tp > 1:
        # deepspeed 0.19.8: the pipeline engine runs AutoTP on its PipelineModule, where module_inject/auto_tp.py
        # finds no model policy ("Not able to determine model policy automatically"; seen on 4 CPU ranks)
        out.append(Finding(severity="error", code="pipeline-autotp", path="tensor_parallel.autotp_size",
                           message=f"pipeline parallelism ({pp} stages) with AutoTP (autotp_size {tp}): DeepSpeed's "
                                   "AutoTP finds no model policy in the pipeline engine's layers and stops every rank",
                           fix="drop tensor_parallel or pipeline; dsbench's torch_3d strategy runs tensor x pipeline "
                               "parallelism"))
    if pp > 1:
        try:
            pipeline_settings(config)
        except UserError as exc:
            out.append(Finding(severity="error", code="pipeline-section", path="pipeline", message=str(exc),
                               fix="see docs/parallelism.md for the pipeline keys dsbench's worker reads"))
    micro_batches = int_or_none(get_path(config, "gradient_accumulation_steps"))
    if pp > 1 and micro_batches is not None and 1 <= micro_batches < pp:  # below 1: the type check's own error
        out.append(Finding(severity="warning", code="pipeline-bubble", path="gradient_accumulation_steps",
                           message=f"{micro_batches} micro-batch(es) for {pp} pipeline stages: each stage idles "
                                   f"(P-1)/(M+P-1) = {bubble_fraction(pp, micro_batches):.0%} of a step",
                           fix=f"set gradient_accumulation_steps (the micro-batches per step) to at least {pp}"))
    if pp > 1 and bf16_enabled(config) and opt_dev not in (None, "none"):
        out.append(Finding(severity="error", code="pipeline-bf16-offload",
                           path="zero_optimization.offload_optimizer.device",
                           message=f"pipeline parallelism ({pp} stages) with bf16 and optimizer offload to {opt_dev}: "
                                   "DeepSpeed's pipeline engine fails in its bf16 optimizer step (DeepSpeed#3866)",
                           fix="drop the offload, or train in fp16/fp32 with the pipeline"))
    return out + _pipeline_clip(config, pp, stage)


def _pipeline_clip(config: dict[str, Any], pp: int, stage: int) -> list[Finding]:
    """DeepSpeed 0.19.8's fp32 ZeRO-0 pipeline clips by the first stage's gradient norm alone
    (dsbench/worker/engines/pipe_clip.py says how, and how it was found)."""
    clip = get_path(config, "gradient_clipping")
    clips = clip == "auto" or (isinstance(clip, (int, float)) and not isinstance(clip, bool) and clip > 0)
    if pp < 2 or stage != 0 or not clips or fp16_enabled(config) or bf16_enabled(config):
        return []
    return [Finding(severity="warning", code="pipeline-zero0-clip", path="gradient_clipping",
                    message=f"pipeline parallelism ({pp} stages) at ZeRO stage 0 in fp32 with gradient_clipping "
                            f"{clip}: DeepSpeed clips by the gradient norm of the first stage alone "
                            "(runtime/utils.clip_grad_norm_ counts a gradient on model-parallel rank 0 only, and "
                            "the stages are the model-parallel ranks); dsbench's worker clips by the whole model's",
                    fix="with another training script, use zero_optimization.stage 1 (what dsbench renders when "
                        "no stage is named) or gradient_clipping 0")]


def check_auto(config: dict[str, Any], ctx: ValidateContext) -> list[Finding]:
    """"auto" is filled only by the HF Trainer / accelerate; plain DeepSpeed 0.19.8 stops on a batch key's and its
    pydantic sections take their default for theirs (runtime/config_utils.py: reduce_bucket_size "auto" is 5e8)."""
    dp = _data_parallel_size(config, ctx)
    _, mb, ga = (int_or_none(get_path(config, key)) for key in BATCH_KEYS)  # train, micro, accumulation
    # HF TrainingArguments defaults: per_device_train_batch_size 8, accumulation 1, learning_rate 5e-5
    inputs = AutoInputs(micro_batch=mb or 8, grad_accum=ga or 1, data_parallel_size=dp, lr=5e-5, train_steps=None)
    out = []
    for path in auto_paths(config):
        value = resolve_value(path, inputs)
        would = f"; with TrainingArguments defaults it becomes {json.dumps(value)}" if value is not None else ""
        message, fix = ((f"'auto', left for the HF Trainer, accelerate or `dsbench launch --config` to fill{would}",
                         "set a value to run it under plain `deepspeed`") if ctx.allow_auto else
                        (f"'auto' is filled only by the HF Trainer/accelerate; plain DeepSpeed stops on it or quietly "
                         f"uses its own default{would}", "set a value, render with `dsbench render --model NAME`, or "
                         "--allow-auto if the Trainer fills it"))
        out.append(Finding(severity="warning" if ctx.allow_auto else "error", code="unresolved-auto", path=path,
                           message=message, fix=fix, becomes="" if value is None else json.dumps(value)))
    return out


def check_structure(config: Any) -> list[Finding]:
    """The top level must be a JSON object."""
    return [] if isinstance(config, dict) else [Finding(
        severity="error", code="not-an-object", path="", fix="wrap the settings in { ... }",
        message=f"a DeepSpeed config is a JSON object, got {type(config).__name__}")]


def validate(config: Any, ctx: ValidateContext, deepspeed_check: bool = True) -> list[Finding]:
    """All findings for ``config``: dsbench's checks, then DeepSpeed's parser when importable."""
    if structural := check_structure(config):
        return structural
    if ctx.world_size is not None and ctx.layout is None:
        ctx = replace(ctx, layout=layout_of(config, ctx.world_size))  # the one layout every check reads
    findings = [*unknown_keys(config), *check_types(config, skip=BATCH_KEYS), *check_parallel_degrees(config, ctx),
                *check_batch(config, ctx), *check_combinations(config, ctx), *check_auto(config, ctx),
                *check_optimizer(config), *check_scheduler(config), *check_schedule(config), *check_reduction(config),
                *check_inert(config), *check_diagnostics(config), *rank_findings(config, ctx.cpu_ranks, ctx.ranks_here),
                *autocast_findings(config), *check_engine(config, ctx.world_size)]
    if deepspeed_check:
        from dsbench.configs.deepspeed_check import deepspeed_findings

        findings += deepspeed_findings(config, ctx.world_size, findings, ctx.layout)
    return findings
