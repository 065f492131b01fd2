"""The report's rows as typed records (stdlib only): one run folder as the report reads it, one cell of the
comparison with its repeats merged, and one ``plan --verify`` candidate's run beside its prediction.

``dsbench.report.collect`` makes them from run folders; the report's tables, verdict, plots and files, ``plan
--verify``, calibrate's check and the scripts read their attributes. A table column names a field
(``report.render.COLUMNS``), read with :meth:`Row.figure`; the CSV and JSON files write the same fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from dsbench.run_record import RunHeader, RunSummary


@dataclass(frozen=True, kw_only=True, slots=True)
class Run:
    """One run folder: its definition, status, summary figures and per-step series."""

    folder: str
    id: str
    strategy: str
    """The printed label (``ddp+compile+fused``): :attr:`base_strategy` and the speed options."""
    base_strategy: str
    """The strategy as compare names it."""
    with_compile: bool = False
    with_fused: bool = False
    status: str
    reason: str | None = None
    model: str | None = None
    world_size: int | None = None
    micro_batch: int | None = None
    repeat: int = 0
    device: str = "?"
    command: str = ""
    launch_command: str | None = None
    ds_config: dict[str, Any] | None = None
    header: RunHeader = field(default_factory=RunHeader)
    summary: RunSummary | None = None
    losses: list[Any] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)
    """Seconds of each measured (not warm-up) step."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    """One cell (strategy x ranks x micro-batch x model x device) with its repeats merged: the wall-clock throughput
    is the median over repeats (min-max beside it), the timed-region figures the median of each repeat's median.
    Figures a failed cell lacks are None."""

    # what the cell is (report.collect.KEY)
    model: str | None
    device: str
    micro_batch: int | None
    world_size: int | None
    strategy: str
    """The printed label (:attr:`Run.strategy`)."""
    base_strategy: str
    with_compile: bool = False
    with_fused: bool = False
    # how its runs went
    repeats: int = 1
    ok: int = 0
    status: str = "ok"
    reason: str | None = None
    runs: list[Run] = field(default_factory=list)
    # measured (median over the repeats that finished)
    tokens_per_s: float | None = None
    tokens_per_s_min: float | None = None
    tokens_per_s_max: float | None = None
    window_s: float | None = None
    mfu: float | None = None
    timed_tokens_per_s: float | None = None
    timed_tokens_per_s_p10: float | None = None
    timed_tokens_per_s_p90: float | None = None
    timed_mfu: float | None = None
    outside_timed_fraction: float | None = None
    step_time_ms: float | None = None
    step_time_ms_min: float | None = None
    step_time_ms_max: float | None = None
    peak_memory_mib: float | None = None
    memory_kind: str | None = None
    model_states_mib: float | None = None
    model_states: dict[str, Any] | None = None
    """Rank 0's model-state bytes by part (params, grads, optimizer, master, total)."""
    final_loss: float | None = None
    measured_steps: int | None = None
    warmup_steps: int | None = None
    warmup_s: float | None = None
    skipped_steps: int | None = None
    """The most optimizer steps fp16's loss scale skipped in one of the cell's runs (0 in fp32 and bf16)."""
    # how the run was made fast (its header's ``speed``)
    compile: bool | None = None
    fused_optimizer: bool | None = None
    attention: str | None = None
    optimizer: str | None = None
    # derived across rows (report.collect)
    scaling_efficiency: float | None = None
    scaling_baseline: str | None = None
    speedup_vs_ddp: float | None = None
    # predicted with a machine profile (plan.verify.predicted_figures)
    wall_step_ms: float | None = None
    predicted_step_ms: float | None = None
    step_error: float | None = None
    predicted_dominant: str | None = None
    predicted_low_ms: float | None = None
    predicted_high_ms: float | None = None
    predicted_peak_mib: float | None = None
    peak_error: float | None = None

    def figure(self, name: str) -> Any:
        """A field by a table column's name (report.render.COLUMNS, EXPORT_KEYS)."""
        return getattr(self, name)


FIGURES = frozenset(f.name for f in fields(Row))
"""Every field a row has: the columns and file keys that name one."""


@dataclass(frozen=True, kw_only=True)
class VerifyRow:
    """One candidate's run beside its prediction (``dsbench plan --verify``). The figures are None when the run
    failed or recorded no measured window."""

    candidate: str
    folder: str
    status: str
    note: str | None = None
    predicted_model_state_bytes: float | None = None
    measured_model_state_bytes: float | None = None
    model_state_error: float | None = None
    """(predicted - measured) / measured, model states on the busiest rank."""
    accounting: str | None = None
    measured_peak_memory_bytes: float | None = None
    memory_kind: str | None = None
    tokens_per_s: float | None = None
    measured_step_s: float | None = None
    """By the wall clock: the measured window over its steps."""
    predicted_step_s: float | None = None
    step_error: float | None = None
    predicted_peak_memory_bytes: float | None = None
    """The planner's device total, only where the measured peak is the GPU allocator's."""
    peak_memory_error: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON row: the figures that exist."""
        return {name: value for name, value in asdict(self).items() if value is not None}
