"""argv and config YAML for ``accelerate launch``.

The YAML is generated (pure) and written by the runner before launching. For the deepspeed
strategy it references the rendered DeepSpeed JSON (``deepspeed_config_file``) and sets nothing
else DeepSpeed-related: accelerate 1.15 refuses a YAML that names a config file and also sets
mixed precision, accumulation, clipping, stage or offload.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dsbench.errors import UserError
from dsbench.launchers import LaunchCommand, LaunchSpec, cpu_env, worker_args
from dsbench.launchers.remote import fan_out


def accelerate_config(spec: LaunchSpec) -> dict[str, Any]:
    """The accelerate config dict for ``spec`` (written as YAML)."""
    common: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "num_machines": spec.nodes(),
        "num_processes": spec.world_size(),
        "machine_rank": 0,
        "main_process_ip": spec.first_host(),
        "main_process_port": spec.master_port,
        "rdzv_backend": "static",
        "same_network": True,
        "main_training_function": "main",
        "debug": False,
        "use_cpu": False,
    }
    if spec.strategy == "deepspeed":
        if not spec.ds_config:
            raise UserError("the deepspeed strategy needs a rendered config (--config or render flags)")
        return {**common, "distributed_type": "DEEPSPEED",
                "deepspeed_config": {"deepspeed_config_file": spec.ds_config, "zero3_init_flag": False,
                                     "deepspeed_multinode_launcher": "standard"}}
    if spec.strategy == "fsdp":
        return {**common, "distributed_type": "FSDP", "mixed_precision": spec.mixed_precision,
                "fsdp_config": {"fsdp_version": 2, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                                "fsdp_reshard_after_forward": True, "fsdp_cpu_ram_efficient_loading": False,
                                "fsdp_state_dict_type": "SHARDED_STATE_DICT", "fsdp_offload_params": False}}
    return {**common, "distributed_type": "MULTI_GPU", "mixed_precision": spec.mixed_precision}


def to_yaml(data: dict[str, Any]) -> str:
    """Deterministic YAML text (imports PyYAML lazily)."""
    import yaml

    return yaml.safe_dump(data, sort_keys=True, default_flow_style=False)


def build(spec: LaunchSpec) -> LaunchCommand:
    """``accelerate launch --config_file Y [--num_processes ...] --module M args``; on several nodes one such
    command per node with its ``--machine_rank``, started over ssh (as accelerate's multi-node docs do)."""
    config = accelerate_config(spec)
    files = {spec.accelerate_config: to_yaml(config)}
    options = ["--config_file", spec.accelerate_config, "--num_processes", str(config["num_processes"]),
               "--num_machines", str(config["num_machines"])]
    address = ["--main_process_ip", str(config["main_process_ip"]), "--main_process_port", str(spec.master_port),
               "--module", spec.module, *worker_args(spec)]
    if not spec.multinode():
        return LaunchCommand(argv=["accelerate", "launch", *options, *address], env=cpu_env(spec), files=files)
    command = fan_out(spec, {host: [spec.python, "-m", "accelerate.commands.launch", *options, "--machine_rank",
                                    str(rank), *address] for rank, host in enumerate(spec.selection())})
    return replace(command, files={**files, **command.files})
