"""Check a user's accelerate config YAML (pure: a parsed mapping in, findings out). What accelerate itself
accepts comes from ``dsbench/data/accelerate_schema.json`` (:func:`accelerate.schema`). The checks here are the ones
accelerate makes late (at launch, or inside the training process) or never (keys it copies and never reads, settings
it silently ignores). Findings use the DeepSpeed validator's format: severity, code, dotted path, message, fix.
"""

from __future__ import annotations

import re
from typing import Any

from dsbench.configs.accelerate import (
    as_int,
    did_you_mean,
    hsdp_mismatch,
    schema,
    section_keys,
    size_of,
    starts_one_process,
    unknown_setting_fix,
)
from dsbench.configs.accelerate_megatron import check as megatron_check
from dsbench.configs.accelerate_values import MAX_COUNT, inline_values
from dsbench.configs.findings import Finding
from dsbench.hostfile import is_valid_hostname

# FSDP1 settings that FSDP2 does not have (accelerate 1.15 utils/dataclasses.py,
# FullyShardedDataParallelPlugin.__post_init__: "is not supported in FSDP2" / "is obsolete in FSDP2" /
# "deprecated in favor of reshard_after_forward"; forward_prefetch raises). Under fsdp_version 2 they do nothing.
FSDP1_ONLY = {
    "fsdp_sharding_strategy": "use fsdp_reshard_after_forward: true (FULL_SHARD) or false (SHARD_GRAD_OP)",
    "fsdp_backward_prefetch": "delete it (FSDP2 always prefetches the next all-gather)",
    "fsdp_forward_prefetch": "delete it (not implemented in FSDP2)",
    "fsdp_use_orig_params": "delete it (FSDP2 always uses the original parameters)",
    "fsdp_sync_module_states": "delete it (FSDP2 does not need it)",
}
# An address left as in a template: xxx.xxx.xxx.xxx, <MASTER_IP>, ${IP}, "your-ip" ...
_PLACEHOLDER_ADDRESS = re.compile(r"^(x+\.){1,3}x+$|[<>{}$]|your|changeme|placeholder|master_?ip|ip_?addr",
                                  re.IGNORECASE)
# YAML 1.1 (PyYAML, which accelerate uses) reads a bare no/NO as the boolean false
_QUOTE_NO = "quote it, {key}: '{value}' (YAML reads a bare {value} as false)"


def _error(code: str, path: str, message: str, fix: str) -> Finding:
    return Finding(severity="error", code=code, path=path, message=message, fix=fix)


def _warning(code: str, path: str, message: str, fix: str) -> Finding:
    return Finding(severity="warning", code=code, path=path, message=message, fix=fix)


def check(config: dict[str, Any]) -> list[Finding]:
    """Every finding for an accelerate config (the referenced DeepSpeed file is checked by the caller)."""
    return [*_top_level(config), *_sections(config), *_processes(config), *_deepspeed(config), *_fsdp(config),
            *_hsdp(config), *megatron_check(config)]


def _top_level(config: dict[str, Any]) -> list[Finding]:
    s = schema()
    version = s["accelerate_version"]
    out = []
    for key in config:
        if key not in s["top"]:
            out.append(_error("unknown-key", key, f"accelerate {version} refuses the file at launch: no top-level "
                              f"key '{key}'", did_you_mean(key, s["top"])))
    kind = config.get("distributed_type")
    if kind is None:
        out.append(_error("missing-key", "distributed_type", "accelerate needs distributed_type (it raises "
                          "without it)", "set DEEPSPEED, FSDP, MULTI_GPU, MULTI_CPU or NO"))
    elif kind not in s["distributed_types"]:
        out.append(_error("bad-value", "distributed_type", f"{kind!r} is not one of accelerate's types "
                          f"({', '.join(s['distributed_types'])})", _QUOTE_NO.format(key="distributed_type", value="NO")
                          if kind is False else did_you_mean(str(kind), s["distributed_types"])))
    precision = config.get("mixed_precision")
    if precision is not None and precision not in s["precisions"]:
        out.append(_error("bad-value", "mixed_precision", f"{precision!r} is not one of {s['precisions']}",
                          _QUOTE_NO.format(key="mixed_precision", value="no") if precision is False
                          else "use no, fp16 or bf16"))
    if config.get("use_cpu") is True and kind in ("DEEPSPEED", "FSDP"):
        out.append(_warning("ignored", "use_cpu", f"use_cpu: true makes `accelerate launch` skip the {kind} "
                            "launcher: the run is plain multi-CPU data parallelism", "set use_cpu: false"))
    for section, owner in (("deepspeed_config", "DEEPSPEED"), ("fsdp_config", "FSDP"),
                           ("megatron_lm_config", "MEGATRON_LM")):
        if config.get(section) and kind is not None and kind != owner:
            out.append(_warning("ignored", section, f"ignored: distributed_type is {kind}, not {owner}",
                                f"delete {section}, or set distributed_type: {owner}"))
    return out


def _sections(config: dict[str, Any]) -> list[Finding]:
    """Keys of nested sections that name no accelerate setting: accelerate copies them and never reads them."""
    s = schema()
    out = []
    for section, spec in s["sections"].items():
        raw = config.get(section)
        if raw is None:
            continue
        if not isinstance(raw, dict):
            out.append(_error("bad-type", section, f"expected a mapping, found {type(raw).__name__}",
                              f"write {section} as indented `key: value` lines"))
            continue
        known = spec["keys"]
        for key in raw:
            applied = key if key.startswith(spec["prefix"]) else spec["prefix"] + key
            if applied not in known:
                out.append(_error("unknown-key", f"{section}.{key}", f"accelerate {s['accelerate_version']} has no "
                                  f"{section} setting '{key}': it is copied and never read",
                                  unknown_setting_fix(section, key, applied, known)))
    return out


def _processes(config: dict[str, Any]) -> list[Finding]:
    out = []
    processes, machines = config.get("num_processes"), config.get("num_machines", 1)
    for key, value, low in (("num_processes", processes, 1), ("num_machines", machines, 1),
                            ("machine_rank", config.get("machine_rank", 0), 0)):
        if value is not None and (as_int(value) is None or value < low) and not (key == "num_processes"
                                                                              and value == -1):
            out.append(_error("bad-value", key, f"{str(value)[:40]!r} is not a whole number >= {low}", f"set {key}"))
        elif as_int(value) is not None and value > MAX_COUNT:
            out.append(_error("bad-value", key, f"{value:,} is beyond any cluster (at most {MAX_COUNT:,})",
                              f"set {key} to the real count"))
    port = config.get("main_process_port")
    if port is not None and (as_int(port) is None or not 1 <= port <= 65535):
        out.append(_error("bad-value", "main_process_port", f"{port!r} is not a TCP port", "use 1..65535"))
    if any(f.severity == "error" for f in out):
        return out
    machines = machines or 1
    if processes not in (None, -1) and processes % machines:
        out.append(_error("process-count", "num_processes", f"{processes} processes do not split over {machines} "
                          "machines: num_processes is the total, num_machines x processes per machine",
                          f"set num_processes to {machines} x the GPUs per machine"))
    rank = as_int(config.get("machine_rank")) or 0
    if rank >= machines:
        out.append(_error("bad-value", "machine_rank", f"{rank} with {machines} machine(s): ranks are 0.."
                          f"{machines - 1}", "set machine_rank to this machine's index"))
    if starts_one_process(config):  # accelerate's simple_launcher prepends mpirun only for an mpirun hostfile
        out.append(_warning("ignored", "num_processes", f"MULTI_CPU with {processes} processes: `accelerate launch` "
                            "starts the script once, without mpirun", "use MULTI_GPU (accelerate starts CPU processes "
                            "through torchrun where there is no GPU), or set mpirun_config.mpirun_hostfile"))
    return out + (_machines(config, machines) if machines > 1 else [])


def _machines(config: dict[str, Any], machines: int) -> list[Finding]:
    """What several machines need of the file: machine 0's address, and a rank for each."""
    out = []
    address = config.get("main_process_ip")
    if address in (None, ""):
        out.append(_error("missing-key", "main_process_ip", f"{machines} machines and no main_process_ip: "
                          "the other machines cannot find machine 0", "set it to machine 0's address"))
    elif _PLACEHOLDER_ADDRESS.search(str(address)) or not is_valid_hostname(str(address)):
        out.append(_error("placeholder", "main_process_ip", f"{address!r} is a template placeholder, not an "
                          "address", "set machine 0's IP address or hostname"))
    if "machine_rank" not in config:
        out.append(_warning("missing-key", "machine_rank", f"{machines} machines and no machine_rank: every "
                            "machine would claim rank 0", "give each machine its own --machine_rank (or YAML)"))
    return out


def _deepspeed(config: dict[str, Any]) -> list[Finding]:
    if config.get("distributed_type") != "DEEPSPEED":
        return []
    ds = config.get("deepspeed_config")
    if not isinstance(ds, dict) or not ds:
        return [_warning("defaults", "deepspeed_config", "no deepspeed_config: accelerate runs its defaults "
                         "(ZeRO-2, no offload)", "set zero_stage etc., or deepspeed_config_file")]
    out = _beside_a_ds_file(config, ds) if ds.get("deepspeed_config_file") else []
    launcher = ds.get("deepspeed_multinode_launcher")
    launchers = schema()["deepspeed_multinode_launchers"]
    if launcher is not None and launcher not in launchers:
        out.append(_error("bad-value", "deepspeed_config.deepspeed_multinode_launcher", f"{launcher!r} is not one "
                          f"of {', '.join(launchers)}", did_you_mean(str(launcher), launchers)))
    stage = ds.get("zero_stage")
    zero3_only = [k for k in ("zero3_init_flag", "zero3_save_16bit_model") if ds.get(k) is True]
    if zero3_only and stage != 3 and not ds.get("deepspeed_config_file"):
        said = f"zero_stage is {stage}" if stage is not None else "no zero_stage: accelerate's default is 2"
        out.append(_warning("ignored", f"deepspeed_config.{zero3_only[0]}", f"a ZeRO-3 setting, and {said}: it "
                            "does nothing", "set zero_stage: 3 if ZeRO-3 was meant, else delete it"))
    return out + inline_values(ds) + _offloads(ds, stage)


def _beside_a_ds_file(config: dict[str, Any], ds: dict[str, Any]) -> list[Finding]:
    """accelerate's DeepSpeedPlugin._deepspeed_config_checks: with a file, these inline settings raise."""
    conflicts = schema()["ds_file_conflicts"]
    out = [_error("ds-file-conflict", f"deepspeed_config.{key}", "accelerate refuses this next to "
                  "deepspeed_config_file (it raises at start-up)",
                  f"delete it and set the matching value in {ds['deepspeed_config_file']}")
           for key in ds if key in conflicts]
    if config.get("mixed_precision") is not None:
        out.append(_error("ds-file-conflict", "mixed_precision", "accelerate refuses mixed_precision next to "
                          "deepspeed_config_file (it raises at start-up, even for 'no')",
                          f"delete it and set fp16/bf16 in {ds['deepspeed_config_file']}"))
    return out


def _offloads(ds: dict[str, Any], stage: Any) -> list[Finding]:
    """The inline offload devices: known ones, NVMe with a folder, parameter offload only under ZeRO-3."""
    out = []
    for what in ("optimizer", "param"):
        device = ds.get(f"offload_{what}_device")
        if device is not None and device not in ("none", "cpu", "nvme"):  # accelerate's offload devices
            out.append(_error("bad-value", f"deepspeed_config.offload_{what}_device", f"{device!r} is not an "
                              "offload device", "use none, cpu or nvme"))
        if device == "nvme" and not ds.get(f"offload_{what}_nvme_path"):
            out.append(_error("missing-key", f"deepspeed_config.offload_{what}_nvme_path", f"offload_{what}_device"
                              " is nvme and no path is given", "set the NVMe folder"))
        if (what == "param" and device not in (None, "none") and stage not in (None, 3) and not
                ds.get("deepspeed_config_file")):
            out.append(_warning("ignored", "deepspeed_config.offload_param_device", f"parameter offload needs "
                                f"ZeRO-3; with zero_stage {stage} DeepSpeed ignores it", "set zero_stage: 3"))
    return out


def _fsdp_choices(fsdp: dict[str, Any], version: int) -> list[Finding]:
    """FSDP keys whose value must be one of accelerate's names for this fsdp_version."""
    s = schema()
    choices = (("fsdp_auto_wrap_policy", s["fsdp_wrap_policies"]),
               ("fsdp_state_dict_type", s["fsdp2_state_dict_types"] if version == 2 else s["fsdp_state_dict_types"]),
               ("fsdp_backward_prefetch", s["fsdp_backward_prefetch"]))
    if version == 1:
        choices += (("fsdp_sharding_strategy", s["fsdp_sharding_strategies"]),)
    out = []
    for key, allowed in choices:
        value = fsdp.get(key)
        if value is not None and str(value).upper() not in allowed and not (
                key == "fsdp_sharding_strategy" and as_int(value) in range(1, len(allowed) + 1)):
            out.append(_error("bad-value", f"fsdp_config.{key}", f"{value!r} is not one of "
                              f"{', '.join(allowed)}{' under fsdp_version 2' if version == 2 else ''}",
                              did_you_mean(str(value).upper(), allowed)))
    return out


def _fsdp(config: dict[str, Any]) -> list[Finding]:
    if config.get("distributed_type") != "FSDP":
        return []
    fsdp = section_keys(config, "fsdp_config")
    out = []
    version = fsdp.get("fsdp_version", 1)
    if version not in (1, 2):
        return [_error("bad-value", "fsdp_config.fsdp_version", f"{version!r} is not 1 or 2", "use 2 (FSDP2)")]
    if version == 2:
        for key, fix in FSDP1_ONLY.items():
            if key in fsdp:
                out.append(_error("fsdp-version", f"fsdp_config.{key}", "an FSDP1 setting under fsdp_version 2: "
                                  "accelerate ignores it (or raises)", fix))
    out += _fsdp_choices(fsdp, version)
    reshard = fsdp.get("fsdp_reshard_after_forward")
    if version == 2 and reshard is not None and not isinstance(reshard, bool):
        out.append(_error("bad-value", "fsdp_config.fsdp_reshard_after_forward", f"{reshard!r}: FSDP2 takes "
                          "true or false", "true shards like FULL_SHARD, false like SHARD_GRAD_OP"))
    policy = str(fsdp.get("fsdp_auto_wrap_policy", "")).upper()
    if "fsdp_min_num_params" in fsdp and policy in ("TRANSFORMER_BASED_WRAP", "NO_WRAP"):
        out.append(_warning("ignored", "fsdp_config.fsdp_min_num_params", f"only SIZE_BASED_WRAP reads it; the "
                            f"policy is {policy}", "delete it, or use SIZE_BASED_WRAP"))
    if "fsdp_transformer_layer_cls_to_wrap" in fsdp and policy in ("SIZE_BASED_WRAP", "NO_WRAP"):
        out.append(_warning("ignored", "fsdp_config.fsdp_transformer_layer_cls_to_wrap", f"only "
                            f"TRANSFORMER_BASED_WRAP reads it; the policy is {policy}", "delete it"))
    sharding = str(fsdp.get("fsdp_sharding_strategy", "")).upper()
    if version == 1 and sharding in ("NO_SHARD", "3") and fsdp.get("fsdp_offload_params"):
        out.append(_warning("ignored", "fsdp_config.fsdp_offload_params", "NO_SHARD keeps whole replicas: "
                            "offloading them saves nothing FSDP is built for (use DDP)",
                            "use FULL_SHARD, or drop the offload"))
    return out


def _hsdp(config: dict[str, Any]) -> list[Finding]:
    """``parallelism_config``'s sizes: whole numbers from 1 (accelerate's ``ParallelismConfig`` reads them with
    ``int()`` when the script builds its ``Accelerator``, after the launch); FSDP2's replicas
    (``dp_replicate_size``) with a shard group of 2 or more and sizes whose product is every process."""
    given = section_keys(config, "parallelism_config")
    sizes = {key: as_int(value) for key, value in given.items()}
    for key, value in given.items():
        if key.endswith("_size") and value is not None and (sizes[key] is None or not 1 <= sizes[key] <= MAX_COUNT):
            return [_error("bad-value", f"parallelism_config.{key}", f"{str(value)[:40]!r} is not a whole number "
                           f"in 1..{MAX_COUNT:,}", f"set {key} to a process count")]
    processes = as_int(config.get("num_processes"))
    if config.get("distributed_type") != "FSDP" or size_of(sizes, "dp_replicate_size") <= 1 or not processes:
        return []
    why = hsdp_mismatch(sizes, processes)
    fix = "make dp_replicate_size x dp_shard_size the process count, with dp_shard_size 2 or more"
    return [_error("hsdp-sizes", "parallelism_config", why, fix)] if why else []
