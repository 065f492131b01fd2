"""The run's header record, written by rank 0 before the first step: the run's definition (hashed, so that runs
of one definition compare), where it ran, and how its figures are computed (peak, FLOPs per token, speed options).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dsbench.records import SCHEMA, flops_per_token
from dsbench.trainspec import PIPELINED, TrainSpec
from dsbench.worker import accelerate_env, setup
from dsbench.worker.prepared import Prepared


def header_record(spec: TrainSpec, run: Prepared, folder: Path) -> dict[str, Any]:
    """The run's header record: its definition (hashed), where it ran, and how its figures are computed (``run``:
    everything the rank set up)."""
    from dsbench.worker.dist import process_group_facts
    from dsbench.worker.metrics import device_peak

    shape, plan, info = run.shape, run.plan, run.info
    definition = {"strategy": run.strategy, "model": shape.to_dict(), "ds_config": run.ds_config,
                  "seq_len": spec.seq_len, "micro_batch": plan.micro_batch, "grad_accum": plan.grad_accum,
                  "world_size": info.world_size, "precision": run.precision, "seed": spec.seed,
                  "tp": run.dims.tp, "pp": run.dims.pp,
                  # Ulysses' degree where it runs (absent otherwise: earlier runs' definitions hash as before)
                  **({"ulysses": run.dims.sp} if run.dims.sp > 1 else {}),
                  # FSDP2's shard group: torch_3d's, and FSDP's under HSDP (absent otherwise, as Ulysses' degree)
                  **({"dp_shard": run.dims.shard} if run.strategy == "torch_3d" or run.dims.replicate > 1
                     and run.strategy == "fsdp" else {}),
                  "fsdp": run.fsdp,
                  "activation_checkpointing": run.fsdp["activation_checkpointing"] if run.fsdp
                  else spec.activation_checkpointing}
    peak, peak_source = device_peak(info.device, run.precision, spec.peak_tflops)
    return setup.header(**definition, run_id=folder.name, config_hash=setup.config_hash(definition),
                        device=info.device, backend=info.backend, dp_size=plan.dp_size, global_batch=plan.global_batch,
                        steps=spec.steps, warmup_steps=spec.warmup, gather_every=spec.gather_every,
                        process_group=process_group_facts(), schema=SCHEMA, hostnames=run.hostnames,
                        dataset=spec.dataset or "embedded:pydoc_data", tokens=int(plan.sequences.numel()),
                        num_params=shape.num_params(),
                        flops_per_token=flops_per_token(shape.num_params(), shape.layers, shape.q_width, spec.seq_len),
                        peak_tflops=peak, peak_tflops_source=peak_source,
                        resumed_from=({"path": str(run.resumed[0]), "step": run.resumed[1].step}
                                      if run.resumed else None),
                        launcher_env=accelerate_env.launcher_env(os.environ),
                        sequence_parallel=spec.sequence_parallel, loss_parallel=spec.loss_parallel,
                        pipeline_schedule=spec.pipeline_schedule if run.strategy in PIPELINED else None,
                        recompute="full" if definition["activation_checkpointing"] else spec.recompute,
                        virtual_stages=spec.virtual_stages,
                        speed=_speed_options(spec, run))


def _speed_options(spec: TrainSpec, run: Prepared) -> dict[str, Any]:
    """What the run did to go fast, as the report shows it: compilation, the attention kernel the model calls
    (transformers' ``attn_implementation``: "sdpa" is torch's scaled_dot_product_attention, which picks flash or
    memory-efficient kernels on GPU) and the optimizer's implementation."""
    return {"compile": spec.compile, "fused_optimizer": spec.fused_optimizer,
            "attention": getattr(run.model.config, "_attn_implementation", None),
            "optimizer": optimizer_kind(run.engine, run.info.device)}


def optimizer_kind(engine: Any, device: str) -> str:
    """The optimizer implementation a run steps with: DeepSpeed's own choice (FusedAdam, DeepSpeedCPUAdam under
    offload, ...) by its class, torch AdamW's kernel by its flags (torch picks foreach on CUDA, the for-loop on CPU
    when neither is asked for)."""
    inner = getattr(getattr(engine, "engine", None), "basic_optimizer", None)
    if inner is not None:
        return type(inner).__name__
    optimizer = getattr(engine, "optimizer", None)
    if optimizer is None:
        return "unknown"
    flags = optimizer.defaults
    kernel = ("fused" if flags.get("fused") else "foreach" if flags.get("foreach") or device.startswith("cuda")
        else "for-loop")
    return f"{type(optimizer).__name__} ({kernel})"
