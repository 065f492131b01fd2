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
from dsbench.launchers.base import LaunchCommand, LaunchSpec, cpu_env, worker_args
from dsbench.launchers.remote import fan_out
from dsbench.strategies import RENDERED_ENGINES


def accelerate_yaml(kind: str, *, processes: int, machines: int, main_ip: str, port: int,
                   ds_config: str | None = None, mixed_precision: str = "no", dp_shard: int = 0) -> dict[str, Any]:
    """An accelerate config dict (written as YAML) that runs ``kind``: deepspeed (its plugin pointing at the
    DeepSpeed JSON ``ds_config``), fsdp (FSDP2, every transformer block a shard unit; HSDP over shard groups of
    ``dp_shard`` processes, as accelerate's ``parallelism_config`` spells it) or ddp."""
    common: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "num_machines": machines,
        "num_processes": processes,
        "machine_rank": 0,
        "main_process_ip": main_ip,
        "main_process_port": port,
        "rdzv_backend": "static",
        "same_network": True,
        "main_training_function": "main",
        "debug": False,
        "use_cpu": False,
    }
    if kind == "deepspeed":
        if not ds_config:
            raise UserError("the deepspeed strategy needs a rendered config (--config or render flags)")
        return {**common, "distributed_type": "DEEPSPEED",
                "deepspeed_config": {"deepspeed_config_file": ds_config, "zero3_init_flag": False,
                                     "deepspeed_multinode_launcher": "standard"}}
    if kind == "fsdp":
        hsdp = ({"parallelism_config": {"parallelism_config_dp_replicate_size": processes // dp_shard,
                                        "parallelism_config_dp_shard_size": dp_shard}}
                if dp_shard and processes > dp_shard else {})
        return {**common, "distributed_type": "FSDP", "mixed_precision": mixed_precision,
                "fsdp_config": {"fsdp_version": 2, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                                "fsdp_reshard_after_forward": True, "fsdp_cpu_ram_efficient_loading": False,
                                "fsdp_state_dict_type": "SHARDED_STATE_DICT", "fsdp_offload_params": False}, **hsdp}
    return {**common, "distributed_type": "MULTI_GPU", "mixed_precision": mixed_precision}


MAIN_NODE_IP = "MAIN_NODE_IP"
"""The address a YAML written without hosts gives machine 0 (plan --write): validate refuses it until it is set."""


def accelerate_config(spec: LaunchSpec) -> dict[str, Any]:
    """The accelerate config dict for ``spec``."""
    # the same ranks on every node (until 2026-12-01 slots 8, 8, 4 wrote num_processes 20, started as 6 a node)
    return accelerate_yaml(spec.strategy, processes=spec.even_world(), machines=spec.nodes(),
                           main_ip=spec.first_host(), port=spec.master_port, ds_config=spec.ds_config,
                           mixed_precision=spec.mixed_precision, dp_shard=spec.dp_shard)


KINDS = RENDERED_ENGINES
# dsbench's --precision as accelerate's mixed_precision
ACCELERATE_PRECISION = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}


def check_to_accelerate(kind: str, given: list[str], output: str | None) -> None:
    """``render --to-accelerate``: a DeepSpeed YAML points at the rendered JSON, so it needs ``-o``; a DDP or FSDP
    YAML has no DeepSpeed config, and no place for the training script's batch or optimizer flags (only
    ``--precision``, as its mixed_precision). ``given``: the other render flags typed, as ``--flag``."""
    if kind not in KINDS:
        raise UserError(f"--strategy must be one of {', '.join(KINDS)} with --to-accelerate, got {kind!r}")
    if kind == "deepspeed" and not output:
        raise UserError("--to-accelerate with DeepSpeed needs -o FILE.json: the YAML's deepspeed_config_file points "
                        "at it")
    extra = [flag for flag in given if flag != "--precision"] + (["-o"] if output else [])
    if kind != "deepspeed" and extra:
        raise UserError(f"--strategy {kind}: an accelerate YAML for {kind} holds no DeepSpeed config, batch or "
                        f"optimizer settings, so {extra[0]} would be lost: drop it (pass batch flags to the worker)")


def yaml_text(config: dict[str, Any], path: str, by: str = "dsbench render --to-accelerate") -> str:
    """The YAML file ``render --to-accelerate`` (or ``plan --write``) writes: how to run it, then the config."""
    machines = int(config.get("num_machines", 1))
    # accelerate's multi-node launch: the same command on every node, each with its own --machine_rank, all pointing
    # at node 0 (accelerate's launch docs); plan --write's placeholder address refuses to start until it is set
    unset = ", once main_process_ip below is node 0's address" if config.get("main_process_ip") == MAIN_NODE_IP else ""
    run = (f"#   accelerate launch --config_file {path} -m dsbench.train\n" if machines == 1 else
           f"# on each of the {machines} nodes, R = 0 (the main node) .. {machines - 1}{unset}:\n"
           f"#   accelerate launch --config_file {path} --machine_rank R -m dsbench.train\n")
    return (f"# written by {by}; run it with:\n" + run
            + "# (a relative deepspeed_config_file is read from the folder accelerate is launched in)\n"
            + to_yaml(config))


def to_yaml(data: dict[str, Any]) -> str:
    """Deterministic YAML text (imports PyYAML lazily)."""
    import yaml

    return yaml.safe_dump(data, sort_keys=True, default_flow_style=False)


def build(spec: LaunchSpec) -> LaunchCommand:
    """``accelerate launch --config_file Y [--num_processes ...] --module M args``; on several nodes one such
    command per node with its ``--machine_rank``, started over ssh (as accelerate's multi-node docs do).
    With the user's own YAML (``spec.user_accelerate_config``) that file is passed as is, with its overrides."""
    if spec.user_accelerate_config:
        files, options = {}, ["--config_file", spec.user_accelerate_config, *spec.accelerate_args]
    else:
        config = accelerate_config(spec)
        files = {spec.accelerate_config: to_yaml(config)}
        options = ["--config_file", spec.accelerate_config, "--num_processes", str(config["num_processes"]),
                   "--num_machines", str(config["num_machines"]), "--main_process_ip", str(config["main_process_ip"]),
                   "--main_process_port", str(spec.master_port)]
    tail = ["--module", spec.module, *worker_args(spec)]
    if not spec.multinode():
        return LaunchCommand(argv=["accelerate", "launch", *options, *tail], env=cpu_env(spec), files=files)
    if spec.user_accelerate_config:  # the hostfile says where each machine is and how many ranks it runs
        options += ["--num_processes", str(spec.even_world()), "--num_machines", str(spec.nodes()),
                    "--main_process_ip", spec.first_host(), "--main_process_port", str(spec.master_port)]
    command = fan_out(spec, {host: [spec.python, "-m", "accelerate.commands.launch", *options, "--machine_rank",
                                    str(rank), *tail] for rank, host in enumerate(spec.selection())})
    return replace(command, files={**files, **command.files})
