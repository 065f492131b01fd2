"""Build every report artefact from run folders (no re-run): table, CSV, JSON, Markdown, PNGs, HTML."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dsbench.errors import UserError
from dsbench.io import atomic_write_text, json_object_with
from dsbench.report.collect import collect
from dsbench.report.files import REPORT_FILES
from dsbench.report.render import to_csv, to_json, to_markdown
from dsbench.report.verdict import MAX_SLOWDOWN, verdict
from dsbench.rows import Row


@dataclass(frozen=True)
class Report:
    rows: list[Row]
    folder: Path
    files: dict[str, Path]
    verdict: list[str]
    """The answer first (dsbench/report/verdict.py): the terminal, Markdown and HTML open with it."""


def environment(rows: list[Row]) -> dict[str, Any]:
    """Versions and machines of the runs (from their headers)."""
    headers = [run.header for row in rows for run in row.runs if run.header.engine != "?"]
    return {"versions": sorted({str(h.versions) for h in headers}),
            "machines": sorted({str(h.machine) for h in headers}),
            "git_revisions": sorted({str(h.git_rev) for h in headers})}


def refuse_to_overwrite(out: Path) -> None:
    """Nothing a user wrote is lost: a file of the report's names in ``out`` is written over only where the folder
    holds an earlier dsbench report (its report.json: method, env and cells). Until 2026-12-03 ``-o`` wrote over a
    user's own report.md."""
    present = [name for name in REPORT_FILES if (out / name).exists()]
    if present and not json_object_with(out / "report.json", {"method", "env", "cells"}):
        raise UserError(f"{out / present[0]} is not from a dsbench report (no report.json of one beside it), and the "
                        "report would write over it: give the report a new or empty folder (-o)")


Predict = Callable[[Row], dict[str, Any]]
"""Figures to add to one report row, by field name (the planner's predictions beside the measurement:
``dsbench.plan.verify.predicted_figures``)."""


def build_report(roots: list[Path], out: Path, plots: bool = True, predict: Predict | None = None,
                 max_slowdown: float = MAX_SLOWDOWN) -> Report:
    """Collect ``roots`` (merged) and write all artefacts into ``out``; ``predict`` adds predicted columns;
    ``max_slowdown`` bounds the verdict's memory-frugal choice."""
    refuse_to_overwrite(out)
    rows = collect(roots)
    if not rows:
        raise UserError(f"no runs found under {', '.join(map(str, roots))} (looked for cell.json / metrics.jsonl)")
    if predict is not None:
        rows = [replace(row, **predict(row)) for row in rows]
    env = environment(rows)
    answer = verdict(rows, max_slowdown)
    written = atomic_write_text(out / "report.json", to_json(rows, env))  # first: it marks the folder a report's
    files = {"markdown": atomic_write_text(out / "report.md", to_markdown(rows, answer)),
             "csv": atomic_write_text(out / "report.csv", to_csv(rows)), "json": written}
    if plots:
        from dsbench.report.html import write_html
        from dsbench.report.plots import all_plots

        images = all_plots(rows, out)
        files.update({f"png:{name}": path for name, path in images.items()})
        files["html"] = write_html(rows, images, env, out / "report.html", answer)
    return Report(rows=rows, folder=out, files=files, verdict=answer)
