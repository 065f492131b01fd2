"""The planner's typed inputs: the machine a candidate runs on (:class:`Cluster`) and the work it trains
(:class:`Workload`). Built once per plan (plan/api.py) and passed to every estimate."""

from __future__ import annotations

from dataclasses import dataclass

from dsbench.models import ModelShape
from dsbench.plan.gpu_profiles import GpuProfile
from dsbench.plan.hardware import Link
from dsbench.plan.profile import rate_at


@dataclass(frozen=True, kw_only=True, slots=True)
class Cluster:
    nodes: int
    gpus_per_node: int
    gpu_mem_gib: float
    """Accelerator memory per GPU, GiB: the datasheet's "80GB" is binary (dsbench.gpus.Gpu.memory_gib), as the GPU
    time model (plan.gpu_profiles.GpuProfile.memory_gib) and a GPU profile's measured figure read it."""
    peak_tflops: float
    efficiency: float = 0.5
    """Fraction of peak that matmul-heavy training achieves (0.4-0.6 is typical for dense LLMs)."""
    intra: Link
    inter: Link
    host_link: Link
    """GPU <-> CPU link (offload traffic)."""
    host_mem_gib: float = 1000.0
    compute_tflops: float | None = None
    """Achieved TFLOPS per rank of a forward+backward, measured by ``dsbench calibrate`` (a profile): replaces
    peak x efficiency for the compute term. Peak still defines MFU."""
    optimizer_params_per_s: float | None = None
    """Parameters per second one rank's optimizer step updates (a profile's AdamW rate): adds the optimizer term."""
    overlap_comm: bool = True
    """Whether collectives run beside compute (NCCL's own streams). On CPU ranks gloo's threads take the same
    cores as the compute (a profile of a CPU machine says False): every collective is then exposed."""

    fsdp_unit_s: tuple[float, float] = (0.0, 0.0)
    """FSDP2's own seconds per ``fully_shard`` unit (hooks, DTensor dispatch, copy-in/out), per micro-step and per
    optimizer step, measured by ``dsbench calibrate``; zero without a profile."""
    deepspeed_s: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """DeepSpeed's own seconds (calibrate's stack): per gradient reduction under ZeRO-1 and ZeRO-2 (and 3), per
    parameter tensor under ZeRO-3; zero without a profile, when each collective call pays the link's latency."""
    zero_model_call_s: tuple[float, float] = (0.0, 0.0)
    """DeepSpeed's own seconds per gradient reduction under ZeRO-1 and ZeRO-2 measured on the profile's own model
    (a profile's ``zero1_model_call_s``, ``zero2_model_call_s``): used for those stages instead of the stack's; zero
    without one."""
    zero_offload_param_s: float | None = None
    """What offloading the optimizer to the host adds to a ZeRO-1/2 step (signed), per parameter of the rank's shard,
    measured on the profile's own model (a profile's ``zero_offload_param_s``): replaces the offload term's host-link
    and host-Adam guess for those stages; None without one."""
    tp_layer_s: tuple[tuple[str, float], ...] = ()
    """Tensor parallelism's own seconds per decoder layer per micro-step beyond 1/tp of the compute and its
    collectives, by :attr:`Candidate.tp_kind` (DTensor, AutoTP, DTensor with sequence parallelism), measured by
    ``dsbench calibrate``; none without a profile."""
    lp_head_s: float = 0.0
    """torch_tp's ``--loss-parallel`` head and loss, its own seconds per micro-step beyond 1/tp of their compute and
    their collectives (a profile's ``torch_tp_lp_head_s``); zero without one."""
    ulysses_layer_s: float = 0.0
    """DeepSpeed Ulysses' own seconds per decoder layer per micro-step beyond 1/sp of the compute and its
    all-to-alls (a profile's ``ulysses_layer_s``, measured at its tensor-parallel degree); zero without one."""
    zb_split_layer_s: float = 0.0
    """torch's zero-bubble schedules' own seconds per layer per micro-batch: splitting each backward into its input-
    and weight-gradient passes, beyond the whole backward (a profile's ``zb_split_layer_s``); zero without one."""
    pipe_runtime: tuple[tuple[str, float, float], ...] = ()
    """The pipeline engines' runtime, by torch schedule and for DeepSpeed's engine: (schedule, seconds per step,
    seconds per pass a rank runs) (a profile's ``*_step_s`` and ``*_pass_s``, plan/pipeline_time; with it, the
    point-to-point latency is in the pass and the sends are priced by their bytes); none without."""
    compute_by_micro_batch: tuple[tuple[int, float], ...] = ()
    """The measured forward+backward TFLOPS per rank at several micro-batches (a profile)."""
    gpu_model: GpuProfile | None = None
    """A GPU kind's hardware profile, without a machine profile: the GPU time model prices the step."""
    step_scale: tuple[tuple[str, float], ...] = ()
    """Per engine family, measured / predicted step time of ``calibrate --check``'s cells (plan/selfcheck.py)."""
    step_residual: tuple[tuple[str, float], ...] = ()
    """Per pipeline family, seconds its check cells paid a step beyond their prediction (selfcheck.step_residual)."""
    spread: tuple[tuple[str, float], ...] = ()
    """Each calibrated timing's spread over its samples (a profile's ``spread``): the step's range
    (dsbench/plan/interval.py)."""

    def achieved_tflops(self, micro_batch: int) -> float:
        """TFLOPS one rank achieves at ``micro_batch``: measured (interpolated between the measured micro-batches),
        else peak x efficiency."""
        default = self.compute_tflops or self.peak_tflops * self.efficiency
        return rate_at({str(m): r for m, r in self.compute_by_micro_batch}, micro_batch, default)

    @property
    def pipe_costs(self) -> dict[str, tuple[float, float]]:
        return {schedule: (per_step, per_pass) for schedule, per_step, per_pass in self.pipe_runtime}

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True, kw_only=True, slots=True)
class Workload:
    shape: ModelShape
    seq_len: int
    micro_batch: int
    grad_accum: int
    precision: str = "bf16"
    accounting: str | None = None
    reduce_bucket: float | None = None
    """Elements; default hidden² (HF "auto")."""
    prefetch_bucket: float | None = None
