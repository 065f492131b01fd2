"""Read run folders into tidy rows and derive comparison figures (pure: files in, typed rows out: dsbench/rows.py).

A run folder is anything holding ``metrics.jsonl`` (a ``dsbench launch`` / ``dsbench.train`` run, or a
compare cell, which adds ``cell.json``). Failed cells have a ``cell.json`` and maybe no metrics.
Repeats of the same cell (same strategy, world size, micro-batch, model, device) are grouped: the
row's wall-clock throughput is the median over repeats (min-max beside it), its timed-region figures
the median over repeats of each repeat's median.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from dsbench.cell_record import CELL_FILE, CellRecord, read_cell
from dsbench.errors import UserError
from dsbench.record_fields import number_field
from dsbench.records import METRICS, header_of, read_records, scaling_efficiency, summarize
from dsbench.rows import Row, Run
from dsbench.run_record import RunHeader, RunSummary, read_summary
from dsbench.strategy_match import name_of_run
from dsbench.trainspec import INTERLEAVED
from dsbench.zero_section import zero_settings

KEY = ("model", "device", "micro_batch", "world_size", "strategy")


def find_runs(roots: list[Path]) -> list[Path]:
    """Every run folder under the given roots (a folder with metrics.jsonl or cell.json)."""
    found: set[Path] = set()
    for root in roots:
        if not root.exists():
            continue
        for marker in (CELL_FILE, METRICS):
            for path in root.rglob(marker):
                if ".interrupted-" not in str(path.parent):
                    found.add(path.parent)
    return sorted(found)


SPEED_SUFFIXES = {"compile": "+compile", "fused_optimizer": "+fused"}
"""The worker's speed options as a row's label shows them (``ddp+compile+fused``)."""


def label_for(strategy: str, compile: bool = False, fused_optimizer: bool = False) -> str:
    """A row's label as printed: the strategy as compare spells it, ``+compile`` when the worker compiled the model,
    ``+fused`` when it stepped with torch AdamW's fused kernel by request (``ddp+compile+fused``). Labels are
    printed, never parsed: rows carry the strategy and the options as fields."""
    options = {"compile": compile, "fused_optimizer": fused_optimizer}
    return strategy + "".join(suffix for key, suffix in SPEED_SUFFIXES.items() if options[key])


def _options(header: RunHeader, cell: CellRecord | None) -> tuple[bool, bool]:
    """(compile, fused optimizer) as requested: from the cell, else the run header."""
    if cell:
        return cell.compile, cell.fused_optimizer
    return bool(header.speed.compile), bool(header.speed.fused_optimizer)


def run_label(header: RunHeader, cell: CellRecord | None) -> str:
    """A run's printed label (:func:`label_for` of its strategy and speed options)."""
    return label_for(_strategy_name(header, cell), *_options(header, cell))


def _strategy_name(header: RunHeader, cell: CellRecord | None) -> str:
    """The run's strategy as compare names it: the cell's, else from what the header records
    (dsbench/strategy_match.py ``name_of_run``)."""
    if cell:
        return cell.strategy
    engine = header.engine
    zero = zero_settings(header.ds_config or {})

    chunks = header.virtual_stages if header.pipeline_schedule in INTERLEAVED else 1
    dp = (header.world_size or 1) // (header.tp * header.pp)
    shard = header.dp_shard if header.dp_shard not in (None, dp) else 0  # a shard group of every dp rank: FSDP
    return name_of_run(engine, zero.stage if engine == "deepspeed" else None, zero.offload, zero.offload_param,
                       header.tp, header.pp, header.fsdp_reshard, header.sequence_parallel, header.loss_parallel,
                       chunks, header.pipeline_schedule == "interleaved-zb", header.ulysses, shard)


def run_status(cell: CellRecord | None, summary: RunSummary, losses: list[Any]) -> tuple[str, str | None]:
    """A run is ok only when its cell says so (if it has one), its summary is complete, and every loss is a
    finite number; otherwise the status and reason say what is missing."""
    status = cell.status if cell else "ok"
    reason = cell.reason if cell else None
    if status != "ok":
        return status, reason
    if not summary.ok:
        kind = "interrupted" if summary.status == "interrupted" else "incomplete"
        return kind, summary.reason or f"summary status {summary.status!r}"
    bad = next((i for i, loss in enumerate(losses, 1)
                if not isinstance(loss, int | float) or isinstance(loss, bool) or not math.isfinite(loss)), None)
    if bad is not None:
        return "failed", f"loss at step {bad} is {losses[bad - 1]!r}"
    if summary.replicas is not None and not summary.replicas["agree"]:
        return "diverged", (f"the data-parallel copies differed after the last step (ranks "
                            f"{summary.replicas.get('differing_ranks')} against their groups' first rank)")
    return "ok", None


def load_run(folder: Path) -> Run:
    """One run: definition, status, summary figures and the per-step series. A folder whose files are corrupt,
    half-written or wrongly typed becomes a run with status ``corrupt`` and the reason; it never stops the other
    folders of a merge."""
    try:
        return _load_run(folder)
    except UserError as exc:
        return _corrupt(folder, str(exc))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        return _corrupt(folder, f"{type(exc).__name__}: {exc}")


def _corrupt(folder: Path, why: str) -> Run:
    return Run(folder=str(folder), id=folder.name, strategy="?", base_strategy="?", status="corrupt",
               reason=why.splitlines()[0][:300])


def _load_run(folder: Path) -> Run:
    cell = read_cell(folder)
    records = read_records(folder / METRICS) if (folder / METRICS).exists() else []
    if (folder / METRICS).exists() and not header_of(records) and not cell:
        raise UserError(f"{folder / METRICS}: no complete header record (the run stopped before its first line was "
                        "written)")
    header = RunHeader.from_record(header_of(records), str(folder / METRICS))
    # the one reader of summary.json (it upgrades old schemas and checks the figures); a run killed before writing
    # one is summarised from its records
    summary = read_summary(folder) or RunSummary.from_dict(summarize(records), str(folder / METRICS))
    steps = [r for r in records if r.get("type") == "step"]
    status, reason = run_status(cell, summary, [s.get("loss") for s in steps])
    base = _strategy_name(header, cell)
    compiled, fused = _options(header, cell)
    return Run(folder=str(folder), id=cell.id if cell else folder.name, strategy=label_for(base, compiled, fused),
               base_strategy=base, with_compile=compiled, with_fused=fused, status=status, reason=reason,
               model=cell.model if cell else header.model,
               world_size=cell.world_size if cell else header.world_size,
               micro_batch=cell.micro_batch if cell else header.micro_batch,
               repeat=cell.repeat if cell else 0, device=header.device.split(":")[0],
               command=cell.command if cell else " ".join(header.command),
               launch_command=header.launch_command, ds_config=header.ds_config, header=header, summary=summary,
               losses=[s["loss"] for s in steps],
               step_times=_step_times(steps, str(folder / METRICS)))


def _step_times(steps: list[dict[str, Any]], where: str) -> list[float]:
    """The measured (not warm-up) steps' times in seconds; a step whose warmup is not true or false, or whose time
    is not a number >= 0, is one line naming the step."""
    times = []
    for index, step in enumerate(steps, 1):
        name = f"step {step.get('step', index)}"
        if not isinstance(step.get("warmup"), bool):
            raise UserError(f"{where}: {name}'s warmup is {step.get('warmup')!r}, not true or false")
        if not step["warmup"]:
            seconds = number_field(step.get("step_time_s"), where, f"{name}'s step_time_s")
            if seconds < 0:
                raise UserError(f"{where}: {name}'s step_time_s is {seconds!r}, not a time (>= 0 s)")
            times.append(float(seconds))
    return times


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _extreme(pick: Any, values: list[float | None]) -> float | None:
    """The min or max of the figures every repeat has (None when one lacks it: an old summary)."""
    return None if not values or any(v is None for v in values) else pick(values)


def _speed(header: RunHeader) -> dict[str, Any]:
    """How a run was made fast, from its header (absent in runs from before it was recorded)."""
    speed = header.speed
    return {"compile": speed.compile, "fused_optimizer": speed.fused_optimizer, "attention": speed.attention,
            "optimizer": speed.optimizer}


def _figures(ok: list[Run]) -> dict[str, Any]:
    """The measured figures of a cell's finished repeats (see :class:`dsbench.rows.Row`)."""
    sums = [run.summary for run in ok if run.summary is not None]
    states = sums[0].model_state_bytes_per_rank or ({},)
    walls = [s.throughput for s in sums if s.throughput]
    timed = [s.timed for s in sums if s.timed]
    return dict(
        tokens_per_s=_median([w.tokens_per_s for w in walls]),
        tokens_per_s_min=min((w.tokens_per_s for w in walls), default=None),
        tokens_per_s_max=max((w.tokens_per_s for w in walls), default=None),
        window_s=_median([w.window_s for w in walls]),
        mfu=_median([w.mfu for w in walls if w.mfu is not None]),
        timed_tokens_per_s=_median([t.tokens_per_s.median for t in timed]),
        timed_tokens_per_s_p10=_extreme(min, [t.tokens_per_s.p10 for t in timed]),
        timed_tokens_per_s_p90=_extreme(max, [t.tokens_per_s.p90 for t in timed]),
        timed_mfu=_median([t.mfu.median for t in timed if t.mfu]),
        outside_timed_fraction=_median([s.outside_timed_fraction for s in sums
                                        if s.outside_timed_fraction is not None]),
        step_time_ms=1e3 * _median([t.step_time_s.median for t in timed]),
        step_time_ms_min=1e3 * _extreme(min, [t.step_time_s.min for t in timed]),
        step_time_ms_max=1e3 * _extreme(max, [t.step_time_s.max for t in timed]),
        peak_memory_mib=max(max(s.peak_memory_bytes_per_rank) for s in sums) / 2**20,
        memory_kind=sums[0].memory_kind,
        model_states_mib=states[0].get("total", 0) / 2**20, model_states=states[0],
        final_loss=_median([s.final_loss for s in sums]), measured_steps=sums[0].measured_steps,
        warmup_steps=sums[0].warmup_steps,
        warmup_s=_median([s.warmup_s for s in sums if s.warmup_s is not None]),
        skipped_steps=max(s.skipped_steps for s in sums),
        **_speed(ok[0].header))


LAYOUT_WORDS = {"micro_batch": "mb{}", "grad_accum": "x{}", "recompute": "{}", "seq_len": "seq {}",
                "precision": "{}"}
"""What else makes a run of one strategy another cell (its layout and workload), as a label names it where two
runs of one strategy, model, device and ranks differ in it: ``ddp+fused mb1 x4``, tune's spelling of a layout."""


def _layout(run: Run) -> dict[str, Any]:
    recompute = run.header.recompute
    return {"micro_batch": run.micro_batch, "grad_accum": run.header.grad_accum, "seq_len": run.header.seq_len,
            "recompute": "ckpt" if recompute == "full" else "" if recompute == "none" else f"recompute {recompute}",
            "precision": run.header.precision}


def told_apart(runs: list[Run]) -> list[Run]:
    """Runs of one strategy on one model, device and ranks that differ in their layout or workload (a tune's cells,
    a compare over several micro-batches, merged folders of two sequence lengths) labelled with what differs, so
    that each is its own row and reads as such. Until 2026-12-03 they printed as one label twice, and layouts that
    differed in accumulation or activation checkpointing alone merged into one row as if repeats."""
    def cell(run: Run) -> tuple[Any, ...]:
        return run.model, run.device, run.world_size, run.strategy

    seen: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for run in runs:
        seen.setdefault(cell(run), []).append(_layout(run))
    out = []
    for run in runs:
        differ = {key for key in LAYOUT_WORDS if len({str(layout[key]) for layout in seen[cell(run)]}) > 1}
        if differ & {"micro_batch", "grad_accum"}:
            differ |= {"micro_batch", "grad_accum"}  # a batch split reads whole: mb1 x4
        layout = _layout(run)
        words = [LAYOUT_WORDS[key].format(layout[key]) for key in LAYOUT_WORDS if key in differ and layout[key]]
        out.append(replace(run, strategy=" ".join([run.strategy, *words])) if words and run.strategy != "?" else run)
    return out


def group_rows(runs: list[Run]) -> list[Row]:
    """One row per cell (repeats merged) with medians, spreads and derived figures; runs of one strategy in other
    layouts are other cells (:func:`told_apart`)."""
    groups: dict[tuple, list[Run]] = {}
    for run in told_apart(runs):
        groups.setdefault(tuple(getattr(run, k) for k in KEY), []).append(run)
    rows = []
    for key, members in sorted(groups.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        ok = [m for m in members if m.status == "ok"]
        first = members[0]
        rows.append(Row(**dict(zip(KEY, key, strict=True)), base_strategy=first.base_strategy,
                        with_compile=first.with_compile, with_fused=first.with_fused, repeats=len(members),
                        ok=len(ok), status="ok" if ok else first.status, reason=None if ok else first.reason,
                        runs=members, **(_figures(ok) if ok else {})))
    return _derive(rows)


def steps_fused(optimizer: str | None) -> bool:
    """Whether a run's optimizer (the header's ``speed.optimizer``) is a fused kernel: torch AdamW's ``fused``, or
    DeepSpeed's own (FusedAdam, DeepSpeedCPUAdam); not torch's for-loop or foreach, nor a run that did not say."""
    return bool(optimizer) and optimizer != "unknown" and (optimizer == "AdamW (fused)"
                                                           or not optimizer.startswith("AdamW ("))


def single_baselines(row: Row) -> list[str]:
    """The ``single`` rows a row's scaling efficiency may be measured against, best first: compiled like it, then
    not; with a fused Adam when it steps one (``+fused``, or DeepSpeed's FusedAdam), then without."""
    compiled = [True, False] if row.with_compile else [False]
    fused = [True, False] if row.with_fused or steps_fused(row.optimizer) else [False, True]
    return [label_for("single", c, f) for c in compiled for f in fused]


def _derive(rows: list[Row]) -> list[Row]:
    """Scaling efficiency (vs the same strategy at 1 rank, else the single run closest in speed options: see
    :func:`single_baselines`) and speed-up vs DDP (uncompiled, with torch AdamW's for-loop when that ran, else its
    fused kernel, compare's default: what the speed options gain shows there)."""
    by_key = {(r.model, r.device, r.micro_batch, r.world_size, r.strategy): r for r in rows}
    derived = []
    for row in rows:
        base = (row.model, row.device, row.micro_batch)
        one = next((by_key[key] for key in [(*base, 1, row.strategy)]
                    + [(*base, 1, name) for name in single_baselines(row)] if key in by_key), None)
        ddp = by_key.get((*base, row.world_size, "ddp")) or by_key.get(
            (*base, row.world_size, label_for("ddp", fused_optimizer=True)))
        tps = row.tokens_per_s
        efficiency = (scaling_efficiency(tps, row.world_size, one.tokens_per_s)
                      if tps and one and one.tokens_per_s else None)
        derived.append(replace(row, scaling_efficiency=efficiency,
                               scaling_baseline=one.strategy if efficiency is not None else None,
                               speedup_vs_ddp=tps / ddp.tokens_per_s if tps and ddp and ddp.tokens_per_s else None))
    return derived


def collect(roots: list[Path]) -> list[Row]:
    """Rows for every run under ``roots`` (several result folders merge into one report)."""
    return group_rows([load_run(folder) for folder in find_runs(roots)])
