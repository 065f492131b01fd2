"""Read a user's accelerate config YAML (pure): recognise it, parse it, and the helpers that its checks
(``accelerate_check.py``), its explanation and the worker read it with.

What accelerate itself accepts comes from ``dsbench/data/accelerate_schema.json``, generated from the installed
accelerate by ``scripts/gen_accelerate_schema.py`` (its config dataclass, its launch parser's argument groups,
its own DeepSpeed-file check), so a new accelerate release is one regeneration away.
"""

from __future__ import annotations

import difflib
import json
import re
from functools import lru_cache
from typing import Any

from dsbench.configs.findings import Finding
from dsbench.configs.yaml_reader import YamlProblem, load_yaml
from dsbench.errors import UserError
from dsbench.paths import data_file

# Keys that are accelerate-only (DeepSpeed JSON never has them at its top level): how a file is recognised.
MARKERS = ("distributed_type", "compute_environment")

DEFAULT_ZERO_STAGE = 2
"""accelerate's stage when the YAML names none (DeepSpeedPlugin reads ACCELERATE_DEEPSPEED_ZERO_STAGE, default 2)."""


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The accelerate schema shipped in ``dsbench/data/accelerate_schema.json``."""
    return json.loads(data_file("accelerate_schema.json").read_text(encoding="utf-8"))


def looks_like_accelerate(path: str, text: str | None = None) -> bool:
    """An accelerate config: a ``.yaml``/``.yml`` file, or text whose top level names accelerate-only keys."""
    if path.lower().endswith((".yaml", ".yml")):
        return True
    return bool(text) and any(re.search(rf"^\s*['\"]?{key}['\"]?\s*:", text, re.MULTILINE) for key in MARKERS)


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


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def machine_count(config: dict[str, Any]) -> int:
    """``num_machines`` (checked a whole number >= 1 by validation, before a launch reads it), 1 when absent."""
    return as_int(config.get("num_machines")) or 1


def section_keys(config: dict[str, Any], section: str) -> dict[str, Any]:
    """A nested section's keys as accelerate applies them (``fsdp_config`` keys gain ``fsdp_`` ...)."""
    prefix = schema()["sections"][section]["prefix"]
    raw = config.get(section) or {}
    return {(k if k.startswith(prefix) else prefix + k): v for k, v in raw.items()} if isinstance(raw, dict) else {}


def dynamo_backend(config: dict[str, Any]) -> str | None:
    """The torch.compile backend accelerate gives the script (upper case), None for none: a top-level
    ``dynamo_backend`` is read as ``dynamo_config``'s (commands/config/config_args.py, "Convert the config to the new
    format"), which the launch exports as ACCELERATE_DYNAMO_BACKEND."""
    backend = str(section_keys(config, "dynamo_config").get("dynamo_backend") or config.get("dynamo_backend") or "NO")
    return None if backend.upper() in ("NO", "FALSE") else backend.upper()


def starts_one_process(config: dict[str, Any], processes: int | None = None) -> bool:
    """Whether ``accelerate launch`` starts the script once although several are asked for (``processes``, else the
    file's count): MULTI_CPU without an mpirun hostfile (its simple_launcher prepends mpirun only for
    ``mpirun_config.mpirun_hostfile``; measured in ../shared/FINDINGS.md)."""
    return (config.get("distributed_type") == "MULTI_CPU" and (processes or world_size(config) or 1) > 1
            and not section_keys(config, "mpirun_config").get("mpirun_hostfile"))


def world_size(config: dict[str, Any]) -> int | None:
    """The total number of processes the YAML launches (``num_processes``), when it says."""
    value = as_int(config.get("num_processes"))
    return value if value and value > 0 else None


def ds_config_file(config: dict[str, Any]) -> str | None:
    return section_keys(config, "deepspeed_config").get("deepspeed_config_file")


def nvme_folders(config: dict[str, Any]) -> list[tuple[str, str]]:
    """The folders an accelerate YAML's inline ``deepspeed_config`` offloads to NVMe, each with the key that names
    it (accelerate 1.15 DeepSpeedPlugin: ``offload_{optimizer,param}_nvme_path``)."""
    ds = section_keys(config, "deepspeed_config")
    paths = {what: ds.get(f"offload_{what}_nvme_path") for what in ("optimizer", "param")
             if ds.get(f"offload_{what}_device") == "nvme"}
    return [(f"deepspeed_config.offload_{what}_nvme_path", path) for what, path in paths.items()
            if isinstance(path, str) and path]


def require_valid(findings: list[Finding], source: str) -> None:
    """Raise the first error as one line (for commands that need a usable YAML)."""
    for finding in findings:
        if finding.severity == "error":
            raise UserError(f"{source}: {finding.path or '(file)'}: {finding.message} (fix: {finding.fix})")


def size_of(sizes: dict[str, int | None], suffix: str) -> int:
    """A parallelism_config size by its key's ending (the YAML's ``parallelism_config_dp_shard_size`` or the
    environment's ``dp_shard_size``), 1 when absent."""
    return next((size or 1 for key, size in sizes.items() if key.endswith(suffix)), 1)


def ulysses_degree(config: dict[str, Any]) -> int:
    """DeepSpeed Ulysses' degree a YAML asks for: ``parallelism_config``'s sp_size under DEEPSPEED (accelerate 1.15's
    one sequence-parallel backend, ``sp_backend: deepspeed``: ``Accelerator._prepare_deepspeed`` registers
    DeepSpeed's UlyssesSPAttentionHF over sp_size consecutive ranks), else 1."""
    if config.get("distributed_type") != "DEEPSPEED":
        return 1
    sizes = {key: as_int(value) for key, value in section_keys(config, "parallelism_config").items()}
    return size_of(sizes, "sp_size")


def hsdp_mismatch(sizes: dict[str, int | None], processes: int) -> str | None:
    """Why an HSDP parallelism_config does not fit ``processes`` (said without the section's name), or None:
    accelerate's ``ParallelismConfig`` needs dp_replicate_size x dp_shard_size to be every process and a shard group
    of 2 or more ("dp_replicate_size > 1 and dp_shard_size == 1 is an invalid configuration", accelerate 1.15
    parallelism_config.py)."""
    replicate, shard = size_of(sizes, "dp_replicate_size"), size_of(sizes, "dp_shard_size")
    if shard < 2:
        return f"dp_replicate_size {replicate} needs dp_shard_size 2 or more (HSDP); for replicas alone use MULTI_GPU"
    if replicate * shard != processes:
        return (f"dp_replicate_size {replicate} x dp_shard_size {shard} = {replicate * shard}, but the launch starts "
                f"{processes} processes; make their product the process count")
    return None


def did_you_mean(key: str, known: list[str]) -> str:
    """The fix for a name accelerate does not know: the known one it resembles, else deleting it."""
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'? rename it" if close else "delete it"


def unknown_setting_fix(section: str, key: str, applied: str, known: list[str]) -> str:
    """A misspelt setting's likely name; a key of DeepSpeed's own JSON (TRL's ALST YAML sets
    ``seq_parallel_communication_data_type`` inline) goes into a DeepSpeed file, which the inline settings
    cannot carry."""
    from dsbench.configs.schema import load_schema

    fix = did_you_mean(applied, known)
    if section == "deepspeed_config" and fix == "delete it" and key in load_schema().keys[""]:
        return ("delete it here: it is a key of DeepSpeed's JSON config, which the inline settings cannot carry; "
                "`dsbench render --from-accelerate YAML -o ds.json` writes them as that file, to add it to and name "
                "by deepspeed_config_file in their place")
    return fix
