"""Typed, frozen specs: the source of truth from which configs and commands are rendered.

Stdlib only, so the CLI can build specs without importing torch. Errors raised here name the
CLI flag to fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from dsbench.errors import UserError
from dsbench.parallel import ParallelDims

Offload = Literal["none", "cpu", "nvme"]
Precision = Literal["fp32", "fp16", "bf16"]
Launcher = Literal["deepspeed", "torchrun", "accelerate", "slurm"]

DEFAULT_MICRO_BATCH = 2
"""Samples per rank per micro-step when none is given: one default for every strategy and command (render,
launch, compare and the worker), so the same command with another strategy trains the same global batch."""


def check_warmup(warmup: int, steps: int) -> None:
    """The warm-up steps, left out of a run's figures, leave at least one step to measure: one rule for the worker,
    compare and tune (until 2026-12-04 each stated it, as "--warmup must be in 0..N" without saying why)."""
    if not 0 <= warmup < steps:
        raise UserError(f"--warmup must be in 0..{steps - 1}: {warmup} warm-up steps (left out of the figures) "
                        f"leave none of --steps {steps} to measure" if warmup >= steps else
                        f"--warmup must be in 0..{steps - 1}, got {warmup}")


@dataclass(frozen=True, kw_only=True, slots=True)
class RenderSpec:
    """Everything ``dsbench render`` needs to produce a DeepSpeed config."""

    zero: int = 2
    """ZeRO stage 0-3 (``--zero``)."""
    offload: Offload = "none"
    """Optimizer-state offload target (``--offload``)."""
    offload_param: Offload = "none"
    """Parameter offload target, ZeRO-3 only (``--offload-param``)."""
    nvme_path: str | None = None
    """Folder for NVMe offload swap files (``--nvme-path``)."""
    precision: Precision = "fp32"
    """Training precision (``--precision``)."""
    micro_batch: int = DEFAULT_MICRO_BATCH
    """Per-rank micro-batch (``--micro-batch``)."""
    grad_accum: int | None = None
    """Gradient-accumulation steps (``--grad-accum``); derived from ``global_batch`` when omitted."""
    global_batch: int | None = None
    """Global batch in samples (``--global-batch``)."""
    world_size: int = 1
    """Total ranks (``--world-size`` or the hostfile's slots)."""
    pipeline_stages: int = 1
    """Pipeline-parallel stages (``--pipeline-stages``)."""
    tp: int = 1
    """Tensor-parallel (AutoTP) degree (``--tp``)."""
    ulysses: int = 1
    """DeepSpeed Ulysses sequence-parallel degree (``--ulysses``, the config's ``sequence_parallel_size``)."""
    grad_clip: float = 1.0
    """Gradient-norm clipping (``--grad-clip``), as HF Trainer's ``max_grad_norm`` default."""
    lr: float = 3e-4
    """Peak learning rate (``--lr``)."""
    warmup_steps: int = 0
    """Scheduler warm-up steps (``--warmup-steps``)."""
    train_steps: int = 100
    """Total optimizer steps, for decaying schedulers (``--train-steps``)."""
    hidden_size: int | None = None
    """Hidden size of the model, for bucket-size "auto" values (from ``--model``)."""
    keep_auto: bool = False
    """Leave "auto" values for the HF Trainer / accelerate to fill (``--keep-auto``)."""
    explicit: frozenset[str] = field(default_factory=frozenset)
    """Names of the fields the user set explicitly (filled even with ``keep_auto``)."""
    sets: tuple[str, ...] = ()
    """``--set a.b.c=VALUE`` overrides, applied after the flags."""
    _dims: ParallelDims = field(init=False, repr=False, compare=False)
    """The layout of :meth:`dims`, built once by ``__post_init__`` (which refuses degrees that do not divide)."""

    def __post_init__(self) -> None:
        for ok, message in (*self._ranges(), *self._combinations()):
            if not ok:
                raise UserError(message)
        # raises when tp x pp x sp does not divide the world (frozen: set once, here)
        object.__setattr__(self, "_dims", ParallelDims(world=self.world_size, tp=self.tp, pp=self.pipeline_stages,
                                                       sp=self.ulysses))
        self.grad_accum_steps()  # raises on a global batch that does not divide

    def _ranges(self) -> list[tuple[bool, str]]:
        """Each flag within its range: (holds, the line that names it)."""
        return [
            (self.zero in (0, 1, 2, 3), f"--zero must be 0, 1, 2 or 3, got {self.zero}"),
            (self.micro_batch >= 1, f"--micro-batch must be >= 1, got {self.micro_batch}"),
            (self.grad_accum is None or self.grad_accum >= 1, f"--grad-accum must be >= 1, got {self.grad_accum}"),
            (self.global_batch is None or self.global_batch >= 1,
             f"--global-batch must be >= 1, got {self.global_batch}"),
            (self.world_size >= 1, f"--world-size must be >= 1, got {self.world_size}"),
            (self.pipeline_stages >= 1, f"--pipeline-stages must be >= 1, got {self.pipeline_stages}"),
            (self.tp >= 1, f"--tp must be >= 1, got {self.tp}"),
            (self.ulysses >= 1, f"--ulysses must be >= 1, got {self.ulysses}"),
            (self.lr > 0, f"--lr must be > 0, got {self.lr}"),
            (self.grad_clip >= 0, f"--grad-clip must be >= 0, got {self.grad_clip}"),
            (self.warmup_steps >= 0, f"--warmup-steps must be >= 0, got {self.warmup_steps}"),
            (self.train_steps >= 1, f"--train-steps must be >= 1, got {self.train_steps}"),
        ]

    def _combinations(self) -> list[tuple[bool, str]]:
        """Flags that DeepSpeed ignores or refuses together: (holds, the line that names them)."""
        return [
            (self.ulysses == 1 or self.zero >= 1, f"--ulysses {self.ulysses} needs --zero 1, 2 or 3 (DeepSpeed's "
             "Ulysses averages gradients over the sequence-data-parallel group through ZeRO's reduction)"),
            (self.offload_param == "none" or self.zero == 3,
             f"--offload-param {self.offload_param} needs --zero 3 (DeepSpeed ignores offload_param below stage 3)"),
            (self.offload == "none" or self.zero >= 1, "--offload needs --zero 1, 2 or 3 (stage 0 has no optimizer "
             "partitioning to offload)"),
            (self.offload != "nvme" or self.zero == 3, "--offload nvme needs --zero 3 (stages 1-2 silently keep "
             "optimizer states in CPU RAM); use --offload cpu"),
            ("nvme" not in (self.offload, self.offload_param) or bool(self.nvme_path),
             "NVMe offload needs --nvme-path DIR (a folder on a fast local disk)"),
            (self.pipeline_stages == 1 or self.zero <= 1, f"--pipeline-stages {self.pipeline_stages} needs --zero 0 "
             "or 1 (DeepSpeed's pipeline engine rejects ZeRO-2/3)"),
            (self.pipeline_stages == 1 or self.tp == 1,
             f"--tp {self.tp} with --pipeline-stages {self.pipeline_stages}: DeepSpeed's AutoTP cannot split its "
             "pipeline engine's layers; for tensor x pipeline parallelism use "
             f"--strategy torch_3d --tp {self.tp} --pipeline-stages {self.pipeline_stages} --launcher torchrun"),
            (self.pipeline_stages == 1 or self.offload == "none" or self.precision != "bf16",
             "--offload with --pipeline-stages and --precision bf16: DeepSpeed's pipeline engine fails in the bf16 "
             "optimizer with offload (DeepSpeed#3866); use fp16/fp32 or no offload"),
        ]

    def dims(self) -> ParallelDims:
        """The parallel layout of the world these flags describe."""
        return self._dims

    def data_parallel_size(self) -> int:
        """Ranks in DeepSpeed's batch arithmetic (see :meth:`ParallelDims.deepspeed_batch_ranks`)."""
        return self.dims().deepspeed_batch_ranks()

    def grad_accum_steps(self) -> int:
        """Gradient-accumulation steps, from ``--grad-accum`` or ``--global-batch``."""
        per_step = self.micro_batch * self.data_parallel_size()
        if self.global_batch is None:
            return self.grad_accum or 1
        if self.global_batch % per_step:
            raise UserError(f"--global-batch {self.global_batch} is not a multiple of --micro-batch "
                            f"{self.micro_batch} x data-parallel size {self.data_parallel_size()} = {per_step}")
        derived = self.global_batch // per_step
        if self.grad_accum is not None and self.grad_accum != derived:
            raise UserError(f"--global-batch {self.global_batch} = {self.micro_batch} x {derived} x "
                            f"{self.data_parallel_size()} disagrees with --grad-accum {self.grad_accum}")
        return derived

    def train_batch_size(self) -> int:
        """Global batch: micro x grad_accum x data-parallel size (DeepSpeed's train_batch_size)."""
        return self.micro_batch * self.grad_accum_steps() * self.data_parallel_size()
