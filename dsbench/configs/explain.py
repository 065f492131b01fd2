"""Describe in plain words what a DeepSpeed config does (pure)."""

from __future__ import annotations

from typing import Any

from dsbench.configs.autofill import CLIP_DEFAULT
from dsbench.configs.batch import BATCH_KEYS, config_batch
from dsbench.configs.diagnostics import explain_diagnostics
from dsbench.configs.inert_check import check_inert
from dsbench.configs.layout import data_parallel_size, parallel_degrees
from dsbench.configs.overrides import get_path
from dsbench.configs.pipeline import pipeline_settings
from dsbench.configs.precision import autocast_dtype, config_precision, data_type
from dsbench.configs.scheduler_check import known_scheduler, scheduler_name, warmup_curve
from dsbench.zero_section import zero_settings

_STAGES = {
    0: "ZeRO disabled: every rank holds the full parameters, gradients and optimizer states; gradients are "
       "all-reduced each step (plain data parallelism)",
    1: "ZeRO-1: optimizer states are partitioned across the data-parallel ranks; parameters and gradients are "
       "replicated, gradients all-reduced",
    2: "ZeRO-2: optimizer states and gradients are partitioned (reduce-scatter instead of all-reduce); parameters "
       "are replicated",
    3: "ZeRO-3: parameters, gradients and optimizer states are all partitioned; each layer's parameters are "
       "all-gathered just before its forward and backward and released after",
}


def _offload_line(config: dict[str, Any], section: str, what: str, device: str, ratio: float = 1.0) -> str | None:
    if device == "none":
        return None
    nvme_path = get_path(config, f"zero_optimization.{section}.nvme_path")
    where = "CPU RAM" if device == "cpu" else f"NVMe files under {nvme_path}"
    pinned = " (pinned host memory)" if get_path(config, f"zero_optimization.{section}.pin_memory") else ""
    extra = "; the optimizer step runs on the CPU (DeepSpeedCPUAdam)" if section == "offload_optimizer" else ""
    if ratio < 1:  # ZeRO-3's partial offload: the last sub-groups on the host, the others on the device
        extra = (f"; only {ratio:.0%} of them (offload_optimizer.ratio {ratio:g}): those sub-groups step on the CPU "
                 "(DeepSpeedCPUAdam), the rest stay and step on the device")
    return f"{what} offloaded to {where}{pinned}{extra}"


def _value(value: Any) -> Any:
    """A value as explained: "auto" says who fills it."""
    return "'auto' (the HF Trainer's, or dsbench's worker's, from its arguments)" if value == "auto" else value


def _batch_line(config: dict[str, Any], world_size: int | None) -> str:
    batch = config_batch(config, world_size) if world_size else None
    if batch is not None:  # on a world size, what DeepSpeed derives for the keys the config leaves out
        tb, mb, ga = (f"{value}{'' if get_path(config, key) is not None else ' (derived)'}"
                      for key, value in zip(BATCH_KEYS, (batch.train, batch.micro, batch.accum), strict=True))
        return (f"batch: {mb} samples per rank per micro-step x {ga} accumulation steps x "
                f"{data_parallel_size(config, world_size)} data-parallel ranks = {tb} samples per optimizer step")
    tb, mb, ga = (get_path(config, k) for k in BATCH_KEYS)
    if "auto" in (tb, mb, ga):
        return ("batch: 'auto', the HF Trainer's (per-device batch x accumulation x data-parallel ranks) or dsbench's "
                "worker's (--micro-batch x --grad-accum x ranks)")
    dp: Any = data_parallel_size(config, world_size) if world_size else "the"
    return (f"batch: {mb if mb is not None else '(derived)'} samples per rank per micro-step x "
            f"{ga if ga is not None else '(derived)' if tb is not None and mb is not None else 1} accumulation steps x "
            f"{dp} data-parallel ranks = {tb if tb is not None else '(derived)'} samples per optimizer step")


def _precision_line(config: dict[str, Any]) -> str:
    precision = config_precision(config)
    # DeepSpeed keeps the gradients in fp32 then, at every ZeRO stage (tests/unit/test_autocast_config.py)
    grads = ", fp32 gradients (data_types.grad_accum_dtype)" if data_type(config, "grad_accum_dtype") == "fp32" else ""
    if precision == "bf16":
        return f"precision: bf16 weights and activations{grads}, fp32 master weights and optimizer states"
    if precision == "fp16":
        scale = get_path(config, "fp16.loss_scale", 0)
        kind = "dynamic loss scaling" if not scale else f"static loss scale {scale}"
        return f"precision: fp16 with {kind}{grads}, fp32 master weights and optimizer states"
    if precision == "auto":
        return "precision: 'auto' (decided by the HF Trainer's --fp16/--bf16, or dsbench's worker's --precision)"
    autocast = autocast_dtype(config)
    if autocast:  # DeepSpeed's torch_autocast: configs/precision.autocast_dtype
        return (f"precision: {autocast} autocast around the forward (torch_autocast) over fp32 weights and optimizer "
                f"states; the Linear layers' gradients reduced (under ZeRO-3 their weights gathered too) in {autocast}")
    return "precision: fp32"


def explain(config: dict[str, Any], world_size: int | None = None) -> list[str]:
    """Plain-language lines describing the config."""
    zero = zero_settings(config)  # explain's callers refuse an invalid config first (load_valid_config)
    lines = [_STAGES[zero.stage]]
    lines += [line for line in (_offload_line(config, "offload_optimizer", "optimizer states", zero.offload,
                                              zero.offload_ratio),
                                _offload_line(config, "offload_param", "parameters", zero.offload_param)) if line]
    lines += _zero_plus_plus(config) if zero.stage == 3 else []
    pp, tp = parallel_degrees(config)
    if pp > 1:
        _, method, interval = pipeline_settings(config)
        every = f", activation checkpoint every {interval} layer(s)" if interval else ""
        lines.append(f"pipeline: {pp} stages (PipelineModule), partition method {method!r}{every}; "
                     f"{get_path(config, 'gradient_accumulation_steps', 1)} micro-batch(es) per step")
    if tp > 1:
        lines.append(f"tensor parallel: AutoTP splits linear layers over {tp} ranks")
    lines.append(_batch_line(config, world_size))
    lines.append(_precision_line(config))
    opt = get_path(config, "optimizer.type")
    lines.append(f"optimizer: {opt}, lr {_value(get_path(config, 'optimizer.params.lr', '(default)'))}" if opt else
                 "optimizer: none named, so the training script brings its own (the HF Trainer its AdamW, dsbench's "
                 "worker the AdamW it renders)")
    schedule = _schedule_line(config)
    if schedule:
        lines.append(schedule)
    clip = get_path(config, "gradient_clipping")
    if clip is None:
        lines.append(f"gradient clipping: global norm {CLIP_DEFAULT:g}, DeepSpeed's default where the config leaves "
                     "gradient_clipping out")
    elif clip:
        lines.append(f"gradient clipping: global norm {_value(clip)}")
    if check_inert(config):
        lines.append("activation_checkpointing: no effect under DeepSpeed's engine, the HF Trainer or accelerate "
                     "(only a script's own deepspeed.checkpointing.configure reads it)")
    if get_path(config, "compile.deepcompile") is True:  # deepspeed 0.19.8 engine.py forward: is_deepcompile_active
        lines.append("compile.deepcompile: DeepSpeed's DeepCompile, active once the script calls engine.compile() "
                     "(dsbench launch --compile; accelerate when its dynamo backend is set); until then the engine "
                     "runs eager and says so once")
    return lines + explain_diagnostics(config)


def _zero_plus_plus(config: dict[str, Any]) -> list[str]:
    """ZeRO++'s three switches, as its paper names them (Wang et al. 2023, "ZeRO++", sections 3.1-3.3)."""
    zero = zero_settings(config)
    said = {"zero_quantized_weights": "qwZ: the weights all-gathered in int8, quantized block by block "
                                      "(zero_quantized_weights)",
            "zero_hpz_partition_size": f"hpZ: a second copy of the parameters partitioned over groups of {zero.hpz} "
                                       "ranks, so that the backward's all-gathers stay inside such a group, a node "
                                       "(zero_hpz_partition_size)",
            "zero_quantized_gradients": "qgZ: the gradients reduce-scattered in int4 by all-to-all, within then "
                                        "across nodes (zero_quantized_gradients)"}
    return [f"ZeRO++: {'; '.join(said[key] for key in zero.zeropp)}"] if zero.zeropp else []


WARMUPS = ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR")
OPTIMIZERS_LR = "the optimizer's lr"


def _schedule_line(config: dict[str, Any]) -> str | None:
    """The LR schedule in plain words, for DeepSpeed's warm-up schedulers: each value as the config states it, else
    the class's default from its signature (the schema; DeepSpeed 0.19.8 runtime/lr_schedules.py), labelled so."""
    name, found = scheduler_name(config), known_scheduler(config)
    if name is None:
        return None
    if name not in WARMUPS or found is None:
        return f"scheduler: {name}"
    _, how, params = found

    def said(key: str) -> str:
        if key in params:
            return "'auto'" if params[key] == "auto" else str(params[key])
        if key not in how["defaults"]:
            return "(not set: DeepSpeed stops)"
        default = how["defaults"][key]
        return f"{OPTIMIZERS_LR if default is None else default} (DeepSpeed's default)"

    drawn = warmup_curve(params, how["defaults"].get("warmup_type"))
    stated = params.get("warmup_type")
    curve = f"a {drawn} curve" + ("" if stated == drawn else " (DeepSpeed's default)" if stated is None else
                                  f" (DeepSpeed's, for the {stated!r} it does not know)")
    rise = f"over {said('warmup_num_steps')} optimizer steps on {curve}"
    auto = "; 'auto': filled by the HF Trainer or dsbench's worker" if "auto" in params.values() else ""
    if name == "WarmupCosineLR":
        return (f"scheduler: WarmupCosineLR: the optimizer's lr times a ratio rising from {said('warmup_min_ratio')} "
                f"to 1 {rise}, then a cosine down to {said('cos_min_ratio')} of it at step "
                f"{said('total_num_steps')}{auto}")
    then = "then held" if name == "WarmupLR" else f"then down linearly to 0 at step {said('total_num_steps')}"
    return (f"scheduler: {name}: the LR rises from {said('warmup_min_lr')} to {said('warmup_max_lr')} {rise}, "
            f"{then}{auto}")

