"""The GPU memory model (pure, stdlib only): the peak of one GPU in a layout, allocated and reserved, by term.

- ``model_states``: 16-bit weights for compute, fp32 master weights, gradients and Adam's two moments, sharded as
  the strategy shards them (Rajbhandari et al. 2020, arXiv:1910.02054 sec. 5; FSDP2 keeps fp32 shards and gathers
  16-bit copies, one block at a time with one prefetched).
- ``activations``: per block, Korthikanti et al. 2022 (arXiv:2205.05198) sec. 4 for GPT: 34·s·b·h + 5·a·s²·b bytes
  without TP; with TP t the parts inside the TP region divide by t, the rest (10·s·b·h) only with sequence
  parallelism; a flash kernel stores no s² term; selective recompute drops the attention core's tensors; full
  recompute keeps each block's input (2·s·b·h) and one block's full set for the backward. Each pipeline rank holds
  the micro-batches its schedule has in flight (the first stage p under 1F1B, times 1 + (p-1)/(p·v) when
  interleaved: Korthikanti eq. 5), the last stage the logits too: ``plan.pipeline_peak``, every rank in torch's
  order; the busiest counts.
- ``logits``: the output layer's 16-bit logits, their fp32 upcast and its gradient for the loss (b·s·V/t each).
- ``workspace``: cuBLAS workspace, NCCL buffers and the CUDA caching allocator's own reserve, named constants.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from dsbench.plan.gpu_layout import Layout
from dsbench.plan.pipeline_peak import busiest, in_flight_micro_batches

GIB = 1024**3
WORKSPACE_GIB = 1.5
"""cuBLAS workspaces (32 MiB per stream and handle on Hopper, cuBLAS docs "cublasSetWorkspace"), NCCL's channel
buffers (NCCL_BUFFSIZE 4 MiB x channels x peers, NCCL docs) and the kernels' scratch: a round figure."""
RESERVE_FRACTION = 0.08
"""The caching allocator's reserved memory above the allocated peak (fragmentation of freed blocks; PyTorch's CUDA
semantics notes): 5-10% in torchtitan's and dsbench's own H100 runs where both were recorded."""


NORM_BYTES = {"hf": 6, "eager": 10, "megatron": 2, "compiled": 2}
"""Bytes per element an RMSNorm keeps for its backward. hf: transformers' LlamaRMSNorm upcasts its input to fp32
(kept by pow and mul: 4) and keeps the bf16 normalised tensor for the weight's product (2); its input's cast keeps
nothing. eager (torchtitan, priced with its rows' measured peaks): its input and two fp32 copies (10). Fused or
compiled: the input only (2)."""


@dataclass(frozen=True)
class PeakMemory:
    allocated_gib: float
    reserved_gib: float
    terms: dict[str, float] = field(default_factory=dict)
    """GiB by term (their sum is ``allocated_gib``)."""
    busiest_stage: int | None = None
    """With a pipeline, the stage whose activations and logits are counted (0 the first); None without one."""


def _state_bytes(lay: Layout, params: float) -> dict[str, float]:
    """Model-state bytes on one GPU holding ``params`` parameters before data-parallel sharding."""
    strategy = lay.strategy
    shard = lay.dp * lay.cp  # FSDP and ZeRO shard over every data-parallel rank, CP ranks included
    if strategy == "fsdp_hybrid":  # HSDP: over the node's data-parallel ranks, replicated across nodes
        shard = lay.hybrid_shard
    layer = lay.shape.layer_params() / lay.tp
    grad = 2 if lay.kernels == "hf" else 4  # DeepSpeed's bf16 engine keeps 16-bit gradients; Megatron accumulates
    # in fp32 buffers (main_grad)
    if lay.offload:
        return _offloaded_state_bytes(lay, params, shard, layer)
    if strategy == "ddp" and lay.autocast:
        return _amp_state_bytes(lay, params, layer)
    if strategy == "ddp":
        return {"weights": 2 * params, "grads": grad * params, "optimizer": 12 * params}
    if strategy == "zero1":
        return {"weights": 2 * params, "grads": grad * params, "optimizer": 12 * params / shard}
    if strategy == "zero2":
        return {"weights": 2 * params, "grads": grad * params / shard + 2 * layer, "optimizer": 12 * params / shard}
    if strategy.startswith("fsdp") and lay.pp > 1:  # FSDP2 under torch's pipeline schedules: every micro-batch's
        # backward but the last runs with set_requires_gradient_sync(False) and set_reshard_after_backward(False)
        # (torch/distributed/pipelining/stage.py, backward_maybe_with_nosync), so the stage's 16-bit weights stay
        # gathered and its gradients accumulate unsharded, upcast to the reduce dtype (fp32 under torchtitan's and
        # dsbench's MixedPrecisionPolicy: _fsdp_param.py to_accumulated_grad_if_needed), until the step's one
        # reduce-scatter; one layer's 16-bit gradient waits to be added
        return {"weights": 4 * params / shard + 2 * params, "grads": 4 * params + 2 * layer,
                "optimizer": 8 * params / shard}
    if strategy == "fsdp_no_reshard":  # the 16-bit weights stay gathered after the forward
        return {"weights": 4 * params / shard + 2 * params, "grads": 4 * params / shard + 4 * layer,
                "optimizer": 8 * params / shard}
    # zero3, fsdp, fsdp_hybrid: fp32 shards, and two gathered 16-bit blocks (the current and the prefetched one)
    return {"weights": 4 * params / shard + 2 * 2 * layer, "grads": 4 * params / shard + 4 * layer,
            "optimizer": 8 * params / shard}


def _amp_state_bytes(lay: Layout, params: float, layer: float) -> dict[str, float]:
    """fp32 weights and the 16-bit casts autograd keeps until the backward (a block under full or per-op recompute
    keeps none, casting again as it runs again: the head's and the recomputed block's, tests/unit/test_amp_memory.py);
    no gradients at the forward's peak (zero_grad(set_to_none=True), torch's default) but DDP's fp32 buckets. A
    pipeline's first stage keeps its blocks' casts for each micro-batch in flight, each forward casting again under
    its own autocast (measured on 4 CPU ranks: tests/integration/test_engine_ranks.py), and its embedding lookup
    casts nothing."""
    if lay.recompute in ("full", "op"):
        casts = layer + (lay.shape.vocab * lay.shape.hidden / lay.tp if lay.pp == 1 else 0.0)
    elif lay.pp > 1:
        casts = lay.stage_layers * layer * in_flight_micro_batches(
            lay.pp, lay.micro_batches, lay.virtual_stages, gpipe=lay.schedule == "gpipe",
            zero_bubble=lay.schedule.endswith("zb"))
    else:
        casts = params
    return {"weights": 4 * params + 2 * casts, "grads": 4 * params if lay.dp > 1 else 0.0, "optimizer": 8 * params}


def _offloaded_state_bytes(lay: Layout, params: float, shard: int, layer: float) -> dict[str, float]:
    """Model states on the GPU under ZeRO-Offload: the fp32 master weights, moments and fp32 gradients are on the
    host (none here); the 16-bit copy of the updated partition lands in the weights (DeepSpeed PR #7309). ZeRO-1
    keeps its full 16-bit gradients until the boundary's reduction. ZeRO-2 copies each reduced gradient to the host
    from its reduce bucket (``contiguous_gradients``: the gradient is a view into the bucket,
    stage_1_and_2.reduce_independent_p_g_buckets_and_remove_grads) and accumulates on the host, so no gradient
    partition stays on the GPU: one block's gradients in flight. ZeRO-3 keeps its 16-bit partition, unless the
    parameters are offloaded too, and two gathered blocks; its gradient partitions live on the host (stage3's
    ``grad_partitions_flat_buffer`` under offload), so only one block's gradients and reduce bucket are on the
    GPU."""
    if lay.strategy == "zero1":
        return {"weights": 2 * params, "grads": 2 * params, "optimizer": 0.0}
    if lay.strategy == "zero2":
        return {"weights": 2 * params, "grads": 2 * layer, "optimizer": 0.0}
    partition = 0.0 if lay.offload_param else 2 * params / shard
    return {"weights": partition + 2 * 2 * layer, "grads": 4 * layer, "optimizer": 0.0}


def _llama_block_bytes(lay: Layout, sbh: float) -> tuple[float, float, float]:
    """A Llama-family block's kept bytes: (inside the TP region, outside it, kept whole on every TP rank whatever
    the sequence split). Attention keeps q, k, v and the kernel's output (o_proj's input: the same tensor): q and
    the output at the heads' width, k and v at the key/value heads' (h and h·kv/heads when head_dim is hidden /
    heads); SwiGLU keeps gate, up, silu(gate) and their product (4 sbf)."""
    s = lay.shape
    width = (2 * s.q_width + 2 * s.kv_width) / s.hidden  # 2 + 2·kv/heads when head_dim is hidden / heads
    per_norm = NORM_BYTES["compiled" if lay.compile else lay.kernels]
    norms = 2 * per_norm * sbh
    inside = 2 * width * sbh + 4 * 2 * s.ffn / s.hidden * sbh
    if s.qk_norm:  # Qwen3's q_norm and k_norm keep what a block's RMSNorm keeps, over q and k (split over tp)
        inside += per_norm * sbh * (s.q_width + s.kv_width) / s.hidden
    inputs = 2 * 2 * sbh  # the attention's and the MLP's input, kept by the regions' first matmuls: replicated
    # over the TP ranks (Korthikanti's 10sbh counts them outside too); under sequence parallelism Megatron keeps
    # the shard and gathers again in the backward, DTensor keeps the all-gathered whole (measured on CPU ranks:
    # docs/benchmarks.md, "Activation memory per rank")
    if lay.kernels == "megatron" or not lay.sequence_parallel:
        return inside, norms + inputs, 0.0
    return inside, norms, inputs


def _block_activation_bytes(lay: Layout) -> float:
    """Bytes one block keeps for its backward, for one micro-batch, under the layout's recompute."""
    s, b, t = lay.shape, lay.micro_batch, lay.tp
    sbh = lay.seq_len / lay.cp * b * s.hidden
    if lay.recompute == "full":
        return 2 * sbh / (t if lay.sequence_parallel else 1)
    ratio = s.ffn / s.hidden
    whole = 0.0  # kept whole on every TP rank whatever the sequence split
    if s.arch == "llama":
        inside, outside, whole = _llama_block_bytes(lay, sbh)
    else:  # Korthikanti: 24·sbh inside the TP region (f = 4h), 10·sbh outside
        inside = (8 + 4 * ratio) * sbh
        outside = 10 * sbh
        if lay.kernels == "hf" and not lay.compile:  # transformers' tanh GELU (NewGELUActivation) run op by op keeps
            inside += 3 * 2 * ratio * sbh  # three more 16-bit sbf tensors: tanh's output, 0.5·x and 1 + tanh
    core = 5 * s.heads * (lay.seq_len / lay.cp) * lay.seq_len * b if lay.attention == "eager" else 0.0
    if lay.recompute == "selective":
        core = 0.0
    if lay.recompute == "op":  # saved: every second linear output (q, k, v, o, the MLP's), the attention kernel's
        # output and the block's input; everything else is recomputed
        linear = 2 * sbh * (1 + (2 * s.q_width + 2 * s.kv_width) / s.hidden) + 2 * sbh * ratio * (
            s.mlp_matrices - 1)
        return (linear / 2 + 2 * sbh) / t + 2 * sbh / (t if lay.sequence_parallel else 1)
    if lay.autocast:  # the residual stream stays fp32: each norm's kept input (GPT-2) or normalised output (Llama)
        outside += 2 * 2 * sbh  # in 4 bytes, not 2
        if s.arch == "gpt" and lay.kernels == "hf" and not lay.compile:  # the tanh GELU after autocast's fp32 pow:
            inside += 2 * 2 * ratio * sbh  # tanh's output and 1 + tanh in fp32 (gpu_time.AUTOCAST_FP32)
    return (inside + core) / t + outside / (t if lay.sequence_parallel else 1) + whole


def peak_memory(lay: Layout) -> PeakMemory:
    """Peak GiB on the busiest GPU: the model states of the first pipeline stage (its blocks and the embedding; without
    a pipeline an untied output layer too), and
    the activations and logits of the rank that holds the most of them under the schedule's order (the first stage
    its micro-batches in flight, the last one the logits: plan/pipeline_peak.py)."""
    s = lay.shape
    heads = 1 if s.head_tied or lay.pp > 1 else 2  # an untied output layer beside the embedding
    params = lay.stage_layers * s.layer_params() / lay.tp + heads * s.vocab * s.hidden / lay.tp
    states = _state_bytes(lay, params)
    tokens = lay.micro_batch * lay.seq_len / lay.cp
    logits = tokens * s.vocab / lay.tp * (2 + 4 + 4)  # the loss's tensors, all freed by an input-gradient pass
    held = busiest(lay.pp, lay.micro_batches, _block_activation_bytes(lay), logits, logits, s.layers,
                   lay.virtual_stages, lay.schedule)
    activations = held.total - held.loss
    if lay.recompute in ("full", "op"):  # the block being recomputed holds its full set during its backward
        activations += _block_activation_bytes(_without_recompute(lay))
    terms = {"weights": states["weights"], "grads": states["grads"], "optimizer": states["optimizer"],
             "activations": activations, "logits": held.loss, "workspace": WORKSPACE_GIB * GIB}
    gib = {name: value / GIB for name, value in terms.items()}
    allocated = sum(gib.values())
    return PeakMemory(allocated, allocated * (1 + RESERVE_FRACTION), gib, held.rank if lay.pp > 1 else None)


def _without_recompute(lay: Layout) -> Layout:
    return replace(lay, recompute="none")
