"""The GPU step-time model (pure, stdlib only): named terms summed along the critical path of one optimizer step.

Per micro-batch and layer, on one GPU (its TP shard, its CP share of the sequence):
- ``matmul``: every GEMM of the block at the profile's size-dependent efficiency, on a roofline (a GEMM whose bytes
  take longer than its FLOPs is memory-bound). FLOPs as Narayanan et al. 2021 (arXiv:2104.04473) eq. 3 counts them:
  24·b·s·h² (+ the MLP's third matrix for SwiGLU) and 4·b·s²·h for attention, a backward of twice the forward.
- ``attention``: the score GEMMs; a flash kernel skips the masked half of causal attention (Dao 2023,
  arXiv:2307.08691 sec. 3.1) and keeps the scores on chip, with a backward of 2.5 forwards (it recomputes the
  scores); an eager one materialises them.
- ``elementwise``: norms, activations, dropout, residuals and softmax at HBM bandwidth, bytes from the activation
  list of Korthikanti et al. 2022 (arXiv:2205.05198) sec. 4.1; the backward moves twice the forward's bytes.
- ``recompute``: full recompute repeats the forward; selective repeats the attention core (Korthikanti sec. 5);
  torchtitan's per-op checkpointing repeats every second linear GEMM and the non-GEMM ops.
- ``tp_comm``: 2 all-reduces forward and 2 backward per layer (Megatron-LM, Shoeybi et al. 2019 fig. 4), 2 more
  in a full recompute; with sequence parallelism each becomes a reduce-scatter plus an all-gather of the same
  bytes (Korthikanti sec. 4.2.2), and Megatron's backward gathers its column-parallel linears' inputs again (2 more
  all-gathers). Not overlapped (Megatron-LM 2022).
- ``pp_bubble`` and ``pp_p2p``: (p-1)/v idle micro-batch slots (Narayanan 2021 sec. 2.2); one activation send and
  one gradient send per micro-batch and virtual stage, scattered over the TP ranks.
- ``dp_comm``: gradient all-reduce (ddp, not overlapped), reduce-scatter + all-gather (zero1/2), parameter
  gathers and gradient reduce-scatters (zero3, fsdp) overlapped with compute by prefetching.
- ``optimizer``: Adam's read and write of its fp32 states at HBM bandwidth (none when DeepSpeed offloads it).
- ``offload``: ZeRO-Offload's host link traffic, CPU Adam step and per-tensor host work (gpu_offload.py).
- ``engine_host``: the host work of a DeepSpeed ZeRO engine that the GPU waits for, per parameter tensor.
- ``autocast``: under torch.autocast over fp32 weights, the weight casts and the ops autocast runs in fp32.
- ``fp8_cast``: under fp8 (torchao's Float8 linears, tensorwise dynamic scaling) each linear's input, weight and
  output gradient scaled and cast to fp8 before its GEMMs, at HBM bandwidth.
The collectives (``tp_comm``, ``cp_comm``, ``pp_p2p``, ``dp_comm``) are priced in gpu_comm.py.

Memory-bound terms of the HF modules run eagerly go at the profile's ``hf_hbm_fraction`` of HBM bandwidth, and a 16-bit
GEMM with a dimension that is not a multiple of 8 at its ``unaligned_gemm_fraction`` of peak (gpu_profiles.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dsbench.parallel import ZERO_BUBBLE_SHARE
from dsbench.plan.gpu_comm import (
    cp_comm_seconds,
    dp_seconds,
    local_params,
    p2p_seconds,
    sp_regather_seconds,
    tp_comm_seconds,
)
from dsbench.plan.gpu_layout import Layout
from dsbench.plan.gpu_offload import offload_seconds
from dsbench.plan.gpu_profiles import GpuProfile
from dsbench.strategies import PLANNER

BYTES = {"bf16": 2, "fp16": 2, "fp8": 1}
ASYNC_TP_HIDDEN = 0.45
"""Fitted: the share of TP collective time torchtitan's Async TP hides, chosen on torchtitan-asynctp-2025-06 rows 1
and 2 (Llama 3.1 70B bf16, vanilla vs Async TP: 27.43 -> 25.11 s, while the model's TP term is about 5.3 s); the
other Async TP rows are out of sample for it (docs/planner.md)."""


@dataclass(frozen=True)
class StepTime:
    seconds: float
    terms: dict[str, float] = field(default_factory=dict)
    """Seconds per step by term (their sum is ``seconds``)."""
    model_flops: float = 0.0
    """Model FLOPs per step per GPU (6·N·tokens + attention, no recompute): the MFU numerator."""


def peak_flops(hw: GpuProfile, precision: str) -> float:
    """Dense FLOP/s at the sustained clock."""
    return hw.peak_tflops[precision] * 1e12 * hw.clock_fraction


FLASH_BACKWARD = 2.5
"""A flash kernel's backward over its forward: it recomputes QK^T, then dV, dP, dQ and dK, 5 GEMMs to the forward's
2 (Dao 2023, arXiv:2307.08691 sec. 3.1.2; FlashAttention's benchmarks count fwd+bwd as 3.5x the forward FLOPs,
the count behind the ``flash_fraction`` figures of its papers)."""


def gemm_seconds(m: float, n: float, k: float, count: float, hw: GpuProfile, precision: str) -> float:
    """``count`` GEMMs of m x k by k x n: the slower of their FLOPs at the efficiency of their output tile size
    (the smaller of m and n; tile and wave quantisation) and their bytes at HBM bandwidth (a roofline: a thin k
    makes a GEMM memory-bound)."""
    smallest = min(m, n)
    efficiency = hw.gemm_peak_fraction * smallest / (smallest + hw.gemm_half_dim)
    if BYTES.get(precision, 2) == 2 and any(round(d) % 8 for d in (m, n, k)):  # no 16-byte aligned tensor-core path
        efficiency = hw.unaligned_gemm_fraction
    flops = 2 * m * n * k * count
    moved = BYTES.get(precision, 2) * (m * k + k * n + m * n) * count
    return max(flops / (peak_flops(hw, precision) * efficiency), moved / (hw.hbm_tbs * 1e12))


def layer_times(lay: Layout, hw: GpuProfile) -> dict[str, float]:
    """Forward seconds of one block for one micro-batch on one GPU, by kind."""
    s, b, t, p = lay.shape, lay.micro_batch, lay.tp, lay.precision
    queries = lay.seq_len / lay.cp
    tokens = b * queries
    width = s.q_width  # heads x head width: the hidden size h unless the model states another head_dim
    linear = sum(gemm_seconds(m, n, k, 1, hw, p) for m, k, n in _linears(lay))  # QKV, output, up (and gate), down
    scores = "bf16" if p == "fp8" else p  # fp8 recipes (torchao Float8) keep attention in 16-bit
    if lay.attention == "flash":  # QK^T and PV: 4·b·s_q·s·h/t FLOPs, half of them masked out under causality
        flops = 0.5 * 4 * tokens * lay.seq_len * width / t
        attention = flops / (peak_flops(hw, scores) * hw.flash_fraction)
    else:  # two batched GEMMs per head, the scores written to and read from HBM
        attention = 2 * gemm_seconds(queries, lay.seq_len, s.head_width, b * s.heads / t, hw, scores)
    return {"matmul": linear, "attention": attention, "elementwise": _hbm_seconds(_elementwise_bytes(lay), lay, hw)}


def _hbm_seconds(nbytes: float, lay: Layout, hw: GpuProfile) -> float:
    """Seconds of memory-bound ops that move ``nbytes``: at HBM bandwidth, or at the profile's ``hf_hbm_fraction``
    of it for the Hugging Face modules run eagerly."""
    hf = lay.kernels == "hf" and not lay.compile
    return nbytes / (hw.hbm_tbs * 1e12 * (hw.hf_hbm_fraction if hf else 1.0))


# Bytes read and written per element by the non-GEMM ops of a block, forward (16-bit tensors, 1-byte dropout masks).
# megatron: Megatron-LM's fused kernels (fused LayerNorm/RMSNorm, bias-GELU or SwiGLU, bias-dropout-add, RoPE,
# scale-mask-softmax), each one pass: read and write every element once (Korthikanti 2022 sec. 4.1 lists the
# tensors). eager: the HF/torchtitan modules, one kernel per torch op: torch's layer_norm is one kernel, but GPT-2's
# tanh GELU (transformers NewGELUActivation) is 7 (about 28 bytes per element); RMSNorm upcasts to fp32 in ~6
# kernels (to fp32, pow, mean, rsqrt-mul, to bf16, weight-mul: about 40); SwiGLU is silu then mul (10 per ffn
# element); RoPE's rotate-half, cat and muls on q and k (about 30). compiled (torch.compile/Inductor): each chain
# fuses into one read and one write.
ELEMENTWISE = {
    ("gpt", "megatron"): {"norm": 4, "residual": 7, "mlp_act": 4, "rope": 0},
    ("gpt", "eager"): {"norm": 4, "residual": 6, "mlp_act": 28, "rope": 0},
    ("gpt", "compiled"): {"norm": 4, "residual": 6, "mlp_act": 4, "rope": 0},
    ("llama", "megatron"): {"norm": 4, "residual": 6, "mlp_act": 6, "rope": 8},
    ("llama", "eager"): {"norm": 40, "residual": 6, "mlp_act": 10, "rope": 30},
    ("llama", "compiled"): {"norm": 6, "residual": 6, "mlp_act": 6, "rope": 8},
}


def _op_kernels(lay: Layout) -> str:
    """How the block's non-GEMM ops run, as :data:`ELEMENTWISE` keys them: one fused pass compiled, else Megatron's
    fused kernels or one kernel per torch op (the HF modules as torchtitan's)."""
    return "compiled" if lay.compile else "eager" if lay.kernels == "hf" else lay.kernels


AUTOCAST_FP32 = {("gpt", "eager"): 26}
"""Bytes per ffn element, forward, that autocast adds to the MLP activation: GPT-2's tanh GELU
(transformers NewGELUActivation) starts with ``torch.pow``, which is on autocast's float32 list (torch.amp docs,
"CUDA Ops that can autocast to float32"), so the seven ops after it read and write fp32: 62 bytes per element by op
count instead of 36, i.e. the table's 28 x 62/36 (+20), and its fp32 output is cast back for the down projection (+6).
Llama's SiLU is not on the list (nothing added), and Inductor fuses the chain (nothing added compiled). The fp32
residual stream and norms cost nothing measurable on the lent H100: the Llama's kernel time was the same under
autocast and under DeepSpeed's bf16 weights (198.1 vs 200.1 ms, tests/data/runs/gpu-h100-20261125/profile)."""


def _autocast_seconds(lay: Layout, hw: GpuProfile) -> float:
    """One micro-batch's autocast work on the busiest stage: every weight cast to 16 bits in the forward (read 4,
    write 2 bytes; autocast caches a cast for the rest of the forward) and its 16-bit gradient cast back (read 2,
    write 4), and the fp32 activation chain of :data:`AUTOCAST_FP32`, forward and backward (3x)."""
    if not lay.autocast:
        return 0.0
    s = lay.shape
    extra = AUTOCAST_FP32.get((s.arch, _op_kernels(lay)))
    chain = 3 * lay.stage_layers * (extra or 0) * lay.micro_batch * lay.seq_len / lay.cp * s.ffn / lay.tp
    return _hbm_seconds(12 * local_params(lay) + chain, lay, hw)


def _linears(lay: Layout) -> list[tuple[float, float, float]]:
    """The block's linear GEMMs on one GPU as (m, k, n): tokens by input features by output features, each TP
    shard's (QKV and up/gate split their outputs, the output projection and down their inputs)."""
    s, t = lay.shape, lay.tp
    tokens = lay.micro_batch * lay.seq_len / lay.cp
    h, f, q, kv = s.hidden, s.ffn, s.q_width, s.kv_width
    return [(tokens, h, (q + 2 * kv) / t), (tokens, q / t, h), (tokens, h, (s.mlp_matrices - 1) * f / t),
            (tokens, f / t, h)]


def _fp8_cast_bytes(lay: Layout) -> tuple[float, float]:
    """Bytes one block's fp8 casts move for one micro-batch, (forward, backward), tensorwise dynamic scaling as
    torchao's float8 roofline counts them (torchao/testing/float8/roofline_utils.py,
    ``get_tensor_memory_traffic_ovhd_s``): an activation (the input forward, the output gradient backward) takes an
    amax pass (read 2 bytes per element; fused into the op before it when compiled) and one cast that reads it
    once and writes the two fp8 layouts its GEMMs need (2 + 1 + 1); a weight takes an amax pass and a cast per
    layout (2 + 3, then 3 in the backward). 16-bit everywhere else: attention and the output layer stay 16-bit."""
    if lay.precision != "fp8":
        return 0.0, 0.0
    amax = 0 if lay.compile else 2
    forward = backward = 0.0
    for m, k, n in _linears(lay):
        forward += (amax + 4) * m * k + 5 * k * n
        backward += (amax + 4) * m * n + 3 * k * n
    return forward, backward


def _elementwise_bytes(lay: Layout) -> float:
    """Bytes the non-GEMM ops of one block move in the forward (:data:`ELEMENTWISE` per element). Inside the TP
    region (activation, RoPE, the eager softmax) they split over tp; the norms and residuals outside it split only
    with sequence parallelism (Korthikanti sec. 4.2.2)."""
    s, b, t = lay.shape, lay.micro_batch, lay.tp
    per = ELEMENTWISE[(s.arch, _op_kernels(lay))]
    sbh = b * lay.seq_len / lay.cp * s.hidden
    sbf = b * lay.seq_len / lay.cp * s.ffn
    outside = 2 * per["norm"] * sbh + 2 * per["residual"] * sbh
    rotated = b * lay.seq_len / lay.cp * (s.q_width + s.kv_width)  # RoPE on q and k
    inside = per["mlp_act"] * sbf + per["rope"] * rotated
    if s.qk_norm:  # Qwen3's q_norm and k_norm: an RMSNorm's passes over q and k, inside the TP region
        inside += per["norm"] * rotated
    return (inside + _softmax_bytes(lay)) / t + outside / (t if lay.sequence_parallel else 1)


def _softmax_bytes(lay: Layout) -> float:
    """An eager attention core's element-wise bytes, forward, over all heads: scale-mask-softmax (read and write
    2as²b) and its dropout (read, write, 1-byte mask: 5as²b); a flash kernel keeps the scores on chip (none)."""
    if lay.attention != "eager":
        return 0.0
    return 9 * lay.shape.heads * (lay.seq_len / lay.cp) * lay.seq_len * lay.micro_batch


def _logits_seconds(lay: Layout, hw: GpuProfile) -> float:
    """The output layer (vocabulary split over TP) forward and backward, and the fp32 cross-entropy's passes."""
    s, b = lay.shape, lay.micro_batch
    tokens = b * lay.seq_len / lay.cp
    precision = "bf16" if lay.precision == "fp8" else lay.precision  # the output layer stays 16-bit under fp8
    gemm = 3 * gemm_seconds(tokens, s.vocab / lay.tp, s.hidden, 1, hw, precision)
    return gemm + _hbm_seconds(3 * 4 * tokens * s.vocab / lay.tp, lay, hw)


def _stage_seconds(lay: Layout, hw: GpuProfile) -> dict[str, float]:
    """One micro-batch through the busiest pipeline stage, forward and backward, by term."""
    fwd = layer_times(lay, hw)
    layers = lay.stage_layers
    comm = tp_comm_seconds(lay, hw)
    cp = cp_comm_seconds(lay, hw, fwd["attention"])
    terms = {name: 3 * seconds * layers for name, seconds in fwd.items()}  # forward + backward (2x)
    if lay.attention == "flash":  # its backward recomputes the scores: 5 GEMMs to the forward's 2
        terms["attention"] *= (1 + FLASH_BACKWARD) / 3
    terms["tp_comm"] = (2 * comm + sp_regather_seconds(lay, hw)) * layers  # forward, backward (transposes)
    terms["cp_comm"] = cp * layers
    if lay.recompute == "full":
        terms["recompute"] = sum(fwd.values()) * layers
        terms["tp_comm"] += comm * layers
    elif lay.recompute == "op":  # torchtitan per-op SAC: half the linear GEMMs and every non-GEMM op again
        terms["recompute"] = (fwd["matmul"] / 2 + fwd["elementwise"]) * layers
    elif lay.recompute == "selective":  # the attention core: its GEMMs and, eager, the softmax and dropout
        core = fwd["attention"] + _hbm_seconds(_softmax_bytes(lay) / lay.tp, lay, hw)
        terms["recompute"] = core * layers
    terms["logits"] = _logits_seconds(lay, hw)  # on the last stage, the busiest
    terms["autocast"] = _autocast_seconds(lay, hw)
    cast_forward, cast_backward = (_hbm_seconds(nbytes, lay, hw) * layers for nbytes in _fp8_cast_bytes(lay))
    terms["fp8_cast"] = cast_forward + cast_backward
    if lay.recompute == "full":  # a recomputed linear casts its input and weight again
        terms["recompute"] += cast_forward
    elif lay.recompute == "op":  # half the linears recomputed (their amax saved: torchtitan's op policy keeps max)
        terms["recompute"] += cast_forward / 2
    if lay.async_tp:  # micro-pipelined collective matmuls hide part of the TP traffic
        terms["tp_comm"] *= 1 - ASYNC_TP_HIDDEN
    return terms


def _optimizer_seconds(lay: Layout, hw: GpuProfile) -> float:
    """Adam on the local shard: read fp32 weights, gradients and two moments, write three back and a 16-bit copy
    (30 bytes per parameter) at HBM bandwidth."""
    if lay.offload:  # DeepSpeedCPUAdam steps it on the host: gpu_offload.py
        return 0.0
    shard = 1 if lay.strategy == "ddp" else lay.dp * lay.cp  # every other strategy shards the optimizer
    return _hbm_seconds(30 * local_params(lay) / shard, lay, hw)


def engine_host_seconds(lay: Layout, hw: GpuProfile) -> float:
    """Host time of a DeepSpeed ZeRO engine that the GPU waits for: the profile's cost per local parameter tensor,
    once per step for ZeRO-1 (its work is at the step boundary) and per micro-batch for ZeRO-2 (gradient hooks)
    and ZeRO-3 (gathers and releases in the forward and backward). Measured on the lent H100: the GPU sat idle
    23 ms (GPT-2, ZeRO-1) to 130 ms (ZeRO-3) of each step (scripts/profile_gpu_step.py)."""
    stage = PLANNER[lay.strategy].zero if lay.strategy in PLANNER else None
    per_tensor = hw.zero_host_us.get(stage or 0)
    if not per_tensor:
        return 0.0
    s = lay.shape
    tensors = lay.stage_layers * s.layer_tensors() + s.end_tensors()  # + embeddings, final norm and head
    return per_tensor * 1e-6 * tensors * (1 if stage == 1 else lay.micro_batches)


def model_flops(lay: Layout) -> float:
    """Model FLOPs per GPU per step without recompute: 6 per parameter per token plus attention's 12·l·s²·h per
    sequence (Narayanan 2021 eq. 3 without recompute; h: heads x head width, PaLM App. B), over every GPU."""
    s = lay.shape
    tokens = lay.global_batch * lay.seq_len
    return (6 * s.params() * tokens + 12 * s.layers * lay.seq_len * s.q_width * tokens) / lay.gpus


def step_time(lay: Layout, hw: GpuProfile) -> StepTime:
    """Seconds of one optimizer step, by term."""
    stage = _stage_seconds(lay, hw)
    m = lay.micro_batches
    per_micro = sum(stage.values())
    terms = {name: m * seconds for name, seconds in stage.items()}
    # (p-1)/v idle micro-batch slots (Narayanan 2021 sec. 2.2); zero bubble fills (F+B-W)/(F+B+W) of them with
    # the deferred weight gradients (Qi et al. 2024 sec. 2; parallel.ZERO_BUBBLE_SHARE, as the CPU planner)
    share = ZERO_BUBBLE_SHARE if lay.schedule == "interleaved-zb" else 1.0
    terms["pp_bubble"] = (lay.pp - 1) / lay.chunks * per_micro * share if lay.pp > 1 else 0.0
    terms["pp_p2p"] = m * p2p_seconds(lay, hw)
    compute = sum(terms.values())
    terms["dp_comm"] = dp_seconds(lay, hw, compute)
    terms["optimizer"] = _optimizer_seconds(lay, hw)
    terms["engine_host"] = engine_host_seconds(lay, hw)
    terms["offload"] = offload_seconds(lay, hw)
    return StepTime(sum(terms.values()), terms, model_flops(lay))
