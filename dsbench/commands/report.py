"""``dsbench report``: tables, plots and an HTML report of run folders."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from dsbench.commands.base import Command
from dsbench.commands.options import (
    checked_profile,
    max_slowdown_option,
    wide_option,
)


@click.command(cls=Command)
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False, exists=True))
@click.option("-o", "--out", type=click.Path(file_okay=False), help="Report folder [first RUN_DIR/report].")
@click.option("--no-plots", is_flag=True, help="Tables only (no matplotlib).")
@click.option("--profile", type=click.Path(dir_okay=False), callback=checked_profile,
              help="Machine profile (dsbench calibrate): add the planner's predicted step time beside the measured.")
@max_slowdown_option
@wide_option
def report(run_dirs: tuple[str, ...], out: str | None, no_plots: bool, profile: Any, max_slowdown: float,
           wide: bool) -> None:
    """Build tables, CSV/JSON/Markdown, PNG plots and an HTML report from run folders (merged; nothing re-runs),
    opening with a verdict: the fastest strategy, those within noise of it, the least memory within --max-slowdown.
    Exit 1 when a folder could not be read (it is listed as corrupt; the others are reported)."""
    from dsbench.plan.verify import core_notes, predictor
    from dsbench.report.build import build_report
    from dsbench.report.terminal import print_report

    folder = Path(out or Path(run_dirs[0]) / "report")
    built = build_report([Path(d) for d in run_dirs], folder, plots=not no_plots, predict=predictor(profile),
                         max_slowdown=max_slowdown)
    print_report(built, wide)
    for note in core_notes(built.rows, profile):
        click.echo(f"note: {note}", err=True)
    corrupt = [run for row in built.rows for run in row.runs if run.status == "corrupt"]
    for run in corrupt:
        click.echo(f"dsbench: warning: {run.folder}: unreadable run folder ({run.reason}); reported as corrupt",
                   err=True)
    sys.exit(1 if corrupt else 0)


COMMAND = report
