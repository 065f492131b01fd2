"""Regenerate dsbench/data/accelerate_schema.json: what an accelerate config YAML may hold, from accelerate itself.

Run with the pinned accelerate installed:  python scripts/gen_accelerate_schema.py

Where each part comes from (accelerate 1.15, no hand-written key list for what accelerate defines):
- ``top``: the fields of ``ClusterConfig`` (commands/config/config_args.py), which ``from_yaml_file`` checks the
  YAML's top level against (unknown keys raise), plus the legacy keys its ``process_config`` converts.
- ``sections``: a nested dict (``deepspeed_config``, ``fsdp_config``, ...) is copied key by key onto the parsed
  ``accelerate launch`` arguments (commands/launch.py ``_validate_launch_command``: ``fsdp_config`` keys gain an
  ``fsdp_`` prefix, ``fp8_config`` ``fp8_``, ``dynamo_config`` ``dynamo_``); a key that names no argument is
  set and never read. The known keys are the destinations of the launch parser's argument group per section.
- ``ds_file_conflicts``: the inline DeepSpeed settings that accelerate refuses next to ``deepspeed_config_file``,
  found by asking ``DeepSpeedPlugin._deepspeed_config_checks`` about each inline key in turn.
- Enumerations: ``DistributedType``, ``PrecisionType`` and the FSDP constants (utils/constants.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import script_args

OUT = Path(__file__).resolve().parents[1] / "dsbench" / "data" / "accelerate_schema.json"

# section -> (launch parser group title, prefix accelerate adds to the section's keys)
SECTIONS = {
    "deepspeed_config": ("DeepSpeed Arguments", ""),
    "fsdp_config": ("FSDP Arguments", "fsdp_"),
    "fp8_config": ("FP8 Arguments", "fp8_"),
    "dynamo_config": ("Resource Selection Arguments", "dynamo_"),
    "megatron_lm_config": ("Megatron-LM Arguments", ""),
    "parallelism_config": ("ParallelismConfig Arguments", ""),
    "mpirun_config": ("MPI Arguments", ""),
}
LEGACY_TOP = ["fp16", "dynamo_backend"]  # converted by BaseConfig.process_config


def ds_file_conflicts(keys: list[str]) -> list[str]:
    from accelerate.utils.dataclasses import DeepSpeedPlugin

    found = []
    for key in [*keys, "mixed_precision"]:
        os.environ["ACCELERATE_CONFIG_DS_FIELDS"] = key
        try:
            DeepSpeedPlugin._deepspeed_config_checks(None)
        except ValueError:
            found.append(key)
    os.environ.pop("ACCELERATE_CONFIG_DS_FIELDS", None)
    return found


def build() -> dict:
    """The schema, from the installed accelerate (tests compare it with the shipped file)."""
    import accelerate
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.launch import launch_command_parser
    from accelerate.utils import constants
    from accelerate.utils.dataclasses import DistributedType, PrecisionType

    groups = {group.title: [action.dest for action in group._group_actions]
              for group in launch_command_parser()._action_groups}
    sections = {}
    for section, (title, prefix) in SECTIONS.items():
        keys = groups[title]
        if section == "dynamo_config":
            keys = [k for k in keys if k.startswith("dynamo_")]
        sections[section] = {"prefix": prefix, "keys": sorted(set(keys))}
    schema = {
        "accelerate_version": accelerate.__version__,
        "top": sorted({f.name for f in dataclasses.fields(ClusterConfig)} | set(LEGACY_TOP)),
        "sections": sections,
        "ds_file_conflicts": ds_file_conflicts(sections["deepspeed_config"]["keys"]),
        "distributed_types": sorted(t.value for t in DistributedType),
        "precisions": sorted(PrecisionType.list()),
        "fsdp_wrap_policies": constants.FSDP_AUTO_WRAP_POLICY,
        "fsdp_sharding_strategies": constants.FSDP_SHARDING_STRATEGY,
        "fsdp_state_dict_types": constants.FSDP_STATE_DICT_TYPE,
        "fsdp2_state_dict_types": constants.FSDP2_STATE_DICT_TYPE,
        "fsdp_backward_prefetch": constants.FSDP_BACKWARD_PREFETCH,
        "deepspeed_multinode_launchers": constants.DEEPSPEED_MULTINODE_LAUNCHERS,
    }
    return schema


def main() -> None:
    OUT.write_text(json.dumps(build(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    script_args.parse(__doc__)
    main()
