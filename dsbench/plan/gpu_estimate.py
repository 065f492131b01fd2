"""The ranking's candidates on a GPU the profiles know (no machine profile): their time from the GPU time model
(gpu_time.py), so that strategies differ by their traffic, overlap and recompute instead of tying at peak x
efficiency. Memory stays the planner's (memory.py), which its tests pin to the ZeRO paper's tables."""

from __future__ import annotations

from dsbench.parallel import ParallelDims
from dsbench.plan.candidate import Candidate
from dsbench.plan.caveats import caveats
from dsbench.plan.gpu_layout import Layout, runs_autocast, shape_of_model
from dsbench.plan.gpu_time import step_time
from dsbench.plan.inputs import Cluster, Workload

COMPUTE = ("matmul", "attention", "elementwise", "recompute", "logits", "autocast")
EXPOSED = ("tp_comm", "cp_comm", "pp_p2p", "dp_comm")


def layout_for(cand: Candidate, wl: Workload, cl: Cluster) -> Layout:
    """The candidate, on its workload and cluster, as a GPU layout: the global batch fixed across candidates
    (--grad-accum per rank of pure data parallelism), HF modules with a flash kernel (what dsbench's worker runs),
    full recompute for checkpointing, DeepSpeed Ulysses as context parallelism over all-to-alls."""
    s = wl.shape
    shape = shape_of_model(s)
    world = cl.nodes * cl.gpus_per_node
    strategy = "ddp" if cand.strategy == "zero0" else cand.strategy
    return Layout(shape, wl.seq_len, cl.gpu_model.kind, world, cl.gpus_per_node, strategy, cand.tp, cand.pp,
                  micro_batch=wl.micro_batch, global_batch=ParallelDims(world=world).samples_per_step(
                      wl.micro_batch, wl.grad_accum), recompute="full" if cand.checkpointing else "none",
                  precision=wl.precision, kernels="hf",
                  schedule="interleaved" if cand.virtual_stages > 1 else "1f1b", virtual_stages=cand.virtual_stages,
                  inter_gbs=cl.inter.bandwidth_gbs,  # --interconnect or --bandwidth
                  cp=cand.ulysses, cp_comm="a2a",  # Ulysses: the sequence split, all-to-alls around attention
                  # zero0 is DeepSpeed's: 16-bit weights, unless its config asks for torch_autocast
                  autocast=cand.autocast or runs_autocast(cand.strategy, "hf"),
                  offload=cand.offload != "none", offload_param=cand.offload_param != "none")  # NVMe: via the host


def terms(cand: Candidate, wl: Workload, cl: Cluster) -> tuple[float, float, float, float, float, float, list[str]]:
    """Compute (the busiest stage's, all micro-batches), compute with the pipeline bubble, exposed communication,
    the optimizer, the framework's host time (DeepSpeed ZeRO's, which the GPU waits for) and ZeRO-Offload's
    (gpu_offload.py: the profile's host link, the host's CPU Adam and per-tensor work), in seconds per step, and
    the caveats of plan/caveats.py (the ranking prices datasheet profiles: nothing calibrated)."""
    lay = layout_for(cand, wl, cl)
    time = step_time(lay, cl.gpu_model)
    compute = sum(time.terms.get(name, 0.0) for name in COMPUTE)
    exposed = sum(time.terms.get(name, 0.0) for name in EXPOSED)
    notes = caveats(lay, time.terms, time.seconds, calibrated=False,
                    cpu_adam_rate=cl.gpu_model.offload_adam_params_per_s)
    return (compute, compute + time.terms["pp_bubble"], exposed, time.terms["optimizer"], time.terms["engine_host"],
            time.terms["offload"], notes)
