"""Run a matrix of cells, one real launch after another, each into its own durable folder.

Per cell: ``cell.json`` (definition, exact command, status, reason, timings; written atomically at
start and end) next to what ``dsbench launch`` writes (rendered config, accelerate YAML, launch.log
with all ranks' output, metrics.jsonl, summary.json). With ``resume`` finished cells (ok, failed
or timed out) are skipped; an interrupted cell (Ctrl-C, SIGTERM: ``cell.json`` says ``interrupted``, the
matrix stops there) is run again, its partial folder moved aside, never deleted.
"""

from __future__ import annotations

import json
import shlex
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsbench.bench.matrix import Cell, cell_launch_args
from dsbench.cell_record import CELL_FILE, CellRecord, read_cell
from dsbench.errors import UserError
from dsbench.io import atomic_write_json, read_json
from dsbench.launchers import LaunchCommand
from dsbench.records import METRICS


@dataclass(frozen=True)
class CellResult:
    cell: Cell
    status: str
    folder: Path
    reason: str | None = None
    skipped: bool = False


def cell_command(cell: Cell, folder: Path, nvme_path: str | None) -> list[str]:
    """The exact command that runs a cell (what a user would type, with this Python)."""
    return [sys.executable, "-m", "dsbench", "launch", *cell_launch_args(cell, folder, nvme_path)]


def read_status(folder: Path) -> CellRecord | None:
    """A cell's recorded status, or None when there is none to trust (missing, damaged, a FIFO, a field of another
    type: the cell runs again)."""
    try:
        return read_cell(folder)
    except UserError:
        return None


def set_aside(folder: Path) -> None:
    """Keep an interrupted cell's partial data: rename the folder, never delete it."""
    folder.rename(folder.with_name(f"{folder.name}.interrupted-{time.strftime('%Y%m%d-%H%M%S')}"))


def _eager_by_default(matrix: dict[str, Any]) -> dict[str, Any]:
    """A matrix with the speed options spelt out: one written before --compile/--fused-optimizer existed (or by
    tune, which sets neither) ran without them."""
    return {"compile": "off", "fused_optimizer": "off", **matrix}


def _first_difference(before: dict[str, Any], now: dict[str, Any], prefix: str = "",
                      free: tuple[str, ...] = ()) -> tuple[str, Any, Any] | None:
    """The first key (by name; a dotted path into nested objects, as tune's ``tune.strategies``) whose value
    differs, with its two values; None where none does. ``free``: dotted paths a resume may change."""
    for key in sorted(set(before) | set(now)):
        there, here = before.get(key), now.get(key)
        if isinstance(there, dict) and isinstance(here, dict):
            if found := _first_difference(there, here, f"{prefix}{key}.", free):
                return found
        elif there != here and f"{prefix}{key}" not in free:
            return f"{prefix}{key}", there, here
    return None


def prepare_out(out: Path, matrix: dict[str, Any], resume: bool, free: tuple[str, ...] = ()) -> None:
    """Create the results folder; refuse to mix with earlier results unless resuming the same matrix (``free``:
    the dotted paths of settings a resume may change, which shape no run: tune's ``tune.budget``)."""
    check_out(out, matrix, resume, free)
    atomic_write_json(out / "matrix.json", {"matrix": matrix, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")})


def check_out(out: Path, matrix: dict[str, Any], resume: bool, free: tuple[str, ...] = ()) -> None:
    """What :func:`prepare_out` refuses, writing nothing (a dry run's check)."""
    existing = out / "matrix.json"
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a folder")
    if existing.exists() and not resume:
        raise UserError(f"{out} already holds results: pass --resume to continue it, or choose a new --out")
    others = sorted(p.name for p in out.iterdir()) if out.is_dir() and not existing.exists() else []
    if others:  # a folder of the user's: its files stay theirs (until 2026-12-03 tune wrote its tune.json over one)
        raise UserError(f"--out {out}: holds files that are not dsbench results ({others[0]}"
                        f"{f' and {len(others) - 1} more' if len(others) > 1 else ''}): choose a new or empty --out")
    if existing.exists():
        recorded = read_json(existing, "results folder's matrix.json")  # a regular, bounded UTF-8 JSON file
        before = recorded.get("matrix") if isinstance(recorded, dict) else None
        if not isinstance(before, dict):
            raise UserError(f"{out} holds a different matrix; --resume needs the same flags (or a new --out)")
        # e.g. a folder from before --fused-optimizer auto became compare's default: it ran "off"
        differ = _first_difference(_eager_by_default(before), _eager_by_default(matrix), free=free)
        if differ:
            key, there, now = differ
            raise UserError(f"{out} holds a different matrix ({key}: {json.dumps(there)} there, {json.dumps(now)} "
                            "now); --resume needs the same flags (or a new --out)")


def _watch(metrics: Path, stop: threading.Event, on_step: Callable[[dict[str, Any]], None]) -> None:
    """Poll the running cell's metrics file and report its last step (live progress)."""
    seen = 0
    while not stop.wait(0.5):
        try:
            lines = metrics.read_text().splitlines()
        except OSError:
            continue
        if len(lines) > seen:
            seen = len(lines)
            try:
                record = json.loads(lines[-1])
            except json.JSONDecodeError:
                continue
            if record.get("type") == "step":
                on_step(record)


def run_cell(cell: Cell, folder: Path, timeout: float, nvme_path: str | None,
             on_step: Callable[[dict[str, Any]], None] = lambda r: None) -> CellResult:
    """Launch one cell and record its outcome; a failure is recorded, not raised."""
    from dsbench.launch_log import first_error
    from dsbench.runner import Interrupted, run

    argv = cell_command(cell, folder, nvme_path)
    started = time.time()
    status: dict[str, Any] = {"cell": cell.to_dict(), "id": cell.id, "command": shlex.join(argv),
                              "status": "running", "started": started}
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / CELL_FILE, status)
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(folder / METRICS, stop, on_step), daemon=True)
    watcher.start()
    try:
        code = run(LaunchCommand(argv=argv), log_path=folder / "compare.log", echo=None, timeout=timeout)
    except Interrupted as exc:  # Ctrl-C/SIGTERM: the cell's processes are stopped; record it, keep its files
        status.update(status="interrupted", exit_code=exc.exit_code, reason=str(exc), finished=time.time(),
                      duration_s=round(time.time() - started, 1))
        atomic_write_json(folder / CELL_FILE, status)
        return CellResult(cell=cell, status="interrupted", folder=folder, reason=str(exc))
    finally:
        stop.set()
        watcher.join()
    ok = code == 0 and (folder / "summary.json").exists()
    outcome = "ok" if ok else "timeout" if code == 124 else "failed"
    reason = None if ok else (f"timed out after {timeout:.0f} s" if code == 124 else
                              f"exit code {code}: {first_error(folder / 'compare.log') or 'no error line in the log'}")
    status.update(status=outcome, exit_code=code, reason=reason, finished=time.time(),
                  duration_s=round(time.time() - started, 1))
    atomic_write_json(folder / CELL_FILE, status)
    return CellResult(cell=cell, status=outcome, folder=folder, reason=reason)


def skips(folder: Path, resume: bool, retry_failed: bool) -> CellRecord | None:
    """The finished cell's status when --resume keeps it (not run again), else None."""
    previous = read_status(folder)
    done = previous is not None and previous.finished
    return previous if resume and done and not (retry_failed and previous.status != "ok") else None


def dry_run_lines(cells: list[Cell], out: Path, resume: bool, retry_failed: bool, nvme_path: str | None) -> list[str]:
    """What ``compare --dry-run`` prints: each cell, in the order it would run, with the command that runs it, or
    the finished status that ``--resume`` keeps."""
    lines = []
    for index, cell in enumerate(cells, start=1):
        folder = out / "cells" / cell.id
        kept = skips(folder, resume, retry_failed)
        what = (f"finished ({kept.status}): --resume keeps it" if kept else
                shlex.join(["dsbench", "launch", *cell_launch_args(cell, folder, nvme_path)]))
        lines.append(f"{index}/{len(cells)} {cell.id}: {what}")
    return lines


def run_matrix(cells: list[Cell], out: Path, resume: bool, retry_failed: bool, timeout: float,
               nvme_path: str | None, reporter: Any) -> list[CellResult]:
    """Run every cell not already finished; ``reporter`` shows progress (see :mod:`dsbench.bench.progress`)."""
    results: list[CellResult] = []
    reporter.start(len(cells))
    for cell in cells:
        folder = out / "cells" / cell.id
        previous = skips(folder, resume, retry_failed)
        if previous is not None:
            results.append(CellResult(cell=cell, status=previous.status, folder=folder, reason=previous.reason,
                                      skipped=True))
            reporter.skipped(cell, previous.status)
            continue
        if folder.exists():
            set_aside(folder)
        reporter.begin(cell)
        result = run_cell(cell, folder, timeout, nvme_path, on_step=lambda r, c=cell: reporter.step(c, r))
        reporter.end(cell, result.status, result.reason)
        results.append(result)
        if result.status == "interrupted":  # the user stopped the matrix: no further cell starts
            break
    reporter.stop()
    return results
