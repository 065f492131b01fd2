"""A run's header and summary as typed records: the one reader of each (stdlib only).

The worker writes them as JSON (:mod:`dsbench.records`: the ``header`` line of ``metrics.jsonl`` and
``summary.json``). Everything that reads a run (report, ``plan --verify``, tune, whatif, the scripts) goes through
:func:`read_summary` and :meth:`RunHeader.from_record`: old schemas are upgraded here, a figure that is missing or
not a number is one line naming it, and readers use attributes, never string keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsbench.errors import UserError
from dsbench.header_fields import header_problem
from dsbench.record_fields import count_field, number_field, text_field
from dsbench.records import MEMORY_KINDS, SUMMARY


@dataclass(frozen=True, kw_only=True, slots=True)
class Spread:
    """A figure over the measured steps (:func:`dsbench.records.spread`)."""

    median: float
    min: float | None = None
    max: float | None = None
    p10: float | None = None
    p90: float | None = None

    @classmethod
    def from_dict(cls, data: Any, where: str, name: str) -> Spread:
        if not isinstance(data, dict):
            raise UserError(f"{where}: {name} is {data!r}, not a spread of numbers")
        return cls(median=number_field(data.get("median"), where, f"{name}.median"),
                   **{key: number_field(data.get(key), where, f"{name}.{key}", optional=True)
                      for key in ("min", "max", "p10", "p90")})


@dataclass(frozen=True, kw_only=True, slots=True)
class Throughput:
    """The wall clock over the measured window (:data:`dsbench.records.WALL_CLOCK`): the throughput figure."""

    window_s: float
    steps: int
    tokens_per_s: float
    tokens_per_s_per_rank: float | None = None
    mfu: float | None = None

    @property
    def step_s(self) -> float:
        """The step time by the wall clock: the window over its steps (everything included)."""
        return self.window_s / self.steps

    @classmethod
    def from_dict(cls, wall: dict[str, Any], where: str) -> Throughput:
        return cls(window_s=number_field(wall.get("window_s"), where, "throughput.window_s"),
                   steps=number_field(wall.get("steps"), where, "throughput.steps"),
                   tokens_per_s=number_field(wall.get("tokens_per_s"), where, "throughput.tokens_per_s"),
                   tokens_per_s_per_rank=number_field(wall.get("tokens_per_s_per_rank"), where,
                                                 "throughput.tokens_per_s_per_rank", optional=True),
                   mfu=number_field(wall.get("mfu"), where, "throughput.mfu", optional=True))


@dataclass(frozen=True, kw_only=True, slots=True)
class TimedRegion:
    """The timed region per step (:data:`dsbench.records.TIMED_REGION`): a separate, labelled figure."""

    step_time_s: Spread
    tokens_per_s: Spread
    mfu: Spread | None = None

    @classmethod
    def from_dict(cls, timed: dict[str, Any], where: str) -> TimedRegion:
        return cls(step_time_s=Spread.from_dict(timed.get("step_time_s"), where, "timed_region.step_time_s"),
                   tokens_per_s=Spread.from_dict(timed.get("tokens_per_s"), where, "timed_region.tokens_per_s"),
                   mfu=Spread.from_dict(timed["mfu"], where, "timed_region.mfu") if timed.get("mfu") else None)


@dataclass(frozen=True, kw_only=True, slots=True)
class RunSummary:
    """A run's ``summary.json``, in the current schema. ``throughput`` and ``timed`` are None unless the run
    finished (``status`` ok); ``throughput`` is None too for a schema-1 summary, which measured only the timed
    region."""

    status: str
    reason: str | None = None
    measured_steps: int = 0
    warmup_steps: int = 0
    throughput: Throughput | None = None
    timed: TimedRegion | None = None
    outside_timed_fraction: float | None = None
    warmup_s: float | None = None
    """The warm-up steps' timed regions (outside the window)."""
    final_loss: float | None = None
    peak_memory_bytes_per_rank: tuple[float, ...] = ()
    memory_kind: str | None = None
    model_state_bytes_per_rank: tuple[dict[str, Any], ...] = ()
    """Per rank, the bytes the worker counted from its tensors by kind (params, grads, optimizer, master, total)."""
    skipped_steps: int = 0
    """Optimizer steps fp16's loss scale skipped (records.summarize; 0 before 2026-11-30)."""
    replicas: dict[str, Any] | None = None
    """Whether the data-parallel copies were bit-identical after the last step (worker/replicas.py: groups,
    ranks_per_group, agree, differing_ranks); None where the run kept none, or before 2026-11-30."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def measured(self) -> str:
        """What an ok run measured, with its window and spread: the wall clock's figure over the measured steps, then
        the timed region's per-step range and median (a separate, labelled figure)."""
        assert self.timed is not None
        per_step = self.timed.tokens_per_s
        ranged = per_step.min is not None and per_step.max is not None
        spread = (f"{per_step.min:,.0f}-{per_step.max:,.0f} tokens/s, median {per_step.median:,.0f}" if ranged else
                  f"median {per_step.median:,.0f} tokens/s")
        wall = (f"{self.throughput.tokens_per_s:,.0f} tokens/s by the wall clock" if self.throughput else
                "no wall-clock figure (a schema-1 summary)")
        return (f"{wall} over {self.measured_steps} steps after {self.warmup_steps} warm-up (each step's timed region: "
                f"{spread})")

    def skipped_note(self) -> str:
        """The optimizer steps fp16's loss scale skipped, as a clause after the run's figures ('' for none)."""
        return f"; {self.skipped_steps} optimizer steps skipped by fp16's loss scale" if self.skipped_steps else ""

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> RunSummary:
        """The summary of a parsed ``summary.json`` (or :func:`dsbench.records.summarize`'s result); an ok one must
        hold every figure a reader uses."""
        data = upgrade_summary(data)
        status = data.get("status")
        if not isinstance(status, str):
            raise UserError(f"{where}: status is {status!r}, not a string")
        if status != "ok":
            return cls(status=status, reason=text_field(data.get("reason"), where, "reason", optional=True))
        wall, timed = data.get("throughput"), data.get("timed_region")
        for name, value in (("throughput", wall), ("timed_region", timed)):
            if not isinstance(value, dict) and not (name == "throughput" and value is None):
                raise UserError(f"{where}: {name} is {value!r}, not a record")
        peaks = data.get("peak_memory_bytes_per_rank")
        if not isinstance(peaks, list) or not peaks:
            raise UserError(f"{where}: peak_memory_bytes_per_rank is {peaks!r}, not a list of numbers")
        states = data.get("model_state_bytes_per_rank") or []
        if not isinstance(states, list) or not all(isinstance(rank, dict) for rank in states):
            raise UserError(f"{where}: model_state_bytes_per_rank is {states!r}, not a record per rank")
        warmup = data.get("warmup")
        return cls(
            status=status, reason=text_field(data.get("reason"), where, "reason", optional=True),
            measured_steps=number_field(data.get("measured_steps"), where, "measured_steps"),
            warmup_steps=number_field(data.get("warmup_steps"), where, "warmup_steps"),
            throughput=None if wall is None else Throughput.from_dict(wall, where),
            timed=TimedRegion.from_dict(timed, where),
            outside_timed_fraction=number_field(data.get("outside_timed_fraction"), where, "outside_timed_fraction",
                                           optional=True),
            warmup_s=number_field(warmup.get("timed_s"), where, "warmup.timed_s", True) if isinstance(warmup, dict)
            else None,
            final_loss=number_field(data.get("final_loss"), where, "final_loss"),
            peak_memory_bytes_per_rank=tuple(number_field(peak, where, "peak_memory_bytes_per_rank[]")
                                             for peak in peaks),
            memory_kind=_memory_kind(data.get("memory_kind"), where),
            model_state_bytes_per_rank=tuple(states),
            skipped_steps=count_field(data.get("skipped_steps", 0), where, "skipped_steps"),
            replicas=_replicas(data.get("replicas"), where))


def _memory_kind(value: Any, where: str) -> str | None:
    """What the memory figures are (None in summaries from before it was recorded)."""
    if value is not None and value not in MEMORY_KINDS:
        raise UserError(f"{where}: memory_kind is {value!r}, not one of {', '.join(MEMORY_KINDS)}")
    return value


def _replicas(value: Any, where: str) -> dict[str, Any] | None:
    if value is not None and not (isinstance(value, dict) and isinstance(value.get("agree"), bool)):
        raise UserError(f"{where}: replicas is {value!r}, not a record with agree true or false")
    return value


def upgrade_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary in the current schema. Schema 1 measured only the timed region (under ``tokens_per_s``,
    ``step_time_s``, ``mfu``): it is kept as the timed region, and its wall-clock throughput is unknown."""
    if summary.get("schema", 1) >= 2 or summary.get("status") != "ok":
        return summary
    old = dict(summary)
    timed = {"what": "timed region (schema 1: forward/backward + optimizer step, slowest rank)",
             "step_time_s": old.pop("step_time_s"), "tokens_per_s": old.pop("tokens_per_s"), "mfu": old.pop("mfu")}
    for key in ("tokens_per_s_per_rank", "samples_per_s", "tflops_per_rank"):
        old.pop(key, None)
    return {**old, "schema": 2, "throughput": None, "timed_region": timed, "outside_timed_fraction": None}


def read_summary(folder: Path) -> RunSummary | None:
    """A run folder's ``summary.json`` as a :class:`RunSummary`: the one reader of the file (report, tune, whatif
    and ``plan --verify`` go through it). None when the run wrote none; a file that is not a JSON object, or an ok
    summary missing a figure, is a one-line UserError naming it."""
    from dsbench.io import read_json

    path = Path(folder) / SUMMARY
    if not path.exists():
        return None
    data = read_json(path, "run summary")
    if not isinstance(data, dict):
        raise UserError(f"{path}: a run summary is a JSON object, got {type(data).__name__}")
    return RunSummary.from_dict(data, str(path))


@dataclass(frozen=True, kw_only=True, slots=True)
class Speed:
    """How a run was made fast (absent in runs from before it was recorded)."""

    compile: bool | None = None
    fused_optimizer: bool | None = None
    attention: str | None = None
    optimizer: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class RunHeader:
    """A run's header record (the first line of ``metrics.jsonl``), what readers use of it; an empty header (a run
    that wrote none) has the defaults."""

    engine: str = "?"
    """The worker's engine (``strategy`` in the record): ddp, fsdp, deepspeed, torch_tp, torch_pp, torch_3d, single."""
    world_size: int | None = None
    model: str | None = None
    shape: dict[str, Any] | None = None
    """The model's shape as the worker resolved it (:meth:`dsbench.models.ModelShape.to_dict`)."""
    micro_batch: int | None = None
    grad_accum: int | None = None
    seq_len: int | None = None
    global_batch: int | None = None
    precision: str | None = None
    device: str = "?"
    hostnames: tuple[str, ...] = ()
    peak_tflops: float | None = None
    tp: int = 1
    pp: int = 1
    virtual_stages: int = 1
    ulysses: int = 1
    """DeepSpeed Ulysses' sequence-parallel degree (1: none)."""
    dp_shard: int | None = None
    """FSDP2's shard group size: torch_3d's, and FSDP's under HSDP (``None`` otherwise)."""
    pipeline_schedule: str | None = None
    sequence_parallel: bool = False
    loss_parallel: bool = False
    fsdp_reshard: bool = True
    activation_checkpointing: bool = False
    recompute: str = "none"
    """What the backward recomputed (``--recompute``: none, full, selective, selective-op); runs written before the
    option read as ``full`` or ``none`` from ``activation_checkpointing``."""
    ds_config: dict[str, Any] | None = None
    speed: Speed = field(default_factory=Speed)
    command: tuple[str, ...] = ()
    launch_command: str | None = None
    versions: dict[str, Any] | None = None
    machine: dict[str, Any] | None = None
    git_rev: str | None = None
    started_at: str | None = None

    @classmethod
    def from_record(cls, record: dict[str, Any], where: str = "metrics.jsonl") -> RunHeader:
        """The header of a ``header`` record (:func:`dsbench.records.header_of`), or the defaults for ``{}``; a field
        of the wrong kind is one line naming it (:mod:`dsbench.header_fields`)."""
        if problem := header_problem(record):
            raise UserError(f"{where}: {problem}")
        speed = record.get("speed") or {}
        return cls(engine=record.get("strategy", "?"), world_size=record.get("world_size"),
                   model=(record.get("model") or {}).get("name"), shape=record.get("model"),
                   micro_batch=record.get("micro_batch"),
                   grad_accum=record.get("grad_accum"), seq_len=record.get("seq_len"),
                   global_batch=record.get("global_batch"), precision=record.get("precision"),
                   device=record.get("device") or "?", hostnames=tuple(record.get("hostnames") or ()),
                   peak_tflops=record.get("peak_tflops"), tp=int(record.get("tp") or 1), pp=int(record.get("pp") or 1),
                   virtual_stages=int(record.get("virtual_stages") or 1), ulysses=int(record.get("ulysses") or 1),
                   dp_shard=record.get("dp_shard"),
                   pipeline_schedule=record.get("pipeline_schedule"),
                   sequence_parallel=bool(record.get("sequence_parallel")),
                   loss_parallel=bool(record.get("loss_parallel")),
                   fsdp_reshard=bool((record.get("fsdp") or {}).get("reshard", True)),
                   activation_checkpointing=bool(record.get("activation_checkpointing")),
                   recompute=record.get("recompute") or ("full" if record.get("activation_checkpointing") else "none"),
                   ds_config=record.get("ds_config"),
                   speed=Speed(**{key: speed.get(key) for key in ("compile", "fused_optimizer", "attention",
                                                                  "optimizer")}),
                   command=tuple(record.get("command") or ()), launch_command=record.get("launch_command"),
                   versions=record.get("versions"), machine=record.get("machine"), git_rev=record.get("git_rev"),
                   started_at=record.get("started_at"))
