"""Explain a user's accelerate config YAML in plain sentences (pure: a parsed mapping in, sentences out)."""

from __future__ import annotations

from typing import Any

from dsbench.configs.accelerate import (
    DEFAULT_ZERO_STAGE,
    as_int,
    ds_config_file,
    dynamo_backend,
    machine_count,
    section_keys,
    size_of,
    starts_one_process,
    ulysses_degree,
    world_size,
)
from dsbench.configs.accelerate_megatron import explain as megatron_explain
from dsbench.configs.autofill import CLIP_DEFAULT

_ENGINES = {
    "MULTI_GPU": "plain data parallelism (torch DDP): every process holds the whole model, optimizer and "
                 "gradients; gradients are all-reduced each step",
    "MULTI_CPU": "plain data parallelism on CPUs (torch DDP over gloo): every process holds the whole model",
    "NO": "one process, no distribution",
}


def explain(config: dict[str, Any], ds_lines: list[str] | None = None) -> list[str]:
    """Plain sentences for what ``accelerate launch --config_file`` does with ``config``. ``ds_lines``: the
    explanation of the referenced DeepSpeed file, when it could be read."""
    kind = config.get("distributed_type")
    processes = world_size(config)
    lines = [_processes_line(config, kind, processes)]
    if config.get("use_cpu") is True and kind in ("DEEPSPEED", "FSDP"):
        lines.append(f"use_cpu: true: accelerate skips {kind} and runs plain multi-CPU data parallelism")
    if kind == "DEEPSPEED":
        lines += _explain_deepspeed(config, ds_lines)
    elif kind == "FSDP":
        lines += _explain_fsdp(config)
    elif kind == "MEGATRON_LM":
        lines += megatron_explain(config)
    else:
        lines.append(_ENGINES.get(str(kind), f"distributed_type {kind}"))
    precision = str(config.get("mixed_precision") or "no")
    if kind == "DEEPSPEED" and not ds_config_file(config):
        lines.append({"bf16": "precision: bf16 (DeepSpeed's bf16 section: bf16 weights, activations and "
                      "gradients; fp32 master weights in the optimizer)", "fp16": "precision: fp16 with DeepSpeed's "
                      "dynamic loss scaling; fp32 master weights"}.get(precision, f"precision: {precision}"
                                                                      if precision != "no" else "precision: fp32"))
    elif kind == "MEGATRON_LM":  # Megatron's --bf16/--fp16: 16-bit model, fp32 main weights in its optimizer
        lines.append(f"precision: {precision} weights, activations and gradients, fp32 main weights in Megatron's "
                     f"optimizer{' with dynamic loss scaling' * (precision == 'fp16')}" if precision in ("bf16", "fp16")
                     else f"precision: {'fp32' if precision == 'no' else precision}")
    elif kind == "FSDP" and precision in ("bf16", "fp16"):  # accelerate's set_mixed_precision and native_amp
        lines.append(f"precision: {precision} autocast around the forward; FSDP gathers the weights and reduces the "
                     f"gradients in {precision} (accelerate's mixed-precision policy); fp32 shards and optimizer")
    elif kind != "DEEPSPEED":
        lines.append({"bf16": "precision: bf16 autocast around the forward; fp32 weights and optimizer",
                      "fp16": "precision: fp16 autocast with a gradient scaler; fp32 weights and optimizer",
                      "fp8": "precision: fp8 (needs Transformer Engine, MS-AMP or torchao)"}
                     .get(precision, "precision: fp32"))
    return lines + _compilation(config)


def _compilation(config: dict[str, Any]) -> list[str]:
    backend = dynamo_backend(config)
    if not backend:
        return []
    dynamo = section_keys(config, "dynamo_config")
    regional = dynamo.get("dynamo_use_regional_compilation") is True
    return [f"compilation: accelerate torch.compiles the {'transformer blocks' if regional else 'model'} "
            f"(dynamo backend {backend}, mode {dynamo.get('dynamo_mode') or 'default'}) as it prepares it"]


def _explain_deepspeed(config: dict[str, Any], ds_lines: list[str] | None) -> list[str]:
    from dsbench.configs.explain import _STAGES

    ds = section_keys(config, "deepspeed_config")
    launcher = ds.get("deepspeed_multinode_launcher")
    lines = ["engine: DeepSpeed" + (f" (nodes started with its {launcher} launcher)" if launcher and
                                    machine_count(config) > 1 else "")]
    sp = ulysses_degree(config)
    if sp > 1:  # accelerate 1.15 Accelerator._prepare_deepspeed: UlyssesSPAttentionHF over sp consecutive ranks
        processes = world_size(config)
        groups = f"; {processes // sp} such groups train on different data" if processes else ""
        lines.append(f"sequence parallelism (parallelism_config sp_size {sp}): DeepSpeed Ulysses (ALST) over {sp} "
                     f"consecutive processes: each holds 1/{sp} of every sequence, and an all-to-all around attention "
                     f"gives it the whole sequence for 1/{sp} of the heads{groups}")
    if ds.get("deepspeed_config_file"):
        lines.append(f"every DeepSpeed setting comes from {ds['deepspeed_config_file']} (accelerate fills its "
                     "\"auto\" values from the training script)")
        return lines + (ds_lines or [f"{ds['deepspeed_config_file']} could not be read, so its contents are not "
                                     "explained"])
    stage = ds.get("zero_stage", DEFAULT_ZERO_STAGE)
    lines.append(_STAGES.get(stage, f"zero_stage {stage}") + ("" if "zero_stage" in ds else
                                                              " (no zero_stage: accelerate's default)"))
    for what, label in (("optimizer", "optimizer states (and the optimizer step, DeepSpeedCPUAdam)"),
                        ("param", "parameters")):
        device = ds.get(f"offload_{what}_device", "none")
        if device != "none":
            where = "CPU RAM" if device == "cpu" else f"NVMe under {ds.get(f'offload_{what}_nvme_path')}"
            lines.append(f"{label} offloaded to {where}")
    accumulation = ds.get("gradient_accumulation_steps", 1)
    lines.append(f"batch: the script's per-process batch x {accumulation} accumulation step(s) x the process count"
                 " per optimizer step")
    if ds.get("gradient_clipping"):
        lines.append(f"gradients clipped to global norm {ds['gradient_clipping']}")
    elif ds.get("gradient_clipping") == 0 and ds.get("gradient_clipping") is not False:
        lines.append(f"gradients clipped to global norm {CLIP_DEFAULT}: accelerate drops a gradient_clipping of 0, and "
                     "DeepSpeed clips at its default")  # accelerate_values._clipping_off
    if stage == 3 and ds.get("zero3_init_flag"):
        lines.append("zero3_init_flag: the model is built already partitioned (deepspeed.zero.Init), so no "
                     "process ever holds it whole")
    return lines


def _explain_fsdp(config: dict[str, Any]) -> list[str]:
    fsdp = section_keys(config, "fsdp_config")
    version = fsdp.get("fsdp_version", 1)
    if version == 2:
        reshard = fsdp.get("fsdp_reshard_after_forward", True)
        shard = ("parameters, gradients and optimizer states sharded; parameters re-gathered for the backward "
                 "(like ZeRO-3)" if reshard else "parameters kept gathered between forward and backward "
                 "(like ZeRO-2: gradients and optimizer states sharded)")
    else:
        strategy = str(fsdp.get("fsdp_sharding_strategy", "FULL_SHARD")).upper()
        shard = {"FULL_SHARD": "parameters, gradients and optimizer states sharded (like ZeRO-3)",
                 "SHARD_GRAD_OP": "gradients and optimizer states sharded, parameters gathered (like ZeRO-2)",
                 "NO_SHARD": "nothing sharded (like DDP)",
                 "HYBRID_SHARD": "sharded within a machine, replicated across machines"}.get(strategy, strategy)
    # accelerate runs FSDP1 with torch's FullyShardedDataParallel wrapper and FSDP2 with fully_shard; dsbench's worker
    # runs both with fully_shard (configs/accelerate_worker.py: FSDP1's strategy as torch's migration notes map it)
    engine = ("FSDP2 (torch fully_shard)" if version == 2 else "FSDP1 (torch FullyShardedDataParallel under "
              "accelerate; dsbench's worker runs its settings with FSDP2's fully_shard)")
    lines = [f"engine: {engine}: {shard}"]
    sizes = {key: as_int(value) for key, value in section_keys(config, "parallelism_config").items()}
    replicas = size_of(sizes, "dp_replicate_size")
    if replicas > 1:  # accelerate's ParallelismConfig: HSDP (dsbench launch --strategy fsdp --dp-shard S)
        group = size_of(sizes, "dp_shard_size")
        lines.append(f"HSDP (parallelism_config): each group of {group} processes shards one copy, {replicas} "
                     "groups keep copies; gradients reduce-scattered within a group, then all-reduced across them")
    policy = fsdp.get("fsdp_auto_wrap_policy", "NO_WRAP")
    unit = {"TRANSFORMER_BASED_WRAP": f"each {fsdp.get('fsdp_transformer_layer_cls_to_wrap') or 'decoder layer'} "
            "is one shard unit", "SIZE_BASED_WRAP": f"modules over {fsdp.get('fsdp_min_num_params')} parameters "
            "are shard units"}.get(str(policy).upper(), "the whole model is one shard unit")
    lines.append(f"wrapping: {unit}")
    if fsdp.get("fsdp_offload_params"):
        lines.append("parameters (and the optimizer step) offloaded to CPU RAM")
    if fsdp.get("fsdp_activation_checkpointing"):
        lines.append("activation checkpointing on every shard unit")
    lines.append(f"checkpoints saved as {fsdp.get('fsdp_state_dict_type', 'FULL_STATE_DICT')}")
    return lines


def _processes_line(config: dict[str, Any], kind: Any, processes: int | None) -> str:
    machines = machine_count(config)
    if starts_one_process(config):
        return (f"`accelerate launch` starts one process, not {processes}: MULTI_CPU runs several only through "
                "mpirun (mpirun_config.mpirun_hostfile); `dsbench launch` refuses it (MULTI_GPU runs as CPU ranks "
                "over gloo where there is no GPU)")
    if processes:
        per = f" ({processes // machines} per machine)" if machines > 1 and processes % machines == 0 else ""
        where = (f"; machine 0 at {config.get('main_process_ip')}:{config.get('main_process_port', 29500)}"
                 if machines > 1 else "")
        return f"`accelerate launch` starts {processes} process(es) on {machines} machine(s){per}{where}"
    return (f"the process count is not in the file: `accelerate launch --num_processes N` sets it "
            f"({machines} machine(s))")
