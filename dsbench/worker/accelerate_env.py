"""What ``accelerate launch`` asked this rank to run, read the way accelerate reads it.

accelerate passes a YAML's settings to the training process as environment variables (accelerate 1.15
utils/launch.py: ``ACCELERATE_USE_DEEPSPEED``, ``ACCELERATE_DEEPSPEED_*``, ``ACCELERATE_GRADIENT_*``,
``ACCELERATE_USE_FSDP``, ``FSDP_*``, ``ACCELERATE_MIXED_PRECISION``, ``PARALLELISM_CONFIG_*``), and its plugins read
them back. The worker builds those same plugins (``DeepSpeedPlugin``, ``FullyShardedDataParallelPlugin``) from the
environment and takes their settings, never ``Accelerator()``'s state: on a machine without a GPU that state is wrong
(../shared/FINDINGS.md: one process and rank 0 everywhere under DEEPSPEED, distributed type NO under FSDP).
Rank and world size come from ``torch.distributed``'s variables, as for every launcher.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any

from dsbench.configs.accelerate import hsdp_mismatch
from dsbench.configs.accelerate_worker import (
    FSDP1_MACHINE_SHARDED,
    FSDP1_RESHARD,
    fsdp1_strategy,
    with_script_optimizer,
)
from dsbench.errors import UserError

PLUGIN_SOURCE = "accelerate's DeepSpeed plugin (the YAML's inline deepspeed_config)"


def launched_by_accelerate(env: Mapping[str, str]) -> bool:
    """Every accelerate launcher sets ``ACCELERATE_MIXED_PRECISION`` (utils/launch.py, each ``prepare_*_env``)."""
    return "ACCELERATE_MIXED_PRECISION" in env


def launcher_env(env: Mapping[str, str]) -> dict[str, str] | None:
    """The variables accelerate set for this run (recorded in the metrics header), or None without accelerate."""
    if not launched_by_accelerate(env):
        return None
    return {key: env[key] for key in sorted(env) if key.startswith(("ACCELERATE_", "FSDP_", "PARALLELISM_CONFIG_"))}


def shard_group(env: Mapping[str, str], world: int) -> int:
    """The FSDP2 shard group accelerate's settings ask for, else 0 (every rank: plain FSDP, or no accelerate):
    ``parallelism_config``'s when it replicates (HSDP: dp_replicate_size x dp_shard_size, as ``ParallelismConfig``
    reads ``PARALLELISM_CONFIG_*``; a product other than the world is refused, as ``Accelerator`` refuses it), or an
    FSDP1 sharding strategy's: NO_SHARD 1 (whole replicas), HYBRID_SHARD and _HYBRID_SHARD_ZERO2 the machine's
    processes (torchrun's ``LOCAL_WORLD_SIZE``)."""
    if env.get("ACCELERATE_USE_PARALLELISM_CONFIG") == "true":
        sizes = {key: _size(env, f"PARALLELISM_CONFIG_{key.upper()}") for key in ("dp_replicate_size",
                                                                                  "dp_shard_size")}
        if sizes["dp_replicate_size"] == 1:
            return 0
        if why := hsdp_mismatch(sizes, world):
            raise UserError(f"accelerate's parallelism_config: {why}")
        return sizes["dp_shard_size"]
    if env.get("ACCELERATE_USE_FSDP") != "true" or env.get("FSDP_VERSION", "1") != "1":
        return 0
    strategy = fsdp1_strategy(env.get("FSDP_SHARDING_STRATEGY", "FULL_SHARD"))
    machine = _size(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else world
    if strategy == "NO_SHARD":
        return 1
    return machine if strategy in FSDP1_MACHINE_SHARDED and machine < world else 0


def _size(env: Mapping[str, str], name: str) -> int:
    """One size variable (``PARALLELISM_CONFIG_*_SIZE``, ``LOCAL_WORLD_SIZE``; 1 when unset), or a one-line error
    naming it."""
    try:
        return int(env.get(name, "1"))
    except ValueError:
        raise UserError(f"{name}={env[name]!r}: the launcher sets a whole number there") from None


def with_ulysses(raw: Any, source: str, env: Mapping[str, str]) -> Any:
    """The DeepSpeed config with the Ulysses degree an accelerate YAML asks for (``parallelism_config``'s sp_size,
    which ``accelerate launch`` exports as ``PARALLELISM_CONFIG_SP_SIZE`` and ``Accelerator._prepare_deepspeed``
    registers DeepSpeed's UlyssesSPAttentionHF with: accelerate 1.15's one backend, ``sp_backend: deepspeed``), as
    ``sequence_parallel_size``, the key the worker's DeepSpeed engine and DeepSpeed's own batch arithmetic read; a
    config that states another degree is refused. Unchanged without accelerate's sequence parallelism."""
    if env.get("ACCELERATE_USE_PARALLELISM_CONFIG") != "true" or env.get("ACCELERATE_USE_DEEPSPEED") != "true":
        return raw
    sp = _size(env, "PARALLELISM_CONFIG_SP_SIZE")
    if sp == 1 or not isinstance(raw, dict):
        return raw
    stated = raw.get("sequence_parallel_size")
    if stated not in (None, sp):
        raise UserError(f"{source}: sequence_parallel_size {stated}, but accelerate's parallelism_config asks for "
                        f"sp_size {sp}: make them one")
    return {**raw, "sequence_parallel_size": sp}


def inline_deepspeed(env: Mapping[str, str]) -> bool:
    """accelerate runs DeepSpeed from inline YAML settings (no ``deepspeed_config_file``)."""
    return env.get("ACCELERATE_USE_DEEPSPEED") == "true" and not env.get("ACCELERATE_DEEPSPEED_CONFIG_FILE")


def deepspeed_config(warmup_steps: int) -> tuple[dict[str, Any], list[str]]:
    """The DeepSpeed config accelerate builds from the YAML's inline settings (``DeepSpeedPlugin()`` reads the
    environment; ``set_mixed_precision`` as ``Accelerator`` calls it), completed with the optimizer the training
    script brings (:func:`dsbench.configs.accelerate_worker.with_script_optimizer`). Returns it and what was added."""
    from accelerate.utils import DeepSpeedPlugin

    plugin = DeepSpeedPlugin()
    plugin.set_mixed_precision(os.environ.get("ACCELERATE_MIXED_PRECISION", "no"))
    config = copy.deepcopy(plugin.deepspeed_config)
    config.pop("steps_per_print", None)  # accelerate writes float("inf"): not JSON, and only a log interval
    for section in ("offload_optimizer", "offload_param"):
        offload = config.get("zero_optimization", {}).get(section, {})
        if offload.get("nvme_path", "") is None:
            del offload["nvme_path"]  # accelerate's placeholder; DeepSpeed's schema wants a path or nothing
    return with_script_optimizer(config, warmup_steps)


def fsdp_settings(reshard: bool, cpu_offload: bool, activation_checkpointing: bool) -> dict[str, Any]:
    """FSDP as accelerate's ``FullyShardedDataParallelPlugin()`` reads it from the environment, mapped onto the
    worker's FSDP2 (``fully_shard``): FSDP1's sharding strategy becomes ``reshard_after_forward``
    (:data:`FSDP1_RESHARD`) and a shard group (:func:`shard_group`). Without accelerate, the worker's own flags."""
    if os.environ.get("ACCELERATE_USE_FSDP") != "true":
        return {"reshard": reshard, "cpu_offload": cpu_offload, "activation_checkpointing": activation_checkpointing}
    from accelerate.utils import FullyShardedDataParallelPlugin

    # sync_module_states (and the RAM-efficient loading that needs it) make accelerate's plugin ask for a GPU to
    # initialise on, and raise without one; the worker builds the same weights on every rank from the seed, so it
    # has nothing to sync: both are turned off here, every other setting is read from the environment
    launched = launcher_env(os.environ) or {}
    plugin = FullyShardedDataParallelPlugin(sync_module_states=False, cpu_ram_efficient_loading=False)
    # the plugin writes FSDP_CPU_RAM_EFFICIENT_LOADING=False into the environment (accelerate 1.15
    # utils/fsdp_utils.py, disable_fsdp_ram_efficient_loading); the run header records what `accelerate launch`
    # set, so the launcher's value is put back (nothing after this reads it)
    os.environ.update(launched)
    mixed = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
    if mixed in ("bf16", "fp16"):  # what AcceleratorState does with the YAML's mixed_precision (accelerate state.py)
        plugin.set_mixed_precision(mixed)
    policy = plugin.mixed_precision_policy
    version = plugin.fsdp_version
    strategy = None
    if version == 1:
        strategy = plugin.sharding_strategy.name
        reshard = FSDP1_RESHARD[strategy]  # every ShardingStrategy torch has (its shard group: shard_group)
        cpu_offload = bool(plugin.cpu_offload.offload_params)
    else:
        from torch.distributed.fsdp import CPUOffloadPolicy

        reshard, cpu_offload = bool(plugin.reshard_after_forward), isinstance(plugin.cpu_offload, CPUOffloadPolicy)
    return {"reshard": reshard, "cpu_offload": cpu_offload, "accelerate_amp": policy is not None,
            "activation_checkpointing": activation_checkpointing or bool(plugin.activation_checkpointing),
            "accelerate": {"fsdp_version": version, "sharding_strategy": strategy,
                           "reduce_dtype": str(policy.reduce_dtype).removeprefix("torch.") if policy else None,
                           "auto_wrap_policy": os.environ.get("FSDP_AUTO_WRAP_POLICY"),
                           "state_dict_type": os.environ.get("FSDP_STATE_DICT_TYPE")},
            "wrap": "every transformer block, then the root (fully_shard)"}
