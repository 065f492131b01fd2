"""``dsbench calibrate``: the machine profile the planner reads."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from dsbench.commands.base import Command
from dsbench.commands.options import (
    COUNT,
    POSITIVE,
    check_seq_len,
)
from dsbench.errors import DsbenchError, UserError

if TYPE_CHECKING:
    from dsbench.plan.profile import Profile


@click.command(cls=Command)
@click.option("--hostfile", type=click.Path(dir_okay=False), help="Measure across these hosts (one torchrun each).")
@click.option("--num-gpus", type=COUNT, help="Ranks on this machine without a hostfile [GPUs, or 2 CPU ranks].")
@click.option("--model", default="gpt2-mini", show_default=True, help="The model whose shapes are measured.")
@click.option("--micro-batch", type=COUNT, default=2, show_default=True)
@click.option("--seq-len", type=COUNT, default=128, show_default=True)
@click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="The profile [RUN_DIR/profile.json].")
@click.option("--run-dir", type=click.Path(file_okay=False), help="Measurements and log [runs/calibrate-TIME].")
@click.option("--master-port", type=click.IntRange(1, 65535), help="Rendezvous port [a free port].")
@click.option("--timeout", type=POSITIVE, default=600, show_default=True, help="Seconds before it is stopped.")
@click.option("--check", is_flag=True,
              help="Then run one short real cell per engine family (ddp, fsdp, zero2, zero3, torch_tp2 and "
                   "torch_pipe2 where the model allows; single on one rank), print predicted vs measured and store "
                   "each family's step scale in the profile.")
@click.option("--check-repeats", type=COUNT,
              help="Launches of each check cell, interleaved (every cell once, then again) [1]; a family's scale "
                   "takes each cell's median, so 3 keeps one slow minute out of it.")
@click.option("--dry-run", is_flag=True, help="Print the command; run nothing.")
def calibrate(hostfile: str | None, num_gpus: int | None, model: str, micro_batch: int, seq_len: int,
              precision: str, output: str | None, run_dir: str | None, master_port: int | None, timeout: float,
              check: bool, check_repeats: int | None, dry_run: bool) -> None:
    """Measure this machine for the planner: compute rate per rank at the model's shapes, and latency and
    bandwidth of all-reduce, all-gather, reduce-scatter and point-to-point on the real ranks (`plan --profile`)."""
    from dsbench.envinfo import default_ranks, free_port, local_gpu_count
    from dsbench.hostfile import read_hostfile
    from dsbench.io import atomic_write_json, atomic_write_text, check_output_path, read_json
    from dsbench.launch import inherited_env
    from dsbench.launchers import LaunchSpec, build
    from dsbench.plan.profile import Profile, fit_profile
    from dsbench.plan.profile_summary import summary_lines

    _refuse_conflicts(hostfile, num_gpus, check, check_repeats)
    check_seq_len(model, seq_len)
    folder = Path(run_dir or f"runs/calibrate-{time.strftime('%Y%m%d-%H%M%S')}")
    target = Path(output) if output else folder / "profile.json"
    check_output_path(target)
    for path in (folder / "measured.json", target):
        if path.exists():
            raise UserError(f"{path} exists: choose a new {'-o' if path == target else '--run-dir'} (dsbench never "
                            "overwrites measurements)")
    hosts = tuple(read_hostfile(hostfile)) if hostfile else ()
    measured = (folder / "measured.json").absolute()
    command = " ".join(["dsbench", "calibrate", *sys.argv[2:]])
    ranks = num_gpus or default_ranks()
    spec = LaunchSpec(launcher="torchrun", strategy="ddp", module="dsbench.worker.calibrate",
                      nproc_per_node=ranks, hostfile=hostfile, hosts=hosts,
                      master_port=master_port or (29500 if dry_run else free_port()), cpu=local_gpu_count() == 0,
                      python=sys.executable, cwd=os.getcwd(), launch_script=str(folder / "launch_nodes.sh"),
                      extra_env=inherited_env(os.environ, sys.executable) if hosts else (),
                      script_args=("--model", model, "--micro-batch", str(micro_batch), "--seq-len", str(seq_len),
                                   "--precision", precision, "--out", str(measured), "--command", command))
    launch = build(spec)
    for path, text in launch.files.items():
        atomic_write_text(path, text)
    click.echo(launch.shell_line())
    checked = _check_strategies(model, ranks) if check else []
    if check:
        click.echo(f"then --check: {', '.join(checked)} (dsbench compare, into {folder / 'check'})")
    if dry_run:
        return
    from dsbench.runner import first_error, run

    code = run(launch, log_path=folder / "calibrate.log", echo=None, timeout=timeout)
    if code != 0 or not measured.exists():
        reason = first_error(folder / "calibrate.log") or "no error line in the log"
        raise DsbenchError(f"calibration failed with exit code {code}: {reason} (log: {folder}/calibrate.log)")
    profile = fit_profile(read_json(str(measured), "calibration measurements"))
    atomic_write_json(target, profile)
    for line in summary_lines(profile):
        click.echo(line)
    if check:
        profile = {**profile, "check": _self_check(Profile(str(target), profile), checked, model, ranks, micro_batch,
                                                   seq_len, precision, folder / "check", timeout,
                                                   check_repeats or 1)}
        atomic_write_json(target, profile)  # the profile this command wrote above, now with its check
    click.echo(f"profile: {target}  (dsbench plan --profile {target} ...)")


def _refuse_conflicts(hostfile: str | None, num_gpus: int | None, check: bool, check_repeats: int | None) -> None:
    if hostfile and num_gpus:
        raise UserError("--num-gpus is the ranks on this machine; with --hostfile its slots say it: drop one")
    if hostfile and check:
        raise UserError("--check runs its cells on this machine's ranks (dsbench compare): drop --hostfile or --check")
    if check_repeats and not check:
        raise UserError("--check-repeats is how often --check launches each cell: add --check or drop it")


def _check_strategies(model: str, ranks: int) -> list[str]:
    from dsbench.bench.tune import default_strategies
    from dsbench.plan.selfcheck import check_strategies

    return check_strategies(default_strategies(model, ranks))


def _self_check(profile: Profile, strategies: list[str], model: str, ranks: int, micro_batch: int, seq_len: int,
                precision: str, folder: Path, timeout: float, repeats: int) -> dict:
    """``--check``: the check cells run by dsbench compare, each predicted from the fresh profile (selfcheck.py).
    With ``repeats`` > 1 compare launches every cell once and then again (its repeats' order), so a slow minute
    falls on one launch of several cells rather than on every launch of one, and each cell's step is the median
    over its launches (report.collect)."""
    from dsbench.bench.session import run_compare
    from dsbench.console import table_console
    from dsbench.plan.selfcheck import CHECK_STEPS, CHECK_WARMUP, check_record, check_warnings
    from dsbench.plan.verify import predicted_figures
    from dsbench.report.collect import collect
    from dsbench.report.tables import check_grid
    from dsbench.strategies import get

    flags = {"strategies": strategies, "models": [model], "world_sizes": [ranks],
             "micro_batches": [micro_batch], "seq_len": seq_len, "precision": precision, "steps": CHECK_STEPS,
             "warmup": CHECK_WARMUP, "repeats": repeats}
    run = run_compare(None, flags, str(folder), resume=False, retry_failed=False, timeout=timeout, nvme_path=None,
                      quiet=True)
    failed = next((result for result in run.results if result.status != "ok"), None)
    if failed is not None:
        error = DsbenchError(f"check cell {failed.cell.id}: {failed.status} (its run: {folder / 'cells'}); the "
                             f"profile {profile.path} is written without a check")
        error.exit_code = 130 if failed.status == "interrupted" else 1  # as compare exits on Ctrl-C
        raise error
    cells = []
    for row in collect([run.folder / "cells"]):
        figures = predicted_figures(row, profile)
        median = figures["wall_step_ms"]
        # the launches' range: one step's tokens over each launch's wall-clock tokens/s, scaled from the median's
        spread = [median * row.tokens_per_s / row.tokens_per_s_max, median * row.tokens_per_s / row.tokens_per_s_min]
        cells.append({"strategy": row.base_strategy, "family": get(row.base_strategy).family,
                      "measured_step_ms": median, "measured_range_ms": spread,
                      "predicted_step_ms": figures["predicted_step_ms"]})
    record = check_record(cells, repeats)
    check_grid(record).print(table_console())
    for line in check_warnings(record):
        click.echo(line, err=True)
    return record


COMMAND = calibrate
