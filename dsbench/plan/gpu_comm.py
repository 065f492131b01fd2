"""The GPU step-time model's communication terms (pure, stdlib only): ring collectives on the layout's links.

Each group's ring runs over NVLink when it fits in a node and over the network when it spans nodes (Megatron's rank
order: tp innermost, then cp, dp, pp), at the profile's measured efficiency of each link. The terms, per micro-batch
and layer on one GPU unless said (gpu_time.step_time sums them):
- tensor parallelism's all-reduces, or reduce-scatter + all-gather pairs under sequence parallelism, and Megatron's
  backward re-gather of the column-parallel inputs;
- context parallelism's ring-attention K/V passes or Ulysses' all-to-alls;
- the pipeline's activation and gradient sends;
- per step, data parallelism's gradient reduction and, for ZeRO-3/FSDP, its parameter gathers.
"""

from __future__ import annotations

from dsbench.models import PROJECTION_NORM
from dsbench.plan.gpu_layout import Layout
from dsbench.plan.gpu_profiles import GpuProfile


def ring_seconds(kind: str, nbytes: float, ranks: int, gbs: float, hw: GpuProfile) -> float:
    """A ring collective of ``nbytes`` (the full buffer) over ``ranks``: all-reduce moves 2(n-1)/n of it per GPU,
    reduce-scatter and all-gather (n-1)/n (Patarasuk and Yuan 2009; nccl-tests' bus bandwidth)."""
    if ranks <= 1:
        return 0.0
    share = (ranks - 1) / ranks * (2 if kind == "all_reduce" else 1)
    steps = (ranks - 1) * (2 if kind == "all_reduce" else 1)
    return share * nbytes / (gbs * 1e9) + steps * hw.collective_latency_us * 1e-6


def links(lay: Layout, hw: GpuProfile) -> tuple[float, float]:
    """Achievable bus bandwidth within and across nodes, GB/s per GPU."""
    return ((lay.intra_gbs or hw.nvlink_gbs) * hw.nvlink_efficiency,
            (lay.inter_gbs or hw.network_gbs) * hw.network_efficiency)


def group_gbs(span: int, lay: Layout, hw: GpuProfile) -> float:
    """A group whose ranks are ``span`` apart in rank order crosses nodes when its extent exceeds a node (Megatron's
    order: tp innermost, then cp, dp, pp), and then runs at one NIC per GPU. NCCL can spread a ring over all of a
    node's NICs; priced that way, the published tables fit worse overall (docs/planner.md, "Tables held out")."""
    intra, inter = links(lay, hw)
    return intra if span <= lay.gpus_per_node else inter


def tp_comm_seconds(lay: Layout, hw: GpuProfile) -> float:
    """Forward seconds of one block's TP collectives: 2 all-reduces of the block's activations (b·s·h, 16-bit), or
    with sequence parallelism 2 reduce-scatters and 2 all-gathers of the same buffers, which move the same bytes."""
    if lay.tp == 1:
        return 0.0
    nbytes = tp_buffer_bytes(lay)
    gbs = group_gbs(lay.tp, lay, hw)
    # OLMo-2's projection-wide q_norm and k_norm: 2 all-reduces of the b·s fp32 sums of squares (plan/comm.py's
    # projection_norm_comm; their backward's reduce-scatters are priced as these, by the caller's doubling)
    norms = (2 * ring_seconds("all_reduce", 4 * lay.micro_batch * lay.seq_len / lay.cp, lay.tp, gbs, hw)
             if lay.shape.family in PROJECTION_NORM else 0.0)
    if lay.sequence_parallel:
        return norms + 2 * (ring_seconds("reduce_scatter", nbytes, lay.tp, gbs, hw)
                            + ring_seconds("all_gather", nbytes, lay.tp, gbs, hw))
    return norms + 2 * ring_seconds("all_reduce", nbytes, lay.tp, gbs, hw)


def sp_regather_seconds(lay: Layout, hw: GpuProfile) -> float:
    """Backward seconds of one block's extra all-gathers under Megatron-LM's sequence parallelism: its column-parallel
    linears (QKV and the MLP's first) save their sequence-sharded input, not the gathered one, and gather it again
    in the backward for the weight gradient (Korthikanti et al. 2022 sec. 4.2.2; Megatron-LM's and apex's
    ``LinearWithGradAccumulationAndAsyncCommunication.backward``). Issued asynchronously beside the input-gradient
    GEMM; priced exposed, as this model prices every TP collective. torch's DTensor SP (torchtitan, dsbench's
    torch_tp) saves the gathered input, so only Megatron's runs (``kernels`` megatron) pay it."""
    if lay.tp == 1 or not lay.sequence_parallel or lay.kernels != "megatron":
        return 0.0
    return 2 * ring_seconds("all_gather", tp_buffer_bytes(lay), lay.tp, group_gbs(lay.tp, lay, hw), hw)


def tp_buffer_bytes(lay: Layout) -> float:
    """The buffer a block's TP collectives move: its b·s·h activations (this rank's CP share), 16-bit."""
    return 2 * lay.micro_batch * lay.seq_len / lay.cp * lay.shape.hidden


def cp_comm_seconds(lay: Layout, hw: GpuProfile, attention: float) -> float:
    """Exposed seconds of one block's context-parallel traffic, forward and backward.

    Ring attention (``p2p``): each of cp-1 steps passes this rank's K and V (16-bit) to the next, overlapped with
    that step's share of the attention compute (Liu et al. 2023, arXiv:2310.01889); the backward passes K, V and
    their gradients (twice the forward's). Ulysses (``a2a``): four all-to-alls before and after the attention core
    (q, k and v in, the output back; Jacobs et al. 2023 sec. 3), each moving (cp-1)/cp of this rank's 16-bit
    buffer, not overlapped (DeepSpeed's DistributedAttention waits for each); the backward runs their four
    transposes."""
    if lay.cp == 1:
        return 0.0
    s = lay.shape
    tokens = lay.micro_batch * lay.seq_len / lay.cp  # this rank's share of the sequence
    gbs = group_gbs(lay.tp * lay.cp, lay, hw)
    if lay.cp_comm == "a2a":
        buffers = 2 * tokens / lay.tp * (2 * s.q_width + 2 * s.kv_width)  # q and the output, k and v
        per_block = (lay.cp - 1) / lay.cp * buffers / (gbs * 1e9) + 4 * (lay.cp - 1) * hw.collective_latency_us * 1e-6
        return 2 * per_block
    kv_bytes = 2 * 2 * tokens * s.kv_width / lay.tp
    per_step = kv_bytes / (gbs * 1e9)
    return 3 * (lay.cp - 1) * max(0.0, per_step - attention / lay.cp)


def p2p_seconds(lay: Layout, hw: GpuProfile) -> float:
    """Per micro-batch: an activation send forward and a gradient send backward per virtual stage, each b·s·h
    16-bit values scattered over the TP ranks (Narayanan 2021 sec. 4.1), over the link between stages."""
    if lay.pp == 1:
        return 0.0
    v = lay.chunks
    nbytes = 2 * lay.micro_batch * lay.seq_len / lay.cp * lay.shape.hidden / lay.tp
    gbs = group_gbs(lay.tp * lay.cp * lay.dp + 1, lay, hw)
    return 2 * v * (nbytes / (gbs * 1e9) + hw.collective_latency_us * 1e-6)


def local_params(lay: Layout) -> float:
    """Parameters on the busiest GPU: its blocks' TP shards plus the (vocabulary-split) embedding."""
    s = lay.shape
    return lay.stage_layers * s.layer_params() / lay.tp + s.vocab * s.hidden / lay.tp


def dp_seconds(lay: Layout, hw: GpuProfile, compute: float) -> float:
    """Exposed seconds of the data-parallel traffic of one step (16-bit gradients and parameters; FSDP reduces in
    fp32 as torchtitan configures it). Overlapped engines hide what fits under the compute, less one layer's
    share that starts before (or ends after) any compute it could hide under."""
    d = lay.dp * lay.cp  # CP ranks hold the same weights: gradients reduce (and FSDP shards) over dp x cp
    if d == 1:
        return 0.0
    params = local_params(lay)
    gbs = group_gbs(lay.tp * d, lay, hw)  # d counts the cp ranks already
    grads16 = 2 * params
    if lay.strategy == "ddp":  # Megatron-LM 2021: one all-reduce after the last backward, not overlapped
        return ring_seconds("all_reduce", grads16, d, gbs, hw)
    if lay.strategy in ("zero1", "zero2"):
        return ring_seconds("reduce_scatter", grads16, d, gbs, hw) + ring_seconds("all_gather", grads16, d, gbs, hw)
    gathers = 2 if lay.strategy in ("zero3", "fsdp", "fsdp_hybrid") else 1  # forward, and again for the backward
    if lay.recompute == "full" and lay.strategy == "zero3":
        gathers += 1  # DeepSpeed's checkpointed forward gathers again
    # re-gathered every micro-batch (FSDP2 and HSDP reshard after each forward)
    micro = lay.micro_batches if lay.strategy in ("zero3", "fsdp", "fsdp_hybrid") else 1
    reduce_bytes = (4 if lay.strategy.startswith("fsdp") else 2) * params
    shard, replicas = d, 1
    if lay.strategy == "fsdp_hybrid":  # HSDP: gathers and reduce-scatters within a node's shard group
        shard = lay.hybrid_shard
        replicas, gbs = d // shard, group_gbs(lay.tp * shard, lay, hw)
    comm = micro * (gathers * ring_seconds("all_gather", grads16, shard, gbs, hw)
                    + ring_seconds("reduce_scatter", reduce_bytes, shard, gbs, hw))
    # ...then each shard's fp32 gradient all-reduced across the replicas, once per step, in the reduce stream
    # (torch FSDP2 on a 2-D mesh: reduce-scatter over dp_shard, all-reduce over dp_replicate)
    comm += ring_seconds("all_reduce", reduce_bytes / shard, replicas, group_gbs(lay.tp * d, lay, hw), hw)
    return max(0.0, comm - compute) + comm / lay.stage_layers
