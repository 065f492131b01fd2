"""``dsbench compare``: strategies side by side, measured, with a report."""

from __future__ import annotations

import sys
from typing import Any

import click

from dsbench.bench.matrix import DEFAULTS, PRECISIONS
from dsbench.commands.base import Command
from dsbench.commands.options import (
    COUNT,
    POSITIVE,
    checked_profile,
    csv_list,
    max_slowdown_option,
    wide_option,
)


def _default(key: str) -> str:
    """A matrix default as --help shows it (``bench.matrix.DEFAULTS``)."""
    value = DEFAULTS[key]
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


@click.command(cls=Command)
@click.option("--strategies", callback=csv_list(str), help=f"Comma list [{_default('strategies')}].")
@click.option("--world-sizes", callback=csv_list(int), help=f"Comma list of rank counts [{_default('world_sizes')}].")
@click.option("--micro-batches", callback=csv_list(int),
              help=f"Comma list of per-rank micro-batches [{_default('micro_batches')}].")
@click.option("--models", callback=csv_list(str), help=f"Comma list of models [{_default('models')}].")
@click.option("--hostfile", type=click.Path(dir_okay=False),
              help="Run every cell across these hosts (their slots are the world size; single stays on this "
                   "machine as the baseline).")
@click.option("--matrix", "matrix_file", type=click.Path(dir_okay=False), help="YAML/JSON matrix (flags override it).")
@click.option("--repeats", type=COUNT, help=f"Repeat every cell R times [{_default('repeats')}].")
@click.option("--steps", type=int, help=f"Optimizer steps per cell [{_default('steps')}].")
@click.option("--warmup", type=click.IntRange(min=0),
              help=f"Warm-up steps excluded from figures [{_default('warmup')}].")
@click.option("--seq-len", type=COUNT, help=f"Tokens per sample [{_default('seq_len')}].")
@click.option("--precision", type=click.Choice(PRECISIONS), help=f"[{_default('precision')}]")
@click.option("--compile", type=click.Choice(["off", "on", "both"]),
              help="torch.compile the cells: off, on, or both (each strategy eager and compiled side by side) "
                   f"[{_default('compile')}].")
@click.option("--fused-optimizer", type=click.Choice(["auto", "off", "on", "both"]),
              help="torch AdamW's fused kernel for the cells that step torch AdamW: auto (wherever it applies, as "
                   f"DeepSpeed steps its FusedAdam), off, on, or both (side by side) [{_default('fused_optimizer')}].")
@click.option("--out", type=click.Path(file_okay=False), help="Results folder [runs/compare-TIMESTAMP].")
@click.option("--resume", is_flag=True, help="Continue an interrupted matrix in --out, skipping finished cells.")
@click.option("--retry-failed", is_flag=True, help="With --resume, run failed/timed-out cells again.")
@click.option("--timeout", type=POSITIVE, default=900, show_default=True, help="Seconds per cell before it is stopped.")
@click.option("--nvme-path", help="Folder for zero3_nvme swap files [inside each cell's folder].")
@click.option("--no-report", is_flag=True, help="Do not build the report at the end.")
@click.option("--quiet", is_flag=True, help="No live progress (one line per cell).")
@click.option("--profile", type=click.Path(dir_okay=False), callback=checked_profile,
              help="Machine profile (dsbench calibrate): the report shows predicted beside measured step time.")
@max_slowdown_option
@wide_option
@click.option("--dry-run", is_flag=True, help="Check the matrix and print each cell's launch command; run nothing.")
def compare(matrix_file: str | None, out: str | None, resume: bool, retry_failed: bool, timeout: float,
            nvme_path: str | None, no_report: bool, quiet: bool, profile: Any, max_slowdown: float, wide: bool,
            dry_run: bool, **flags: Any) -> None:
    """Run a matrix of strategies side by side (real launches) and build the report."""
    from dsbench.bench.session import run_compare
    from dsbench.plan.verify import core_notes, predictor
    from dsbench.report.build import build_report
    from dsbench.report.terminal import print_report

    predict = predictor(profile)  # a bad profile is refused before any cell runs
    if flags["hostfile"]:
        from dsbench.errors import UserError
        from dsbench.hostfile import ranks_of

        if flags["world_sizes"]:
            raise UserError("--world-sizes is the ranks on this machine; with --hostfile its slots say it: drop one")
        flags["world_sizes"] = [ranks_of(flags["hostfile"])]
    if dry_run:
        _dry_run(matrix_file, flags, out, resume, retry_failed, nvme_path)
        return
    run = run_compare(matrix_file, flags, out, resume, retry_failed, timeout, nvme_path, quiet)
    if not no_report:
        built = build_report([run.folder / "cells"], run.folder / "report", predict=predict, max_slowdown=max_slowdown)
        print_report(built, wide)
        for note in core_notes(built.rows, profile):
            click.echo(f"note: {note}", err=True)
    failed = [r for r in run.results if r.status != "ok"]
    click.echo(f"{len(run.results) - len(failed)}/{len(run.results)} cells ok; results in {run.folder}"
               + (f"; report: {run.folder / 'report' / 'report.html'}" if not no_report else ""))
    interrupted = next((r for r in run.results if r.status == "interrupted"), None)
    if interrupted:
        click.echo(f"interrupted: {len(run.cells) - len(run.results)} cell(s) not started; `dsbench compare --resume "
                   f"--out {run.folder}` runs them and {interrupted.cell.id} again", err=True)
        sys.exit(130)
    sys.exit(1 if failed else 0)


def _dry_run(matrix_file: str | None, flags: dict[str, Any], out: str | None, resume: bool, retry_failed: bool,
             nvme_path: str | None) -> None:
    """The matrix checked as a run checks it, its folder included, and each cell's command; nothing written."""
    from dsbench.bench.compare import check_out, dry_run_lines
    from dsbench.bench.session import checked_matrix

    matrix, cells, folder = checked_matrix(matrix_file, flags, out)
    check_out(folder, matrix, resume)
    click.echo(f"{len(cells)} cell{'s' * (len(cells) != 1)}, one after another, into {folder} (--dry-run: nothing "
               "runs)")
    for line in dry_run_lines(cells, folder, resume, retry_failed, nvme_path):
        click.echo(line)


COMMAND = compare
