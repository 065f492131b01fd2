"""Estimate one strategy on one cluster: memory per rank, step time and MFU (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsbench.models import PROJECTION_NORM
from dsbench.plan import gpu_estimate, interval
from dsbench.plan.calls import NO_LATENCY, collective_calls
from dsbench.plan.candidate import Candidate
from dsbench.plan.comm import (
    Calls,
    Collective,
    data_parallel_comm,
    loss_parallel_comm,
    pipeline_comm,
    projection_norm_comm,
    sequence_parallel_comm,
    tensor_parallel_comm,
    tied_embedding_comm,
    ulysses_comm,
)
from dsbench.plan.engine_time import (
    check_seconds,
    deepspeed_measured,
    framework_seconds,
    nvme_seconds,
    offload_seconds,
)
from dsbench.plan.inputs import Cluster, Workload
from dsbench.plan.memory import (
    Accounting,
    ModelStates,
    accounting_for,
    held_params,
)
from dsbench.plan.pipeline_time import pipeline_seconds, schedule_seconds
from dsbench.plan.rank_memory import rank_memory
from dsbench.records import flops_per_token

GIB = 2**30


@dataclass(frozen=True, slots=True)
class Estimate:
    candidate: Candidate
    accounting: Accounting
    dp: int
    states: ModelStates
    activations: float
    buffers: float
    device_total: float
    fits: bool
    host_per_node: float
    nvme_per_node: float
    compute_s: float
    comm: list[Collective]
    exposed_comm_s: float
    offload_s: float
    optimizer_s: float
    framework_s: float
    """The engine's own work beyond compute and collectives (FSDP2's per-unit hooks, measured by calibrate)."""
    bubble: float
    step_s: float
    step_s_no_overlap: float
    mfu: float
    tokens_per_s: float
    dominant: str
    notes: list[str] = field(default_factory=list)
    check_s: float = 0.0
    """What ``calibrate --check`` found the family's steps pay beyond the named terms (scale - 1, x them); in step_s."""
    step_range_s: tuple[float, float] | None = None
    """The step's low and high seconds that the profile's timing spreads allow (dsbench/plan/interval.py); None
    without a profile that stores spreads."""

    def to_dict(self) -> dict[str, Any]:
        c = self.candidate
        return {"name": c.name, **c.planner_fields, "dp": self.dp, "activation_checkpointing": c.checkpointing,
                "autocast": c.autocast, "config_accounting": c.config_accounting,
                "accounting": self.accounting.name, "fits": self.fits,
                "memory_gib": {"params": self.states.params / GIB, "grads": self.states.grads / GIB,
                               "optimizer_states": self.states.optimizer / GIB,
                               "master_weights": self.states.master / GIB, "offloaded_host": self.states.host / GIB,
                               "offloaded_nvme": self.states.nvme / GIB, "activations": self.activations / GIB,
                               "buffers": self.buffers / GIB, "device_total": self.device_total / GIB},
                "host_gib_per_node": self.host_per_node / GIB, "nvme_gib_per_node": self.nvme_per_node / GIB,
                "compute_s": self.compute_s, "exposed_comm_s": self.exposed_comm_s, "offload_s": self.offload_s,
                "optimizer_s": self.optimizer_s, "framework_s": self.framework_s, "check_s": self.check_s,
                "bubble": self.bubble, "step_s": self.step_s,
                "step_range_s": list(self.step_range_s) if self.step_range_s else None,
                "step_s_no_overlap": self.step_s_no_overlap,
                "mfu": self.mfu, "tokens_per_s": self.tokens_per_s, "dominant": self.dominant,
                "collectives": [{"what": x.what, "kind": x.kind, "bytes_per_rank": x.bytes_per_rank,
                                 "seconds": x.seconds} for x in self.comm], "notes": self.notes}


def estimate(cand: Candidate, wl: Workload, cl: Cluster) -> Estimate:
    """Memory, time and MFU of ``cand`` for ``wl`` on ``cl``."""
    shape = wl.shape
    acc = accounting_for(wl.precision, cand.strategy, wl.accounting or cand.config_accounting)
    dims = cand.dims(cl.world)
    model_parallel, dp = dims.model_parallel, dims.dp
    # ZeRO shards over (and reduces gradients across) the sequence-data-parallel group under Ulysses: dp x sp ranks
    # (DeepSpeed's engine takes its data-parallel group from the Ulysses mpu's get_sequence_data_parallel_group)
    shards = dims.shard if cand.strategy == "fsdp_hybrid" else dp * dims.sp  # HSDP: its shard group
    held = held_params(shape, cand.tp, cand.pp, vocab_parallel_head=cand.vocab_parallel_head)
    # The global batch is fixed across candidates: with TP/PP the data-parallel degree shrinks, so each
    # replica accumulates tp x pp times more micro-batches per step.
    accum = dims.accumulation_for(wl.grad_accum)
    states, activations, buffers = rank_memory(cand, wl, acc, held, shards, accum)
    device_total = states.device + activations + buffers
    tokens = wl.micro_batch * accum * wl.seq_len  # per data-parallel replica per step
    # model FLOPs per token 6N + 12·L·h·s (PaLM App. B), for MFU
    model_flops = flops_per_token(shape.num_params(), shape.layers, shape.q_width, wl.seq_len) * tokens
    compute, compute_with_bubble, comm, exposed, optimizer, framework, gpu_offload, notes = _time_terms(
        cand, wl, cl, held, dp, shards, acc, accum)
    # the GPU model's host offload (an NVMe offload's swaps are the planner's), else the planner's whole term
    offload = (gpu_offload + nvme_seconds(states) if gpu_offload is not None
               else offload_seconds(cand, states, held / shards, cl, accum))
    bubble = 1 - compute / compute_with_bubble  # its idle share: (P - 1)/(V·M + P - 1) when the stages are equal
    step = compute_with_bubble + exposed + offload + optimizer + framework
    no_overlap = compute_with_bubble + sum(c.seconds for c in comm) + offload + optimizer + framework
    check = check_seconds(cand, step, cl)
    span = _step_range(cand, cl, step, check, {"compute": compute_with_bubble, "communication": exposed,
                                               "optimizer": optimizer, "framework": framework})
    step, no_overlap = step + check, no_overlap + check
    mfu = model_flops / model_parallel / (step * cl.peak_tflops * 1e12)
    terms = {"compute": compute, "communication": exposed, "offload": offload,
             "pipeline bubble": compute_with_bubble - compute, "optimizer": optimizer, "framework": framework}
    fits = device_total <= cl.gpu_mem_gib * GIB * 0.9 and states.host * cl.gpus_per_node <= cl.host_mem_gib * GIB
    return Estimate(candidate=cand, accounting=acc, dp=dp, states=states, activations=activations, buffers=buffers,
                    device_total=device_total, fits=fits, host_per_node=states.host * cl.gpus_per_node,
                    nvme_per_node=states.nvme * cl.gpus_per_node, compute_s=compute, comm=comm,
                    exposed_comm_s=exposed, offload_s=offload, optimizer_s=optimizer, framework_s=framework,
                    bubble=bubble, step_s=step, step_s_no_overlap=no_overlap, mfu=mfu, tokens_per_s=tokens * dp / step,
                    dominant=max(terms, key=lambda k: terms[k]), check_s=check, step_range_s=span, notes=notes)


def _time_terms(cand: Candidate, wl: Workload, cl: Cluster, held: float, dp: int, shards: int, acc: Accounting,
                accum: int) -> tuple[float, float, list[Collective], float, float, float, float | None, list[str]]:
    """The step's terms but the planner's offload: compute (the busiest stage's, and with the pipeline's bubble),
    the collectives and their exposed seconds, the optimizer and the engine's own work; on a known GPU kind without
    a machine profile, gpu_time.py's terms instead (the collectives stay listed) with its host offload (None
    otherwise), and their notes."""
    stages = stage_seconds(cand, wl, cl)
    compute = accum * max(stages)  # the busiest stage's (the only one's, without a pipeline) work sets the pace
    compute_with_bubble = pipeline_seconds(stages, accum, cand.virtual_stages, cand.zero_bubble)
    counted = collective_calls(cand, wl.shape, held, wl.reduce_bucket, acc)
    comm, exposed = _communication(cand, wl, cl, held, shards if cand.ulysses > 1 else dp, shards, acc, accum,
                                   compute, counted)
    optimizer = _optimizer_seconds(cand, held, shards, cl)
    framework = framework_seconds(cand, wl.shape, accum, cl, counted)
    if cl.gpu_model is not None:  # a GPU kind the profiles know, no machine profile: gpu_time.py's terms
        compute, compute_with_bubble, exposed, optimizer, framework, offload, notes = gpu_estimate.terms(cand, wl, cl)
        return compute, compute_with_bubble, comm, exposed, optimizer, framework, offload, notes
    return compute, compute_with_bubble, comm, exposed, optimizer, framework, None, []


def _optimizer_seconds(cand: Candidate, held: float, shards: int, cl: Cluster) -> float:
    """The optimizer step over the parameters this rank updates (its shard under ZeRO-1/2/3 and FSDP), at the
    measured rate; without a profile it is not counted (small beside compute on a GPU)."""
    stepped = held / shards if cand.strategy not in ("ddp", "zero0") else held
    return stepped / cl.optimizer_params_per_s if cl.optimizer_params_per_s else 0.0


def _step_range(cand: Candidate, cl: Cluster, step: float, check: float,
                parts: dict[str, float]) -> tuple[float, float] | None:
    """The step's range from each calibrated timing's spread (plan/interval.py), scaled as the check scales it."""
    scale = (step + check) / step if step > 0 else 1.0
    return interval.step_range(step + check, parts, interval.framework_timings(cand), dict(cl.spread), scale)


def stage_seconds(cand: Candidate, wl: Workload, cl: Cluster) -> list[float]:
    """Seconds of one micro-batch's forward+backward on each pipeline stage (one entry without a pipeline).

    A stage's share of the whole model's time is its share of the model's matrix work: 6 FLOPs per token for every
    parameter it multiplies by (its blocks, split tp ways where Megatron splits them; the final norm and the LM head,
    or the tied embedding serving as the head, on the last stage) plus its layers' attention, 12·L·h·s/tp (PaLM
    App. B). Embedding lookups multiply nothing, so the first stage's embeddings add no time; in the whole model's
    6N they are FLOPs that were never done, and the measured rate (6N + 12·L·h·s per token, as runs count it)
    already spreads the real work over them. Activation checkpointing adds one forward (8/6)."""
    shape, parts = wl.shape, wl.shape.parts()
    head = parts["head"] or parts["embedding"]  # a tied head multiplies by the embedding matrix
    vocab_split = cand.vocab_parallel_head  # AutoTP's head, and torch_tp's under --loss-parallel (held_params)
    attention = 12 * shape.hidden * wl.seq_len  # per layer per token

    def work(blocks: int, last: bool, tp: int, vocab_tp: int) -> float:
        block = parts["block_split"] / tp + parts["block_whole"]
        return 6 * (blocks * block + (parts["final_norm"] + head / vocab_tp if last else 0)) + blocks * attention / tp

    whole = work(shape.layers, True, 1, 1)
    tokens = wl.micro_batch * wl.seq_len
    whole_seconds = flops_per_token(shape.num_params(), shape.layers, shape.q_width, wl.seq_len) * tokens / (
        cl.achieved_tflops(wl.micro_batch) * 1e12)
    base, extra = divmod(shape.layers, cand.pp)  # earlier stages take the remainder (memory.held_params)
    stages = [work(base + (1 if stage < extra else 0), stage == cand.pp - 1, cand.tp, cand.tp if vocab_split else 1)
              for stage in range(cand.pp)]
    # Ulysses: each rank computes 1/sp of every sequence's tokens in the linear layers and 1/sp of the heads over
    # the whole sequence in attention, 1/sp of the micro-batch's work either way (Jacobs et al. 2023 sec. 3)
    return [whole_seconds * share / whole * (8 / 6 if cand.checkpointing else 1.0) / cand.ulysses
            for share in stages]


def _data_parallel(cand: Candidate, cl: Cluster, held: float, dp: int, shards: int, acc: Accounting, accum: int,
                   counted: Calls) -> list[Collective]:
    """The data-parallel collectives of a step, on the link their group spans (HSDP's: its shard group)."""
    group = shards if cand.strategy == "fsdp_hybrid" else dp
    dp_link = cl.inter if (cl.nodes > 1 and group > cl.gpus_per_node // (cand.tp * cand.pp)) else cl.intra
    # a measured DeepSpeed cost per reduction holds its collectives' latency: then only their bytes count here
    comm = data_parallel_comm(cand.strategy, held, group, dp_link,
                              acc.params, acc.grads, accum, NO_LATENCY if deepspeed_measured(cand, cl) else counted)
    if cand.strategy == "fsdp_hybrid" and dp > shards:  # the replicas all-reduce their gradient shards, in FSDP2's
        # reduce stream beside the backward (fully_shard on a 2-D mesh: foreach_reduce's all-reduce over dp_replicate)
        comm += data_parallel_comm("ddp", held / shards, dp // shards, cl.inter if cl.nodes > 1 else cl.intra,
                                   acc.params, acc.grads)
    return comm


def _communication(cand: Candidate, wl: Workload, cl: Cluster, held: float, dp: int, shards: int, acc: Accounting,
                   accum: int, compute: float, counted: Calls) -> tuple[list[Collective], float]:
    """Every collective of a step and the seconds of it left exposed: data-parallel collectives overlap the
    backward (≈ 2/3 of compute; ZeRO-3/FSDP gathers the whole step, HSDP's cross-node all-reduce with them) where
    the backend overlaps at all; TP's and PP's traffic are on the critical path."""
    shape = wl.shape
    act_bytes = 2 if wl.precision in ("bf16", "fp16") else 4
    comm = _data_parallel(cand, cl, held, dp, shards, acc, accum, counted)
    overlap = compute if cand.strategy in ("zero3", "fsdp", "fsdp_hybrid") else compute * 2 / 3
    exposed = max(0.0, sum(c.seconds for c in comm) - (overlap if cl.overlap_comm else 0.0))
    critical = []
    if cand.tp > 1:
        split = sequence_parallel_comm if cand.sequence_parallel else tensor_parallel_comm
        critical += split(shape.layers / cand.pp, wl.seq_len, wl.micro_batch, shape.hidden, cand.tp, cl.intra,
                          act_bytes, accum)
        if shape.arch in PROJECTION_NORM:
            critical += projection_norm_comm(shape.layers / cand.pp, wl.seq_len, wl.micro_batch, cand.tp, cl.intra,
                                             accum)
        if cand.loss_parallel:
            critical += loss_parallel_comm(wl.seq_len, wl.micro_batch, shape.hidden, cand.tp, cl.intra, act_bytes,
                                           accum, cand.sequence_parallel)
    if cand.pp > 1:
        pipe_link = cl.inter if cl.nodes > 1 else cl.intra
        # interleaved: each micro-batch crosses every stage boundary once per chunk, V times the sends
        critical += pipeline_comm(wl.seq_len, wl.micro_batch, shape.hidden, cand.pp, pipe_link, act_bytes,
                                  accum * cand.virtual_stages, latency=not schedule_seconds(cand, accum, cl.pipe_costs))
        if shape.tied_embeddings:
            critical += tied_embedding_comm(shape.parts()["embedding"], acc.grads, pipe_link)
    if cand.ulysses > 1:
        critical += ulysses_comm(shape, wl.seq_len, wl.micro_batch, cand.ulysses, cl.intra, act_bytes, accum)
    return comm + critical, exposed + sum(c.seconds for c in critical)
