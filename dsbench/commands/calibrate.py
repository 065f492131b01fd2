"""``dsbench calibrate``: the machine profile the planner reads."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from dsbench.commands.base import Command
from dsbench.commands.options import (
    COUNT,
    POSITIVE,
    check_seq_len,
    csv_list,
)
from dsbench.errors import DsbenchError, UserError

MIN_REPEATS, MAX_REPEATS = 3, 100
"""The fewest samples a figure is timed over (a median of three outlasts one slow sample; p10/p90 are then the
extremes) and the most (100 take about 20 times the default's 5, past the default --timeout)."""

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
@click.option("--repeats", type=click.IntRange(MIN_REPEATS, MAX_REPEATS), default=5, show_default=True,
              help="Timed samples of each kernel and engine figure, interleaved; the profile keeps their median "
                   "and p10/p90 (collectives take at least 5, the pipelines and the model at least 7, the ZeRO "
                   "steps and split layers on the model 3 per repeat). More steadies a busy machine's figures; 3 "
                   "is quicker and noisier.")
@click.option("--check", is_flag=True,
              help="Then run one short real cell per engine family (ddp, fsdp, zero2, zero3, torch_tp2 and "
                   "torch_pipe2 where the model allows; single on one rank), print predicted vs measured and store "
                   "each family's step scale in the profile. On one CUDA GPU: single and ZeRO-1/2/3, which fit "
                   "the host's zero_host_us.")
@click.option("--check-strategies", callback=csv_list(str),
              help="Comma list: only these of --check's cells (each family not named keeps no step scale) "
                   "[every family's].")
@click.option("--check-repeats", type=COUNT,
              help="Launches of each check cell, interleaved (every cell once, then again) [1]; a family's scale "
                   "takes each cell's median, so 3 keeps one slow minute out of it.")
@click.option("--dry-run", is_flag=True, help="Print the command; run nothing.")
def calibrate(hostfile: str | None, num_gpus: int | None, model: str, micro_batch: int, seq_len: int,
              precision: str, output: str | None, run_dir: str | None, master_port: int | None, timeout: float,
              repeats: int, check: bool, check_strategies: list[str] | None, check_repeats: int | None,
              dry_run: bool) -> None:
    """Measure this machine for the planner: compute rate per rank at the model's shapes, and latency and
    bandwidth of all-reduce, all-gather, reduce-scatter and point-to-point on the real ranks (`plan --profile`).
    On CUDA GPUs also the GPU time model's own constants: GEMM efficiency, HBM bandwidth, the flash kernel."""
    from dsbench.envinfo import default_ranks, free_port, local_gpu_count
    from dsbench.io import atomic_write_json, atomic_write_text
    from dsbench.local_ranks import check_ranks_here
    from dsbench.plan.profile_summary import summary_lines

    _refuse_conflicts(hostfile, num_gpus, check, check_repeats, check_strategies)
    check_seq_len(model, seq_len)
    folder, target = _new_paths(run_dir, output)
    measured = (folder / "measured.json").absolute()
    ranks = num_gpus or default_ranks()
    if not hostfile:
        check_ranks_here(ranks, "--num-gpus")
    checked = _check_strategies(model, ranks, local_gpu_count() > 0, check_strategies) if check else []
    launch = _launch(hostfile, ranks, master_port or (29500 if dry_run else free_port()), folder, (
        "--model", model, "--micro-batch", str(micro_batch), "--seq-len", str(seq_len), "--precision", precision,
        "--repeats", str(repeats), "--out", str(measured), "--command",
        " ".join(["dsbench", "calibrate", *sys.argv[2:]])))
    for path, text in launch.files.items():
        atomic_write_text(path, text)
    click.echo(launch.shell_line())
    if check:
        click.echo(f"then --check: {', '.join(checked)} (dsbench compare, into {folder / 'check'})")
    if dry_run:
        return
    profile = _measure(launch, folder, measured, timeout)
    atomic_write_json(target, profile)
    click.echo("\n".join(summary_lines(profile)))
    if check:
        cells = _run_cells(checked, model, ranks, micro_batch, seq_len, precision, folder / "check", timeout,
                           check_repeats or 1, str(target))
        atomic_write_json(target, _with_check(target, profile, cells, check_repeats or 1, check_strategies))
    click.echo(f"profile: {target}  (dsbench plan --profile {target} ...)")


def _launch(hostfile: str | None, ranks: int, port: int, folder: Path, script_args: tuple[str, ...]) -> Any:
    """The calibration's ranks: torchrun on this machine, or one per host of the hostfile."""
    from dsbench.envinfo import local_gpu_count
    from dsbench.hostfile import read_hostfile
    from dsbench.launch_request import inherited_env
    from dsbench.launchers import LaunchSpec, build

    hosts = tuple(read_hostfile(hostfile)) if hostfile else ()
    return build(LaunchSpec(
        launcher="torchrun", strategy="ddp", module="dsbench.worker.calibrate", nproc_per_node=ranks,
        hostfile=hostfile, hosts=hosts, master_port=port, cpu=local_gpu_count() == 0, python=sys.executable,
        cwd=os.getcwd(), launch_script=str(folder / "launch_nodes.sh"),
        extra_env=inherited_env(os.environ, sys.executable) if hosts else (), script_args=script_args))


def _new_paths(run_dir: str | None, output: str | None) -> tuple[Path, Path]:
    """The run folder and the profile's path, neither holding a measurement yet (dsbench never overwrites one)."""
    from dsbench.io import check_output_path

    folder = Path(run_dir or f"runs/calibrate-{time.strftime('%Y%m%d-%H%M%S')}")
    target = Path(output) if output else folder / "profile.json"
    check_output_path(target)
    for path in (folder / "measured.json", target):
        if path.exists():
            raise UserError(f"{path} exists: choose a new {'-o' if path == target else '--run-dir'} (dsbench never "
                            "overwrites measurements)")
    return folder, target


def _measure(launch: Any, folder: Path, measured: Path, timeout: float) -> dict[str, Any]:
    """Run the calibration's ranks and fit the profile from what they measured; one line naming the log if not."""
    from dsbench.io import read_json
    from dsbench.launch_log import first_error
    from dsbench.plan.profile import fit_profile
    from dsbench.runner import run

    code = run(launch, log_path=folder / "calibrate.log", echo=None, timeout=timeout)
    if code != 0 or not measured.exists():
        reason = first_error(folder / "calibrate.log") or "no error line in the log"
        raise DsbenchError(f"calibration failed with exit code {code}: {reason} (log: {folder}/calibrate.log)")
    return fit_profile(read_json(str(measured), "calibration measurements"))


def _refuse_conflicts(hostfile: str | None, num_gpus: int | None, check: bool, check_repeats: int | None,
                      check_strategies: list[str] | None) -> None:
    if hostfile and num_gpus:
        raise UserError("--num-gpus is the ranks on this machine; with --hostfile its slots say it: drop one")
    if hostfile and check:
        raise UserError("--check runs its cells on this machine's ranks (dsbench compare): drop --hostfile or --check")
    if check_repeats and not check:
        raise UserError("--check-repeats is how often --check launches each cell: add --check or drop it")
    if check_strategies is not None and not check:
        raise UserError("--check-strategies picks among --check's cells: add --check or drop it")


def _check_strategies(model: str, ranks: int, gpus: bool, chosen: list[str] | None) -> list[str]:
    """--check's cells for the model on the ranks: one per engine family, or those of them ``chosen`` names."""
    from dsbench.bench.tune import default_strategies
    from dsbench.plan.selfcheck import check_strategies, chosen_cells, gpu_check_strategies

    runnable = default_strategies(model, ranks)
    every = gpu_check_strategies(ranks, runnable) if gpus else check_strategies(runnable)
    if chosen is None:
        return every
    found = chosen_cells(every, chosen)
    if isinstance(found, str):
        raise UserError(f"--check-strategies: {found} for {model} on {ranks} rank(s)")
    return found


def _run_cells(strategies: list[str], model: str, ranks: int, micro_batch: int, seq_len: int, precision: str,
               folder: Path, timeout: float, repeats: int, target: str) -> Path:
    """``--check``'s cells, run by dsbench compare; the folder of their runs. With ``repeats`` > 1 compare
    launches every cell once and then again (its repeats' order), so a slow minute falls on one launch of several
    cells rather than on every launch of one, and each cell's step is the median over its launches
    (report.collect)."""
    from dsbench.bench.session import run_compare
    from dsbench.plan.selfcheck import CHECK_STEPS, CHECK_WARMUP

    flags = {"strategies": strategies, "models": [model], "world_sizes": [ranks],
             "micro_batches": [micro_batch], "seq_len": seq_len, "precision": precision, "steps": CHECK_STEPS,
             "warmup": CHECK_WARMUP, "repeats": repeats}
    run = run_compare(None, flags, str(folder), resume=False, retry_failed=False, timeout=timeout, nvme_path=None,
                      quiet=True)
    failed = next((result for result in run.results if result.status != "ok"), None)
    if failed is not None:
        error = DsbenchError(f"check cell {failed.cell.id}: {failed.status} (its run: {folder / 'cells'}); the "
                             f"profile {target} is written without a check")
        error.exit_code = 130 if failed.status == "interrupted" else 1  # as compare exits on Ctrl-C
        raise error
    return run.folder / "cells"


def _with_check(target: Path, data: dict[str, Any], cells: Path, repeats: int, chosen: list[str] | None) -> dict:
    """The profile this command wrote (``data``, at ``target``), with its check: on a CUDA GPU the GPU model's check
    and the host's ``zero_host_us`` in the ``gpu`` section, on CPU ranks the per-family step scales."""
    from dsbench.plan.profile import Profile

    profile = Profile(str(target), data)
    if profile.data.get("gpu"):
        return {**profile.data, "gpu": _gpu_check(profile, cells)}
    return {**profile.data, "check": _self_check(profile, cells, repeats, chosen)}


def _self_check(profile: Profile, cells_folder: Path, repeats: int, chosen: list[str] | None) -> dict:
    """The check cells on CPU ranks, each predicted from the fresh profile (selfcheck.py)."""
    from dsbench.console import table_console
    from dsbench.plan.selfcheck import check_record
    from dsbench.plan.verify import predicted_figures
    from dsbench.report.collect import collect
    from dsbench.report.tables import check_grid, check_warnings
    from dsbench.strategies import get

    cells = []
    for row in collect([cells_folder]):
        figures = predicted_figures(row, profile)
        median = figures["wall_step_ms"]
        # the launches' range: one step's tokens over each launch's wall-clock tokens/s, scaled from the median's
        spread = [median * row.tokens_per_s / row.tokens_per_s_max, median * row.tokens_per_s / row.tokens_per_s_min]
        cells.append({"strategy": row.base_strategy, "family": get(row.base_strategy).family,
                      "measured_step_ms": median, "measured_range_ms": spread,
                      "predicted_step_ms": figures["predicted_step_ms"]})
    record = check_record(cells, repeats, chosen)
    check_grid(record).print(table_console())
    for line in check_warnings(record):
        click.echo(line, err=True)
    return record


def _gpu_check(profile: Profile, cells_folder: Path) -> dict:
    """The check cells on a GPU, as rows of the oracle schema, predicted by the GPU model with the measured
    constants; ``zero_host_us`` fitted on the ZeRO cells (plan/gpu_fit.host_check). The profile's ``gpu`` section
    with ``zero_host_us`` and the check added."""
    from dsbench.plan.gpu_calibration import calibrated_gpu
    from dsbench.plan.gpu_fit import host_check
    from dsbench.plan.run_rows import oracle_row

    section = profile.data["gpu"]
    rows = {}
    for index, folder in enumerate(sorted(p for p in cells_folder.iterdir() if p.is_dir()), start=1):
        row = oracle_row(folder, section["name"], index, section.get("kind"))
        if isinstance(row, str):
            click.echo(f"check cell {folder.name}: not priced ({row})", err=True)
        else:
            rows[folder.name] = row
    record = host_check(rows, calibrated_gpu(section, profile.path))
    click.echo("GPU check (step ms; predicted with the measured GPU constants and the shipped host constant, then "
               "with zero_host_us fitted on this host's ZeRO cells):")
    for cell in record["cells"]:
        before, after = (cell[key] or float("nan") for key in ("predicted_step_ms", "with_host_step_ms"))
        click.echo(f"  {cell['strategy']:<28} measured {cell['measured_step_ms']:8.1f}  predicted {before:8.1f}  "
                   f"with this host {after:8.1f}{'  (in sample)' if cell['in_sample'] else ''}")
    click.echo("zero_host_us (ZeRO-1/2/3, µs per parameter tensor): " + ", ".join(
        f"{us:g}" for us in record["zero_host_us"].values()))
    return {**section, "zero_host_us": record["zero_host_us"], "check": record["cells"]}


COMMAND = calibrate
