"""Hardware profiles of the GPU kinds the GPU time model prices (stdlib only): one frozen record per kind.

Every figure names its source. Peaks are dense tensor-core rates (no sparsity); bandwidths are per GPU and one
direction. The two efficiency constants of the matmul curve (``gemm_peak_fraction``, ``gemm_half_dim``) and the
link efficiency are documented fits or microbenchmark figures, stated where they are set (docs/planner.md lists
which rows chose each and the error on the others).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from dsbench.errors import UserError
from dsbench.gpus import BY_KEY
from dsbench.plan.hardware import INTERCONNECTS, link

UNALIGNED_GEMM = 0.126
"""Measured: GPT-2's output-layer GEMMs (16,384 tokens x 50,257 x 768, forward and both backward GEMMs, 3.79 TFLOP)
took 30.5 ms in cutlass ``sm75 ... align1`` kernels on the lent H100 (124 TFLOP/s, 0.126 of 989;
scripts/profile_gpu_step.py, tests/data/runs/gpu-h100-20261125/profile). The same fraction is assumed for the
other kinds."""

HF_HBM = 0.44
"""Fitted: GPT-2 ZeRO-1's non-GEMM kernel time on the lent H100 (50.0 ms per step: element-wise, loss, copies,
reductions, norms, optimizer; profile-gpt2-zero1.json) over the model's bytes at 3.35 TB/s (21.8 ms). Out of sample:
the 1.1B Llama's (docs/planner.md)."""

ZERO_HOST_US = {1: 140.0, 2: 185.0, 3: 660.0}
"""Fitted per engine on dsbench's GPT-2 H100 runs of 2026-11-25 (tests/data/oracles/dsbench-h100.csv rows 10-12):
the step time the GPU model leaves over, per parameter tensor, by ZeRO stage; the Llama rows are out of sample.
It is the host's, not the GPU's: refitted on the other two lent machines it is 140-230 / 376-385 / 1334-1454
(plan.gpu_fit, scripts/fit_gpu_constants.py), so these values are the fastest host seen."""


OFFLOAD_ADAM = 4.79e9
"""Fitted (with OFFLOAD_TENSOR_US, plan.gpu_fit.fit_offload) on dsbench's two CPU-offload runs of 2026-11-23 on the
lent H100 (GPT-2 and the 1.1B Llama, ZeRO-2 with the optimizer on the host, each against its ZeRO-2 run of the
same day): parameters per second DeepSpeedCPUAdam stepped on that host, one rank. A property of the host; the
H200 host's runs and a published 8-GPU A800 table are out of sample (docs/planner.md)."""
OFFLOAD_TENSOR_US = 464.0
"""Fitted with OFFLOAD_ADAM on the same two pairs of runs: µs of host work per parameter tensor of the partition."""


@dataclass(frozen=True, slots=True)
class GpuProfile:
    kind: str
    peak_tflops: dict[str, float]
    """Dense tensor-core TFLOP/s by precision (bf16, fp16, fp8); a precision not here cannot be priced."""
    hbm_tbs: float
    """HBM bandwidth, TB/s (datasheet)."""
    memory_gib: float
    """Device memory the allocator can use, GiB (the datasheet's GB as GiB)."""
    nvlink_gbs: float
    """NVLink bandwidth per GPU, one direction, GB/s (half the datasheet's bidirectional figure)."""
    network_gbs: float
    """The usual network per GPU, one direction, GB/s (one NIC per GPU)."""
    gemm_peak_fraction: float = 0.80
    """The fraction of peak a large 16-bit GEMM reaches (cuBLAS, square 8192: NVIDIA's Matrix Multiplication
    Background guide, fig. "A100 GEMM performance": about 250 of 312 TFLOP/s; the same fraction on Hopper)."""
    gemm_half_dim: float = 128.0
    """The output dimension at which efficiency falls to half of ``gemm_peak_fraction`` (η = η_max·d/(d + d½) on
    the smaller of m and n: tile and wave quantisation make narrow GEMMs inefficient; NVIDIA's Matrix
    Multiplication Background guide, "Dimension Quantization Effects")."""
    flash_fraction: float = 0.58
    """The fraction of peak a flash-attention kernel reaches, forward and backward, causal, head dim 128 (Dao 2023,
    arXiv:2307.08691 fig. 4: FlashAttention-2 about 180 of 312 TFLOP/s on A100)."""
    nvlink_efficiency: float = 0.77
    """The fraction of NVLink bandwidth a large ring collective reaches as bus bandwidth (nccl-tests
    all_reduce_perf within a DGX A100: about 230 of 300 GB/s; DGX H100: about 350 of 450)."""
    network_efficiency: float = 0.92
    """The same across nodes, one NIC per GPU (nccl-tests all_reduce_perf across DGX A100 nodes with 8 x HDR:
    about 23 of 25 GB/s per GPU)."""
    collective_latency_us: float = 10.0
    """Per ring step (nccl-tests small-message latency, a few µs per hop within a node; more across)."""
    clock_fraction: float = 1.0
    """Sustained over boost clock for tensor-core work (1 unless a power cap holds the clock down); multiplies the
    peaks. A fitted constant where it is not 1: the profile says which rows chose it."""
    host_link_gbs: float = 25.0
    """The host link for offload (PCIe 4.0 x16 about 25 GB/s one way; PCIe 5.0 about 50)."""
    unaligned_gemm_fraction: float = UNALIGNED_GEMM
    """The fraction of peak a 16-bit GEMM with a dimension not a multiple of 8 reaches: cuBLAS needs 16-byte
    aligned leading dimensions for its tensor-core kernels and otherwise falls back to ``align1`` kernels (NVIDIA's
    Matrix Multiplication Background guide, "Tensor Core Requirements"). GPT-2's 50,257-word vocabulary is the
    case in dsbench's runs."""
    hf_hbm_fraction: float = HF_HBM
    """The share of HBM bandwidth at which the model's byte count of a step's non-GEMM ops (element-wise, the fp32
    loss, the optimizer) comes out in kernel time when the Hugging Face modules run them eagerly (``kernels=hf``):
    it lumps sub-peak bandwidth and the small kernels the count leaves out (casts, reductions, copies).
    torchtitan's modules, Megatron's fused kernels and compiled code keep 1."""
    zero_host_us: dict[int, float] = field(default_factory=lambda: dict(ZERO_HOST_US))
    """Host time a DeepSpeed ZeRO engine spends per parameter tensor that the GPU waits for, µs (its gradient hooks,
    bucket copies and, for stage 3, parameter fetch and release), by ZeRO stage: per step (stage 1) or per
    micro-batch (stages 2 and 3)."""
    offload_adam_params_per_s: float = OFFLOAD_ADAM
    """ZeRO-Offload's CPU Adam: parameters per second a host steps, shared by its ranks (plan/gpu_offload.py)."""
    offload_tensor_us: float = OFFLOAD_TENSOR_US
    """ZeRO-Offload's host work per parameter tensor of a rank's partition per step, µs (plan/gpu_offload.py)."""


def _sixteen(key: str, **more: float) -> dict[str, float]:
    """bf16 and fp16 dense peaks from dsbench/gpus.py (the one table of datasheet peaks), and any other precision."""
    return {"bf16": BY_KEY[key].bf16_tflops, "fp16": BY_KEY[key].bf16_tflops, **more}


HOPPER_FLASH = 0.36
"""FlashAttention-2 on H100, forward and backward, causal, head dim 128: about 350 of 989 TFLOP/s (Shah et al. 2024,
arXiv:2407.08608 fig. 5; FlashAttention-3 reaches more, torch's SDPA used FA2 in the runs priced here)."""

GRAND_TETON_CLOCK = 0.639
"""Fitted: the one constant that makes torchtitan-h100-202412 rows 1 and 4 (Llama 3.1 8B, FSDP on 8 and 128 GPUs,
bf16, eager) come out right; every other h100-96g-500w row is out of sample (docs/planner.md). A 500 W cap on a
700 W part: NVIDIA's H100 NVL (400 W) is rated at 835 of the SXM's 989 TFLOP/s at a lower clock."""

KINDS: dict[str, GpuProfile] = {p.kind: p for p in (
    # NVIDIA A100 datasheet (SXM4 80GB): 312 TF bf16/fp16 dense, HBM2e 2,039 GB/s, NVLink3 600 GB/s (300 each way);
    # Selene/DGX A100: 8 x HDR 200 Gb/s per node = 25 GB/s per GPU (Narayanan et al. 2021 sec. 5)
    GpuProfile("a100-80g", _sixteen("a100"), 2.039, 80, 300, 25, host_link_gbs=25),
    # A100 SXM4 40GB: HBM2 1,555 GB/s
    GpuProfile("a100-40g", _sixteen("a100-40g"), 1.555, 40, 300, 25, host_link_gbs=25),
    # NVIDIA H100 SXM5 datasheet: 989 TF bf16/fp16, 1,979 TF fp8 (dense), HBM3 3.35 TB/s, NVLink4 900 GB/s (450 each
    # way); ConnectX-7 NDR 400 Gb/s per GPU = 50 GB/s; PCIe 5.0 host link
    GpuProfile("h100-sxm", _sixteen("h100", fp8=1979.0), 3.35, 80, 450, 50, host_link_gbs=50,
               flash_fraction=HOPPER_FLASH),
    # Meta's Grand Teton H100 (torchtitan's H100 benchmarks): 96 GB HBM2e at 2.4 TB/s, 500 W cap. Its bf16 peak lies
    # between NVL (835) and SXM (989) and is not published: the SXM figure is used as the peak (as the benchmark's
    # own MFU does), so the capped clock shows as lower efficiency
    GpuProfile("h100-96g-500w", _sixteen("h100", fp8=1979.0), 2.4, 96, 450, 50, host_link_gbs=50,
               flash_fraction=HOPPER_FLASH, clock_fraction=GRAND_TETON_CLOCK),
    # NVIDIA H200 SXM datasheet: the H100's compute, 141 GB HBM3e at 4.8 TB/s
    GpuProfile("h200", _sixteen("h200", fp8=1979.0), 4.8, 141, 450, 50, host_link_gbs=50,
               flash_fraction=HOPPER_FLASH),
    # NVIDIA V100 SXM2 datasheet: 125 TF fp16 tensor core (no bf16), HBM2 900 GB/s, NVLink2 300 GB/s (150 each way);
    # DGX-2 era: 100 Gb/s EDR per GPU = 12.5 GB/s; PCIe 3.0 host link
    GpuProfile("v100-32g", {"fp16": BY_KEY["v100"].bf16_tflops}, 0.9, 32, 150, 12.5, host_link_gbs=12.5),
    # H800 (export H100): the H100 SXM's compute and HBM, NVLink cut to 400 GB/s (200 each way)
    GpuProfile("h800", _sixteen("h100", fp8=1979.0), 3.35, 80, 200, 50, host_link_gbs=50,
               flash_fraction=HOPPER_FLASH),
)}
ALIASES = {"h100": "h100-sxm", "a100": "a100-80g", "v100": "v100-32g"}
"""Today's --gpu names for the kinds above (dsbench/gpus.py)."""


CUSTOM = "custom"
"""``--gpu custom``: a GPU no profile describes, from its datasheet figures given as flags."""


def custom_profile(req: Any) -> GpuProfile:
    """``--gpu custom``'s profile from a plan request's flags: the 16-bit dense peak (``--peak-tflops``), memory
    (``--gpu-mem``) and HBM bandwidth (``--hbm-tbs``), all required; the links of :func:`with_links` (default: PCIe 4
    within a node, no NVLink assumed; InfiniBand HDR across). The efficiency constants keep the defaults above
    (cuBLAS and FlashAttention-2 on A100, nccl-tests), a guess for another GPU: ``dsbench calibrate`` on it
    measures them."""
    missing = [flag for flag, value in (("--peak-tflops", req.peak_tflops), ("--gpu-mem", req.gpu_mem),
                                        ("--hbm-tbs", req.hbm_tbs)) if value is None]
    if missing:
        raise UserError(f"--gpu custom needs the GPU's datasheet figures: {', '.join(missing)} missing")
    base = GpuProfile(CUSTOM, {"bf16": req.peak_tflops, "fp16": req.peak_tflops}, req.hbm_tbs, req.gpu_mem,
                      INTERCONNECTS["pcie4"].bandwidth_gbs, INTERCONNECTS["infiniband"].bandwidth_gbs)
    return with_links(base, req)


def with_links(profile: GpuProfile, req: Any) -> GpuProfile:
    """A profile with the plan's link flags over its own: ``--intra`` (NVLink), ``--interconnect`` (the network;
    ``--bandwidth`` overrides it per layout) and ``--latency`` (per ring step)."""
    fields: dict[str, Any] = {}
    if req.intra is not None:
        fields["nvlink_gbs"] = link(req.intra, flag="--intra").bandwidth_gbs
    if req.interconnect is not None:
        fields["network_gbs"] = link(req.interconnect).bandwidth_gbs
    if req.latency is not None:
        fields["collective_latency_us"] = req.latency
    return replace(profile, **fields) if fields else profile


def with_host(profile: GpuProfile, zero_host_us: tuple[float, ...] | None,
              cpu_adam_rate: float | None = None) -> GpuProfile:
    """The profile with a host's ZeRO-1/2/3 time per parameter tensor (``--zero-host-us``) and its ZeRO-Offload
    CPU Adam rate (``--cpu-adam-rate``), each where one is given."""
    if zero_host_us:
        profile = replace(profile, zero_host_us=dict(zip((1, 2, 3), zero_host_us, strict=True)))
    return replace(profile, offload_adam_params_per_s=cpu_adam_rate) if cpu_adam_rate else profile


def profile_for(kind: str, **overrides: float) -> GpuProfile:
    """The profile of a GPU kind (or its alias), with any field replaced; an unknown kind is one line."""
    key = ALIASES.get(kind, kind)
    if key not in KINDS:
        raise UserError(f"gpu {kind!r}: no hardware profile (known: {', '.join(sorted([*KINDS, *ALIASES]))})")
    fields = {k: v for k, v in overrides.items() if v is not None}
    return replace(KINDS[key], **fields) if fields else KINDS[key]
