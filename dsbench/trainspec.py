"""What one training run is: the worker's whole input, typed (stdlib only).

``dsbench launch`` writes it as ``run.json`` in the run folder and starts the worker with ``--run-json run.json``;
people who start the worker themselves (``deepspeed``/``torchrun``/``accelerate launch ... dsbench.train``)
give flags, and flags given next to ``--run-json`` override the file's values. Both reach :func:`from_dict`, which
types and checks every field; the flags are parsed by dsbench/trainflags.py, so a launch checks the worker's
arguments before any process starts.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

from dsbench.errors import UserError
from dsbench.parallel import interleaved_accepts
from dsbench.spec import DEFAULT_MICRO_BATCH, check_warmup
from dsbench.strategies import LAUNCH_STRATEGIES, SHARD_GROUPED, SPLIT_ENGINES

STRATEGIES = LAUNCH_STRATEGIES
SCHEDULES = ("1f1b", "gpipe", "interleaved", "interleaved-zb")
INTERLEAVED = ("interleaved", "interleaved-zb")
"""torch_pp's schedules over ``--virtual-stages`` chunks per rank: interleaved 1F1B, and its zero-bubble form."""
RECOMPUTE = ("none", "full", "selective", "selective-op")
PIPELINED = tuple(engine for engine, degrees in SPLIT_ENGINES.items() if "pp" in degrees)
"""The engines that run torch's pipeline schedules: torch_pp, torch_3d."""
TENSOR_SPLIT = tuple(engine for engine, degrees in SPLIT_ENGINES.items() if "tp" in degrees)
"""The engines that split layers with DTensor: torch_tp, torch_3d."""


MAX_COUNT = 2**31 - 1
"""Largest step, batch, length or degree accepted: beyond it a value is a typo (and overflows int32 tensors)."""
DEFAULT_MODEL = "gpt2-tiny"
DEFAULT_STEPS = 20
"""Optimizer steps a run trains when --steps is not given (a launch's decaying LR schedule ends there too)."""
"""The model a run trains when no --model is given (dsbench/models.py)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TrainSpec:
    """One training run on every rank: strategy, model, data, batch, optimizer, schedule and recording."""

    strategy: str = "auto"
    """auto: deepspeed when a DeepSpeed config is given (or by accelerate), else ddp/single."""
    deepspeed_config: str | None = None
    """DeepSpeed JSON config (the deepspeed strategy); its batch, optimizer and precision win."""
    model: str = DEFAULT_MODEL
    """Preset, local folder with config.json, or a hub id already in the local cache."""
    trust_remote_code: bool = False
    dataset: str | None = None
    """Local text/json/jsonl/parquet/csv file or folder (default: the embedded corpus)."""
    text_field: str = "text"
    seq_len: int = 128
    micro_batch: int = DEFAULT_MICRO_BATCH
    """Samples per rank per micro-step (a DeepSpeed config's value wins)."""
    grad_accum: int = 1
    """Micro-steps per optimizer step (a DeepSpeed config's value wins)."""
    steps: int = DEFAULT_STEPS
    warmup: int = 3
    """Steps excluded from the summary (before the measured window); at most steps - 1 when not given."""
    lr: float = 3e-4
    lr_warmup_steps: int = 0
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    precision: Literal["fp32", "bf16", "fp16"] | None = None
    """Native strategies and "auto" in a DeepSpeed config [accelerate's mixed_precision, else fp32]."""
    activation_checkpointing: bool = False
    """Recompute every block in the backward: ``--recompute full``'s older spelling (either sets both)."""
    recompute: Literal["none", "full", "selective", "selective-op"] = "none"
    """What the backward recomputes: nothing, every block (full), the attention core (selective: Korthikanti et al.
    2022's selective recompute, around the SDPA call), or torch's selective activation checkpointing with
    dsbench's op policy (selective-op: matmul and attention outputs saved, the element-wise ops recomputed)."""
    compile: bool = False
    """torch.compile every transformer block (single, ddp, fsdp: before wrapping, so FSDP2's per-block hooks stay
    outside the graphs; deepspeed: the engine's own ``compile()``). Compilation runs in the warm-up steps."""
    fused_optimizer: bool = False
    """torch AdamW's fused kernel (``fused=True``) for the native strategies; DeepSpeed's optimizer is its config's."""
    fsdp_reshard: bool = True
    """FSDP2 reshard_after_forward."""
    fsdp_cpu_offload: bool = False
    pipeline_stages: int = 1
    """Pipeline stages of --strategy torch_pp or torch_3d (DeepSpeed's pipeline takes them from its config)."""
    pipeline_schedule: Literal["1f1b", "gpipe", "interleaved", "interleaved-zb"] = "1f1b"
    """torch_pp's schedule: 1F1B (one forward, one backward in steady state), GPipe (all forwards first),
    interleaved 1F1B (``--virtual-stages`` chunks per rank, Narayanan et al. 2021 sec. 2.2) or interleaved-zb, the
    same chunks under torch's ScheduleInterleavedZeroBubble (each backward split into its input-gradient and
    weight-gradient halves, the weight halves filling the bubble: Qi et al. 2024, "Zero Bubble Pipeline
    Parallelism")."""
    virtual_stages: int = 1
    """Model chunks per pipeline rank under an interleaved ``--pipeline-schedule`` (rank r holds chunks r, r + P,
    ...)."""
    tp: int = 1
    """Tensor-parallel degree of --strategy torch_tp or torch_3d (DeepSpeed's AutoTP takes it from its config)."""
    dp_shard: int = 0
    """fsdp and torch_3d: the data-parallel ranks FSDP2 shards one copy of the model over (0: all; between: HSDP;
    1: DDP under torch_3d, replicas only under fsdp)."""
    sequence_parallel: bool = False
    """torch_tp: the norms run on a sequence shard and TP's all-reduces become reduce-scatter + all-gather
    (Korthikanti et al. 2022 sec. 4.2.2)."""
    loss_parallel: bool = False
    """torch_tp: the logits stay split by vocabulary and the cross-entropy runs on the shards (torch's
    ``loss_parallel``); needs an untied output layer."""
    seed: int = 1234
    dist_timeout: float = 600.0
    """Seconds a collective or the rendezvous may wait for the other ranks before this rank fails (a rank that
    hung or never joined); torch's own default is 30 minutes."""
    peak_tflops: float | None = None
    """Per-rank peak for MFU (default: detected)."""
    out: str | None = None
    """Run folder for metrics.jsonl and summary.json."""
    gather_every: int = 10
    """Steps between gathers of per-step metrics across ranks (each is one host-device sync)."""
    save_every: int = 0
    """Save a checkpoint every N steps into --checkpoint-dir (0: only after the last step)."""
    checkpoint_dir: str | None = None
    """Where checkpoints go (DeepSpeed's layout: a ``latest`` file and one ``global_stepN`` folder each)."""
    resume: str | None = None
    """Continue from a checkpoint: its folder (its ``latest``) or one ``global_stepN`` folder in it."""
    quiet: bool = False
    summary_line: bool = True
    """Rank 0 prints the run's figures in one line at its end. ``dsbench launch`` turns it off where it prints them
    itself, as its last line (``launch.rank_prints_summary``), so that a launch says them once."""

    def __post_init__(self) -> None:
        self._check_numbers()
        if self.strategy not in STRATEGIES:
            raise UserError(f"--strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}")
        if self.precision not in (None, "fp32", "bf16", "fp16"):
            raise UserError(f"--precision must be fp32, bf16 or fp16, got {self.precision!r}")
        if self.pipeline_schedule not in SCHEDULES:
            raise UserError(f"--pipeline-schedule must be one of {', '.join(SCHEDULES)}, "
                            f"got {self.pipeline_schedule!r}")
        self._check_pipeline()
        self._check_recompute()
        self._check_tensor_parallel()
        self._check_checkpointing()
        if self.compile and self.warmup < 1:
            raise UserError("--compile needs --warmup >= 1: the first step compiles, and compilation must stay out "
                            "of the measured window")
        if self.compile and self.strategy in SPLIT_ENGINES:
            raise UserError(f"--compile is not supported with --strategy {self.strategy} (its stages and DTensor "
                            "layers are not compiled by dsbench); drop --compile")
        if self.fused_optimizer and self.strategy == "deepspeed":
            raise UserError("--fused-optimizer selects torch AdamW's fused kernel; --strategy deepspeed steps with its "
                            "config's optimizer (FusedAdam on GPU, DeepSpeedCPUAdam under offload): drop "
                            "--fused-optimizer")

    def _check_numbers(self) -> None:
        """Counts within 1..MAX_COUNT, a 32-bit seed, warm-up inside the steps, finite rates."""
        for name in ("seq_len", "micro_batch", "grad_accum", "steps", "gather_every", "pipeline_stages", "tp",
                     "virtual_stages", "dp_shard"):
            if getattr(self, name) < (0 if name == "dp_shard" else 1):
                raise UserError(f"--{name.replace('_', '-')} must be >= 1")
            if getattr(self, name) > MAX_COUNT:
                raise UserError(f"--{name.replace('_', '-')} {getattr(self, name)} is beyond {MAX_COUNT:,}")
        if not 0 <= self.seed < 2**32:  # numpy's and torch's generators both take a 32-bit seed without surprises
            raise UserError(f"--seed must be in 0..{2**32 - 1}, got {self.seed}")
        check_warmup(self.warmup, self.steps)
        positive = {"lr": self.lr, "dist_timeout": self.dist_timeout,
                    "peak_tflops": self.peak_tflops if self.peak_tflops is not None else 1.0}
        at_least_0 = {"weight_decay": self.weight_decay, "grad_clip": self.grad_clip,
                      "lr_warmup_steps": self.lr_warmup_steps}
        for name, value in positive.items():
            if not (math.isfinite(value) and value > 0):
                raise UserError(f"--{name.replace('_', '-')} must be a finite number > 0, got {value}")
        for name, value in at_least_0.items():
            if not (math.isfinite(value) and value >= 0):
                raise UserError(f"--{name.replace('_', '-')} must be a finite number >= 0, got {value}")

    def _check_checkpointing(self) -> None:
        """Paths given are not empty; checkpoints only for the engines that write them; --save-every with a folder."""
        for flag, value in (("--checkpoint-dir", self.checkpoint_dir), ("--resume", self.resume),
                            ("--deepspeed_config", self.deepspeed_config), ("--dataset", self.dataset),
                            ("--out", self.out)):
            if value is not None and not value.strip():
                raise UserError(f"{flag} is empty: give a path, or leave the flag out")
        if self.save_every < 0:
            raise UserError(f"--save-every must be >= 0 (0: save after the last step only), got {self.save_every}")
        if self.save_every and not self.checkpoint_dir:
            raise UserError("--save-every needs --checkpoint-dir (where the checkpoints go)")

    def _check_recompute(self) -> None:
        """--recompute and --activation-checkpointing name one setting: each implies the other's "full"."""
        if self.recompute not in RECOMPUTE:
            raise UserError(f"--recompute must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")
        if self.activation_checkpointing and self.recompute not in ("none", "full"):
            raise UserError(f"--activation-checkpointing is --recompute full; it contradicts --recompute "
                            f"{self.recompute}: give one")
        if self.activation_checkpointing or self.recompute == "full":  # frozen: the two spellings agree
            object.__setattr__(self, "activation_checkpointing", True)
            object.__setattr__(self, "recompute", "full")

    def _check_pipeline(self) -> None:
        """torch_pp's stages and schedule. The interleaved schedules (1F1B and zero-bubble) need torch_pp, 2+ stages
        and 2+ chunks per rank, and a micro-batch count torch's schedules accept: both run max(1, M // P) rounds of
        equal size (torch.distributed.pipelining.schedules)."""
        if self.strategy not in PIPELINED and self.pipeline_stages != 1:
            raise UserError(f"--pipeline-stages {self.pipeline_stages} is for --strategy torch_pp or torch_3d "
                            "(DeepSpeed's pipeline engine takes its stages from the config: pipeline.stages)")
        if self.strategy == "torch_3d" and self.pipeline_stages < 2:
            raise UserError("--strategy torch_3d pipelines the model: give --pipeline-stages 2 or more (tensor "
                            "parallelism alone is --strategy torch_tp)")
        if self.dp_shard and self.strategy not in SHARD_GROUPED:
            raise UserError(f"--dp-shard {self.dp_shard} sizes FSDP2's shard groups: it needs --strategy fsdp or "
                            f"torch_3d (--strategy {self.strategy} would ignore it)")
        interleaved = self.pipeline_schedule in INTERLEAVED
        if self.virtual_stages > 1 and not interleaved:
            raise UserError(f"--virtual-stages {self.virtual_stages} needs --pipeline-schedule interleaved or "
                            "interleaved-zb")
        if self.strategy in PIPELINED and self.pipeline_schedule == "1f1b" and self.grad_accum < self.pipeline_stages:
            raise UserError(f"1F1B needs at least as many micro-batches as stages: --grad-accum {self.grad_accum} < "
                            f"--pipeline-stages {self.pipeline_stages}; raise --grad-accum or use "
                            "--pipeline-schedule gpipe")
        if not interleaved:
            return
        stages = self.pipeline_stages
        if self.strategy not in PIPELINED or stages < 2 or self.virtual_stages < 2:
            raise UserError(f"--pipeline-schedule {self.pipeline_schedule} needs --strategy torch_pp or torch_3d with "
                            "--pipeline-stages 2 or "
                            f"more and --virtual-stages 2 or more (got {self.strategy}, {stages} stages, "
                            f"{self.virtual_stages} per rank)")
        if not interleaved_accepts(self.grad_accum, stages):
            works = [m for m in range(1, 4 * stages + 1) if interleaved_accepts(m, stages)]
            raise UserError(f"--pipeline-schedule {self.pipeline_schedule} on {stages} stages cannot split "
                            f"--grad-accum {self.grad_accum} "
                            f"micro-batches into equal rounds of {stages}; counts that work: "
                            f"{', '.join(map(str, works))}, ...")

    def _check_tensor_parallel(self) -> None:
        """torch_tp's degree and its options name the strategy they need."""
        for flag, on in (("--sequence-parallel", self.sequence_parallel), ("--loss-parallel", self.loss_parallel)):
            if on and (self.strategy != "torch_tp" or self.tp < 2):
                raise UserError(f"{flag} shards what tensor parallelism splits: it needs --strategy torch_tp with "
                                f"--tp 2 or more (got --strategy {self.strategy} --tp {self.tp})")
        if self.sequence_parallel and self.seq_len % self.tp:
            raise UserError(f"--sequence-parallel splits the sequence over the TP ranks: --seq-len {self.seq_len} is "
                            f"not divisible by --tp {self.tp}")
        if self.strategy not in TENSOR_SPLIT and self.tp != 1:
            raise UserError(f"--tp {self.tp} is for --strategy torch_tp or torch_3d (DeepSpeed's AutoTP takes its "
                            "degree from the config: tensor_parallel.autotp_size)")

    @property
    def prints_summary(self) -> bool:
        """Whether rank 0 prints the run's figures at its end (``--quiet`` drops that line with the progress lines)."""
        return self.summary_line and not self.quiet

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def from_dict(data: dict[str, Any], where: str) -> TrainSpec:
    """A spec from a mapping (run.json), with unknown keys and wrong types refused by name."""
    known = {f.name: f for f in fields(TrainSpec)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise UserError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(known)})")
    for name, value in data.items():
        default = known[name].default
        kind = type(default) if default is not None else (str if name != "peak_tflops" else float)
        ok = value is None and default is None or (
            isinstance(value, (int, float)) and not isinstance(value, bool) if kind is float
            else isinstance(value, kind) and (kind is not int or not isinstance(value, bool)))
        if not ok:
            raise UserError(f"{where}: {name} must be {kind.__name__}, got {json.dumps(value)}")
    if "warmup" not in data and isinstance(data.get("steps"), int):
        # the default warm-up never swallows a short run: --steps 3 alone warms up 2 steps and measures 1
        data = {**data, "warmup": min(known["warmup"].default, max(0, data["steps"] - 1))}
    return TrainSpec(**data)


def load(path: str) -> dict[str, Any]:
    """The mapping in a run.json file."""
    from dsbench.io import read_json

    data = read_json(path, "run description")
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object (a run description)")
    return data


def write(spec: TrainSpec, path: Path) -> Path:
    """Write ``spec`` as run.json (atomically)."""
    from dsbench.io import atomic_write_json

    return atomic_write_json(path, spec.to_dict())
