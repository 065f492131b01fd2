"""Check and explain a user's accelerate config YAML (pure: a parsed mapping in, findings or sentences out).

What accelerate itself accepts comes from ``dsbench/data/accelerate_schema.json``, generated from the installed
accelerate by ``scripts/gen_accelerate_schema.py`` (its config dataclass, its launch parser's argument groups,
its own DeepSpeed-file check), so a new accelerate release is one regeneration away. The checks here are the
ones accelerate makes late (at launch, or inside the training process) or never (keys it copies and never
reads, settings it silently ignores). Findings use the DeepSpeed validator's format: severity, code, dotted
path, message, fix.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from functools import lru_cache
from typing import Any

from dsbench.configs.findings import Finding
from dsbench.configs.templates import load_template
from dsbench.configs.yaml_reader import YamlProblem, load_yaml
from dsbench.errors import UserError
from dsbench.hostfile import is_valid_hostname
from dsbench.paths import data_file
from dsbench.strategies import ACCELERATE_TYPES

# Keys that are accelerate-only (DeepSpeed JSON never has them at its top level): how a file is recognised.
MARKERS = ("distributed_type", "compute_environment")

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
OFFLOAD_DEVICES = ("none", "cpu", "nvme")
DEFAULT_ZERO_STAGE = 2
"""accelerate's stage when the YAML names none (DeepSpeedPlugin reads ACCELERATE_DEEPSPEED_ZERO_STAGE, default 2)."""
# An address left as in a template: xxx.xxx.xxx.xxx, <MASTER_IP>, ${IP}, "your-ip" ...
_PLACEHOLDER_ADDRESS = re.compile(r"^(x+\.){1,3}x+$|[<>{}$]|your|changeme|placeholder|master_?ip|ip_?addr",
                                  re.IGNORECASE)


# YAML 1.1 (PyYAML, which accelerate uses) reads a bare no/NO as the boolean false
_QUOTE_NO = "quote it, {key}: '{value}' (YAML reads a bare {value} as false)"


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The accelerate schema shipped in ``dsbench/data/accelerate_schema.json``."""
    return json.loads(data_file("accelerate_schema.json").read_text(encoding="utf-8"))


def looks_like_accelerate(path: str, text: str | None = None) -> bool:
    """An accelerate config: a ``.yaml``/``.yml`` file, or text whose top level names accelerate-only keys."""
    if path.lower().endswith((".yaml", ".yml")):
        return True
    return bool(text) and any(re.search(rf"^\s*['\"]?{key}['\"]?\s*:", text, re.MULTILINE) for key in MARKERS)


MAX_COUNT = 1_000_000
"""Largest process or machine count taken as meant (beyond any cluster)."""


def parse_yaml(text: str, source: str) -> tuple[dict[str, Any] | None, list[Finding]]:
    """Parse an accelerate YAML as accelerate does (``yaml.safe_load``), through the bounded reader
    (:func:`dsbench.configs.yaml_reader.load_yaml`), and refuse anything but a mapping at the top."""
    if not text.strip():
        return None, [Finding(severity="error", code="empty-file", path="", message=f"{source} is empty",
                              fix="write the accelerate config into it (`accelerate config` asks for it)")]
    try:
        data = load_yaml(text, source)
    except YamlProblem as exc:
        return None, [Finding(severity="error", code="malformed-yaml", path="", message=str(exc),
                              fix="correct the file at that line")]
    if not isinstance(data, dict):
        return None, [Finding(severity="error", code="not-a-mapping", path="",
                              message=f"{source}: the top level is {type(data).__name__}, not a mapping of "
                                      "accelerate settings", fix="write `key: value` lines at the top level")]
    return {str(k): v for k, v in data.items()}, []


def _did_you_mean(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'? rename it" if close else "delete it"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _error(code: str, path: str, message: str, fix: str) -> Finding:
    return Finding(severity="error", code=code, path=path, message=message, fix=fix)


def _warning(code: str, path: str, message: str, fix: str) -> Finding:
    return Finding(severity="warning", code=code, path=path, message=message, fix=fix)


def section_keys(config: dict[str, Any], section: str) -> dict[str, Any]:
    """A nested section's keys as accelerate applies them (``fsdp_config`` keys gain ``fsdp_`` ...)."""
    prefix = schema()["sections"][section]["prefix"]
    raw = config.get(section) or {}
    return {(k if k.startswith(prefix) else prefix + k): v for k, v in raw.items()} if isinstance(raw, dict) else {}


def check(config: dict[str, Any]) -> list[Finding]:
    """Every finding for an accelerate config (the referenced DeepSpeed file is checked by the caller)."""
    return [*_top_level(config), *_sections(config), *_processes(config), *_deepspeed(config), *_fsdp(config)]


def _top_level(config: dict[str, Any]) -> list[Finding]:
    s = schema()
    version = s["accelerate_version"]
    out = []
    for key in config:
        if key not in s["top"]:
            out.append(_error("unknown-key", key, f"accelerate {version} refuses the file at launch: no top-level "
                              f"key '{key}'", _did_you_mean(key, s["top"])))
    kind = config.get("distributed_type")
    if kind is None:
        out.append(_error("missing-key", "distributed_type", "accelerate needs distributed_type (it raises "
                          "without it)", "set DEEPSPEED, FSDP, MULTI_GPU, MULTI_CPU or NO"))
    elif kind not in s["distributed_types"]:
        out.append(_error("bad-value", "distributed_type", f"{kind!r} is not one of accelerate's types "
                          f"({', '.join(s['distributed_types'])})", _QUOTE_NO.format(key="distributed_type", value="NO")
                          if kind is False else _did_you_mean(str(kind), s["distributed_types"])))
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
                                  _did_you_mean(applied, known)))
    return out


def _processes(config: dict[str, Any]) -> list[Finding]:
    out = []
    processes, machines = config.get("num_processes"), config.get("num_machines", 1)
    for key, value, low in (("num_processes", processes, 1), ("num_machines", machines, 1),
                            ("machine_rank", config.get("machine_rank", 0), 0)):
        if value is not None and (_int(value) is None or value < low) and not (key == "num_processes"
                                                                              and value == -1):
            out.append(_error("bad-value", key, f"{str(value)[:40]!r} is not a whole number >= {low}", f"set {key}"))
        elif _int(value) is not None and value > MAX_COUNT:
            out.append(_error("bad-value", key, f"{value:,} is beyond any cluster (at most {MAX_COUNT:,})",
                              f"set {key} to the real count"))
    port = config.get("main_process_port")
    if port is not None and (_int(port) is None or not 1 <= port <= 65535):
        out.append(_error("bad-value", "main_process_port", f"{port!r} is not a TCP port", "use 1..65535"))
    if any(f.severity == "error" for f in out):
        return out
    machines = machines or 1
    if processes not in (None, -1) and processes % machines:
        out.append(_error("process-count", "num_processes", f"{processes} processes do not split over {machines} "
                          "machines: num_processes is the total, num_machines x processes per machine",
                          f"set num_processes to {machines} x the GPUs per machine"))
    rank = _int(config.get("machine_rank")) or 0
    if rank >= machines:
        out.append(_error("bad-value", "machine_rank", f"{rank} with {machines} machine(s): ranks are 0.."
                          f"{machines - 1}", "set machine_rank to this machine's index"))
    if machines > 1:
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
    out = []
    if ds.get("deepspeed_config_file"):
        # accelerate's DeepSpeedPlugin._deepspeed_config_checks: with a file, these inline settings raise
        conflicts = schema()["ds_file_conflicts"]
        for key in ds:
            if key in conflicts:
                out.append(_error("ds-file-conflict", f"deepspeed_config.{key}", "accelerate refuses this next to "
                                  "deepspeed_config_file (it raises at start-up)",
                                  f"delete it and set the matching value in {ds['deepspeed_config_file']}"))
        if config.get("mixed_precision") is not None:
            out.append(_error("ds-file-conflict", "mixed_precision", "accelerate refuses mixed_precision next to "
                              "deepspeed_config_file (it raises at start-up, even for 'no')",
                              f"delete it and set fp16/bf16 in {ds['deepspeed_config_file']}"))
    launcher = ds.get("deepspeed_multinode_launcher")
    launchers = schema()["deepspeed_multinode_launchers"]
    if launcher is not None and launcher not in launchers:
        out.append(_error("bad-value", "deepspeed_config.deepspeed_multinode_launcher", f"{launcher!r} is not one "
                          f"of {', '.join(launchers)}", _did_you_mean(str(launcher), launchers)))
    stage = ds.get("zero_stage")
    zero3_only = [k for k in ("zero3_init_flag", "zero3_save_16bit_model") if ds.get(k) is True]
    if zero3_only and stage != 3 and not ds.get("deepspeed_config_file"):
        said = f"zero_stage is {stage}" if stage is not None else "no zero_stage: accelerate's default is 2"
        out.append(_warning("ignored", f"deepspeed_config.{zero3_only[0]}", f"a ZeRO-3 setting, and {said}: it "
                            "does nothing", "set zero_stage: 3 if ZeRO-3 was meant, else delete it"))
    out += _typed_deepspeed_values(ds)
    for what in ("optimizer", "param"):
        device = ds.get(f"offload_{what}_device")
        if device is not None and device not in OFFLOAD_DEVICES:
            out.append(_error("bad-value", f"deepspeed_config.offload_{what}_device", f"{device!r} is not an "
                              "offload device", "use none, cpu or nvme"))
        if device == "nvme" and not ds.get(f"offload_{what}_nvme_path"):
            out.append(_error("missing-key", f"deepspeed_config.offload_{what}_nvme_path", f"offload_{what}_device"
                              " is nvme and no path is given", "set the NVMe folder"))
        if what == "param" and device not in (None, "none") and stage not in (None, 3) and not \
                ds.get("deepspeed_config_file"):
            out.append(_warning("ignored", "deepspeed_config.offload_param_device", f"parameter offload needs "
                                f"ZeRO-3; with zero_stage {stage} DeepSpeed ignores it", "set zero_stage: 3"))
    return out


# accelerate copies these inline values into the DeepSpeed config it builds (DeepSpeedPlugin.__post_init__), where
# DeepSpeed's JSON path would type them: (kind, lowest, highest or None, the fix)
_DS_VALUES = {"zero_stage": ("int", 0, 3, "use 0, 1, 2 or 3"),
              "gradient_accumulation_steps": ("int", 1, MAX_COUNT, "use a whole number >= 1"),
              "gradient_clipping": ("float", 0.0, None, "use a number >= 0 (0 turns clipping off)")}


def _typed_deepspeed_values(ds: dict[str, Any]) -> list[Finding]:
    """The inline DeepSpeed numbers typed and ranged as the JSON validator types them: ``zero_stage: true``,
    ``gradient_accumulation_steps: 0`` and ``gradient_clipping: -1`` fail in accelerate at start-up, or silently."""
    out = []
    for key, (kind, low, high, fix) in _DS_VALUES.items():
        value = ds.get(key)
        if value is None:
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool)
        ok = number and (kind == "float" or isinstance(value, int)) and math.isfinite(value) and low <= value and (
            high is None or value <= high)
        if not ok:
            shown = json.dumps(value)[:40] if isinstance(value, str | bool | int | float | type(None)) else \
                type(value).__name__
            out.append(_error("bad-value", f"deepspeed_config.{key}", f"{shown} is not "
                              f"{'a ZeRO stage' if key == 'zero_stage' else 'a valid ' + key}", fix))
    return out


def _fsdp(config: dict[str, Any]) -> list[Finding]:
    if config.get("distributed_type") != "FSDP":
        return []
    s = schema()
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
    choices = (("fsdp_auto_wrap_policy", s["fsdp_wrap_policies"]),
               ("fsdp_state_dict_type", s["fsdp2_state_dict_types"] if version == 2 else s["fsdp_state_dict_types"]),
               ("fsdp_backward_prefetch", s["fsdp_backward_prefetch"]))
    if version == 1:
        choices += (("fsdp_sharding_strategy", s["fsdp_sharding_strategies"]),)
    for key, allowed in choices:
        value = fsdp.get(key)
        if value is not None and str(value).upper() not in allowed and not (
                key == "fsdp_sharding_strategy" and _int(value) in range(1, len(allowed) + 1)):
            out.append(_error("bad-value", f"fsdp_config.{key}", f"{value!r} is not one of "
                              f"{', '.join(allowed)}{' under fsdp_version 2' if version == 2 else ''}",
                              _did_you_mean(str(value).upper(), allowed)))
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


def world_size(config: dict[str, Any]) -> int | None:
    """The total number of processes the YAML launches (``num_processes``), when it says."""
    value = _int(config.get("num_processes"))
    return value if value and value > 0 else None


def ds_config_file(config: dict[str, Any]) -> str | None:
    return section_keys(config, "deepspeed_config").get("deepspeed_config_file")


def require_valid(findings: list[Finding], source: str) -> None:
    """Raise the first error as one line (for commands that need a usable YAML)."""
    for finding in findings:
        if finding.severity == "error":
            raise UserError(f"{source}: {finding.path or '(file)'}: {finding.message} (fix: {finding.fix})")


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
    machines = _int(config.get("num_machines")) or 1
    processes = world_size(config)
    lines = []
    if processes:
        per = f" ({processes // machines} per machine)" if machines > 1 and processes % machines == 0 else ""
        where = (f"; machine 0 at {config.get('main_process_ip')}:{config.get('main_process_port', 29500)}"
                 if machines > 1 else "")
        lines.append(f"`accelerate launch` starts {processes} process(es) on {machines} machine(s){per}{where}")
    else:
        lines.append(f"the process count is not in the file: `accelerate launch --num_processes N` sets it "
                     f"({machines} machine(s))")
    if config.get("use_cpu") is True and kind in ("DEEPSPEED", "FSDP"):
        lines.append(f"use_cpu: true: accelerate skips {kind} and runs plain multi-CPU data parallelism")
    if kind == "DEEPSPEED":
        lines += _explain_deepspeed(config, ds_lines)
    elif kind == "FSDP":
        lines += _explain_fsdp(config)
    else:
        lines.append(_ENGINES.get(str(kind), f"distributed_type {kind}"))
    precision = str(config.get("mixed_precision") or "no")
    if kind == "DEEPSPEED" and not ds_config_file(config):
        lines.append({"bf16": "precision: bf16 (DeepSpeed's bf16 section: bf16 weights, activations and "
                      "gradients; fp32 master weights in the optimizer)", "fp16": "precision: fp16 with DeepSpeed's "
                      "dynamic loss scaling; fp32 master weights"}.get(precision, f"precision: {precision}"
                                                                      if precision != "no" else "precision: fp32"))
    elif kind != "DEEPSPEED":
        lines.append({"bf16": "precision: bf16 autocast around the forward; fp32 weights and optimizer",
                      "fp16": "precision: fp16 autocast with a gradient scaler; fp32 weights and optimizer",
                      "fp8": "precision: fp8 (needs Transformer Engine, MS-AMP or torchao)"}
                     .get(precision, "precision: fp32"))
    return lines


def _explain_deepspeed(config: dict[str, Any], ds_lines: list[str] | None) -> list[str]:
    from dsbench.configs.explain import _STAGES

    ds = section_keys(config, "deepspeed_config")
    launcher = ds.get("deepspeed_multinode_launcher")
    lines = ["engine: DeepSpeed" + (f" (nodes started with its {launcher} launcher)" if launcher and
                                    (_int(config.get("num_machines")) or 1) > 1 else "")]
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
    lines = [f"engine: FSDP{version} (torch fully_shard): {shard}"]
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


def to_deepspeed(config: dict[str, Any]) -> dict[str, Any]:
    """The DeepSpeed config accelerate builds from an inline ``deepspeed_config`` (accelerate 1.15
    utils/dataclasses.py: ``DeepSpeedPlugin.__post_init__`` without a config file, then ``set_mixed_precision``
    with the YAML's ``mixed_precision``). Batch sizes stay "auto", as accelerate leaves them for the script to fill;
    accelerate's ``steps_per_print: inf`` (not JSON) and its ``nvme_path: null`` entries are left out."""
    ds = section_keys(config, "deepspeed_config")
    if config.get("distributed_type") != "DEEPSPEED":
        raise UserError(f"distributed_type is {config.get('distributed_type')}, not DEEPSPEED: there is no DeepSpeed "
                        "config to write")
    if ds.get("deepspeed_config_file"):
        raise UserError(f"the YAML names its DeepSpeed config already: {ds['deepspeed_config_file']}")

    def offload(what: str) -> dict[str, Any]:
        device = ds.get(f"offload_{what}_device", "none")
        return {"device": device, **({"nvme_path": ds.get(f"offload_{what}_nvme_path")} if device == "nvme" else {})}

    out: dict[str, Any] = {
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": ds.get("gradient_accumulation_steps", "auto"),
        "zero_optimization": {
            "stage": ds.get("zero_stage", DEFAULT_ZERO_STAGE),
            "offload_optimizer": offload("optimizer"),
            "offload_param": offload("param"),
            "stage3_gather_16bit_weights_on_model_save": ds.get("zero3_save_16bit_model", False) is True,
        },
    }
    clipping = ds.get("gradient_clipping", "auto")
    if clipping:  # accelerate: `if self.gradient_clipping:` ("auto" stays, 0 drops the key)
        out["gradient_clipping"] = clipping
    precision = str(config.get("mixed_precision") or "no")
    out["fp16"] = {"enabled": True, "auto_cast": True} if precision == "fp16" else {"enabled": False}
    out["bf16"] = {"enabled": precision in ("bf16", "fp8")}
    return out


# How dsbench's worker runs an FSDP1 sharding strategy with FSDP2's fully_shard (torch's FSDP1 -> FSDP2 migration
# notes, and accelerate 1.15's fsdp_sharding_strategy help: FULL_SHARD is reshard_after_forward=True,
# SHARD_GRAD_OP is False). NO_SHARD and HYBRID_SHARD need a replicated mesh dimension the worker does not build.
FSDP1_RESHARD = {"FULL_SHARD": True, "SHARD_GRAD_OP": False}

# accelerate's launchers: the engines dsbench's worker runs for each distributed_type.
WORKER_ENGINES = ACCELERATE_TYPES


def fsdp1_strategy(value: Any) -> str:
    """An FSDP1 sharding strategy by name (accelerate also takes its 1-based index, FSDP_SHARDING_STRATEGY)."""
    names = schema()["fsdp_sharding_strategies"]
    index = _int(value)
    return names[index - 1] if index is not None and 1 <= index <= len(names) else str(value).upper()


def worker_refusal(config: dict[str, Any], processes: int | None) -> str | None:
    """Why dsbench's worker cannot do what ``config`` asks of ``accelerate launch`` (None when it can): said before
    anything starts, rather than a run that quietly trains something else."""
    kind = config.get("distributed_type")
    if kind == "MULTI_CPU" and (processes or 1) > 1:
        return ("distributed_type MULTI_CPU: accelerate 1.15 starts one process for it without mpirun; use "
                "MULTI_GPU, which dsbench runs as CPU ranks over gloo on a machine without a GPU")
    if kind not in WORKER_ENGINES and kind != "MULTI_CPU":
        return (f"distributed_type {kind}: dsbench's worker runs {', '.join(WORKER_ENGINES)} (and MULTI_CPU with "
                "one process)")
    sizes = {key: _int(value) for key, value in section_keys(config, "parallelism_config").items()
             if key.endswith("_size")}
    # dp_shard alone is FSDP/ZeRO sharding, which the engines do; the other sizes split or replicate otherwise
    parallel = [f"parallelism_config.{key} {size}" for key, size in sizes.items()
                if (size or 1) > 1 and not key.endswith("dp_shard_size")]
    if parallel:
        return (f"{parallel[0]}: accelerate's sequence/context/tensor/replica parallelism is not run by dsbench's "
                "worker; delete parallelism_config to train plain data parallelism")
    if str(config.get("mixed_precision") or "no") == "fp8":
        return "mixed_precision fp8: dsbench's worker trains in fp32, bf16 or fp16; use --precision"
    fsdp = section_keys(config, "fsdp_config")
    if kind == "FSDP" and fsdp.get("fsdp_version", 1) == 1:
        strategy = fsdp1_strategy(fsdp.get("fsdp_sharding_strategy", "FULL_SHARD"))
        if strategy not in FSDP1_RESHARD:
            return (f"fsdp_sharding_strategy {strategy}: dsbench's worker runs FSDP2 (fully_shard), which has "
                    f"{' and '.join(FSDP1_RESHARD)} only; use MULTI_GPU for NO_SHARD")
    return None


def worker_notes(config: dict[str, Any]) -> list[str]:
    """What the worker does differently from a Hugging Face script under the same YAML, without changing the
    losses (said at launch)."""
    notes = []
    fsdp = section_keys(config, "fsdp_config")
    policy = str(fsdp.get("fsdp_auto_wrap_policy") or "NO_WRAP").upper()
    if config.get("distributed_type") == "FSDP" and policy != "TRANSFORMER_BASED_WRAP":
        notes.append(f"fsdp_auto_wrap_policy {policy}: dsbench shards every transformer block, then the root "
                     "(TRANSFORMER_BASED_WRAP); the losses are the same, the all-gathers are per block")
    if section_keys(config, "deepspeed_config").get("zero3_init_flag") is True:
        notes.append("zero3_init_flag: dsbench builds the model from its config on every rank, then DeepSpeed "
                     "partitions it (no deepspeed.zero.Init while building)")
    dynamo = str(config.get("dynamo_backend") or "NO").upper()
    if dynamo not in ("NO", "FALSE"):
        notes.append(f"dynamo_backend {dynamo}: dsbench's worker does not torch.compile the model")
    return notes


def with_script_optimizer(config: dict[str, Any], warmup_steps: int) -> tuple[dict[str, Any], list[str]]:
    """The DeepSpeed config accelerate builds from inline settings names no optimizer or scheduler: the training
    script brings its own (transformers' Trainer, integrations/deepspeed.py ``deepspeed_optim_sched``, creates its
    AdamW when the config has none; accelerate swaps it for DeepSpeedCPUAdam under optimizer offload). dsbench's
    worker is that script: it adds the AdamW (and, with a warm-up, WarmupLR) sections it renders for every other
    launch, "auto" values filled from its flags; DeepSpeed then builds DeepSpeedCPUAdam itself when offloading.
    Returns the config and the sections added."""
    out, added = dict(config), []
    if "optimizer" not in out:
        out["optimizer"] = load_template("base")["optimizer"]
        added.append("optimizer")
    if "scheduler" not in out and warmup_steps > 0:
        out.update(load_template("scheduler_warmup"))
        added.append("scheduler")
    return out, added
