"""What dsbench's worker makes of a user's accelerate YAML (pure): the DeepSpeed config accelerate would build from
its inline settings, what the worker refuses before anything starts, and what it does differently."""

from __future__ import annotations

from typing import Any

from dsbench.configs.accelerate import (
    DEFAULT_ZERO_STAGE,
    as_int,
    dynamo_backend,
    schema,
    section_keys,
    size_of,
    starts_one_process,
    ulysses_degree,
)
from dsbench.configs.templates import load_template
from dsbench.errors import UserError
from dsbench.strategies import ACCELERATE_TYPES


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
# SHARD_GRAD_OP is False). Since 2026-12-01 the others too, on FSDP2's 2-D mesh (--dp-shard): NO_SHARD keeps whole
# replicas (shard groups of 1), HYBRID_SHARD and _HYBRID_SHARD_ZERO2 shard within a machine and replicate across
# (FSDP1 builds its intra-node group of the node's devices: torch.distributed.fsdp._init_utils).
FSDP1_RESHARD = {"FULL_SHARD": True, "SHARD_GRAD_OP": False, "NO_SHARD": True, "HYBRID_SHARD": True,
                 "_HYBRID_SHARD_ZERO2": False}
FSDP1_MACHINE_SHARDED = ("HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")
"""FSDP1 strategies whose shard group is a machine's processes."""



def fsdp1_strategy(value: Any) -> str:
    """An FSDP1 sharding strategy by name (accelerate also takes its 1-based index, FSDP_SHARDING_STRATEGY)."""
    names = schema()["fsdp_sharding_strategies"]
    index = as_int(value)
    return names[index - 1] if index is not None and 1 <= index <= len(names) else str(value).upper()


def worker_refusal(config: dict[str, Any], processes: int | None) -> str | None:
    """Why dsbench's worker cannot do what ``config`` asks of ``accelerate launch`` (None when it can): said before
    anything starts, rather than a run that quietly trains something else."""
    kind = config.get("distributed_type")
    if kind == "MULTI_CPU" and (processes or 1) > 1:
        how = ("accelerate 1.15 starts one process for it without mpirun" if starts_one_process(config, processes)
               else "dsbench does not start accelerate's mpirun launches (mpirun_config)")
        return (f"distributed_type MULTI_CPU: {how}; use MULTI_GPU, which dsbench runs as CPU ranks over gloo on a "
                "machine without a GPU")
    if kind not in ACCELERATE_TYPES and kind != "MULTI_CPU":
        return (f"distributed_type {kind}: dsbench's worker runs {', '.join(ACCELERATE_TYPES)} (and MULTI_CPU with "
                "one process)")
    sizes = {key: as_int(value) for key, value in section_keys(config, "parallelism_config").items()
             if key.endswith("_size")}
    # dp_shard alone is FSDP/ZeRO sharding, which the engines do, and with dp_replicate under FSDP2 it is HSDP, which
    # the FSDP engine runs (--dp-shard; its sizes are validate's: accelerate_check._hsdp); the other sizes split the
    # model or the sequence otherwise
    hsdp = kind == "FSDP" and size_of(sizes, "dp_replicate_size") > 1
    # under DeepSpeed, sp_size is DeepSpeed Ulysses (ALST), which the worker's DeepSpeed engine runs
    # (worker/accelerate_env.with_ulysses); its dp sizes are informational there (ParallelismConfig skips its size
    # check for DeepSpeed's sequence parallelism: DeepSpeed's own groups are sp consecutive ranks x world / sp)
    ulysses = (sp := ulysses_degree(config)) > 1
    parallel = [f"parallelism_config.{key} {size}" for key, size in sizes.items()
                if (size or 1) > 1 and not key.endswith("dp_shard_size")
                and not (hsdp and key.endswith("dp_replicate_size")) and not (ulysses and key.endswith("sp_size"))]
    if parallel:
        return (f"{parallel[0]}: accelerate's context/tensor parallelism, sequence parallelism outside DeepSpeed (and "
                "replicas outside FSDP) are not run by dsbench's worker; delete parallelism_config to train plain "
                "data parallelism")
    if ulysses and (processes or 0) % sp:
        return (f"parallelism_config.parallelism_config_sp_size {sp} does not divide the "
                f"{processes} processes (DeepSpeed's Ulysses groups take sp_size consecutive ranks each)")
    if str(config.get("mixed_precision") or "no") == "fp8":  # --precision is refused beside a YAML: the YAML's to fix
        return "mixed_precision fp8: dsbench's worker trains in fp32, bf16 or fp16; set mixed_precision: bf16 in it"
    fsdp = section_keys(config, "fsdp_config")
    if kind == "FSDP" and fsdp.get("fsdp_version", 1) == 1:
        strategy = fsdp1_strategy(fsdp.get("fsdp_sharding_strategy", "FULL_SHARD"))
        if strategy not in FSDP1_RESHARD:
            return f"fsdp_sharding_strategy {strategy}: FSDP1 has {', '.join(FSDP1_RESHARD)}"
    return None


def worker_notes(config: dict[str, Any], compiled: bool = False) -> list[str]:
    """What the worker does differently from a Hugging Face script under the same YAML, without changing the
    losses (said at launch); ``compiled``: the worker's own ``--compile`` was given."""
    notes = []
    fsdp = section_keys(config, "fsdp_config")
    policy = str(fsdp.get("fsdp_auto_wrap_policy") or "NO_WRAP").upper()
    if config.get("distributed_type") == "FSDP" and policy != "TRANSFORMER_BASED_WRAP":
        notes.append(f"fsdp_auto_wrap_policy {policy}: dsbench shards every transformer block, then the root "
                     "(TRANSFORMER_BASED_WRAP); the losses are the same, the all-gathers are per block")
    if section_keys(config, "deepspeed_config").get("zero3_init_flag") is True:
        notes.append("zero3_init_flag: dsbench builds the model from its config on every rank, then DeepSpeed "
                     "partitions it (no deepspeed.zero.Init while building)")
    attention = section_keys(config, "parallelism_config").get("parallelism_config_sp_attn_implementation")
    if ulysses_degree(config) > 1 and attention not in (None, "sdpa"):
        notes.append(f"parallelism_config_sp_attn_implementation {attention}: dsbench's worker runs the model's SDPA "
                     "attention inside DeepSpeed's Ulysses wrapper (the same math; a CUDA kernel such as "
                     "flash-attn is a GPU script's choice)")
    dynamo = dynamo_backend(config)
    if dynamo and not compiled:
        notes.append(f"dynamo_backend {dynamo}: dsbench's worker does not torch.compile the model from the YAML; "
                     "add -- --compile to compile each transformer block (accelerate's regional compilation)")
    return notes


def script_completes(config: dict[str, Any], inline: bool) -> bool:
    """Whether the worker, as the training script, brings its own optimizer (and WarmupLR with a warm-up) to these
    DeepSpeed settings (:func:`with_script_optimizer`): accelerate's inline settings always; a file only when it names
    no optimizer (the HF Trainer's case). The rank (worker/resolve.py) and the launch's flag check
    (configs/worker_flags.py) both ask here."""
    return inline or "optimizer" not in config


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
