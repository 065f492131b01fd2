"""``dsbench tune``: the fastest layout in a few real runs."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from dsbench.bench.tune_request import TuneRequest
from dsbench.commands.base import Command
from dsbench.commands.options import (
    COUNT,
    POSITIVE,
    check_seq_len,
    checked_profile,
    csv_list,
    default_of,
    wide_option,
)
from dsbench.errors import UserError
from dsbench.spec import check_warmup


def _tune(name: str) -> object:
    return default_of(TuneRequest, name)


@click.command(cls=Command)
@click.option("--model", default="gpt2-mini", show_default=True, help="The model to train.")
@click.option("--num-gpus", type=COUNT, help="Ranks on this machine [GPUs, or 2 CPU ranks].")
@click.option("--hostfile", type=click.Path(dir_okay=False), help="Run across these hosts (their slots).")
@click.option("--global-batch", type=COUNT, help="Samples per optimizer step, fixed for every layout [4 x ranks].")
@click.option("--budget", type=COUNT, default=_tune("budget"), show_default=True, help="Real runs at most.")
@click.option("--exhaustive", is_flag=True,
              help="Run every layout that fits, best predicted first (the oracle a search is checked against).")
@click.option("--profile", type=click.Path(dir_okay=False), callback=checked_profile,
              help="A machine profile (`dsbench calibrate`).")
@click.option("--strategies", callback=csv_list(str), help="Comma list of compare strategies [every one that runs].")
@click.option("--no-checkpointing", is_flag=True, help="Leave activation checkpointing out of the search.")
@click.option("--speed-options", is_flag=True, help="Then race the winning layout compiled (--compile, where it "
              "applies) against itself uncompiled, and keep the faster.")
@click.option("--gpu", default=_tune("gpu"), show_default=True, help="GPU kind for memory when --gpu-mem is not given.")
@click.option("--gpu-mem", type=POSITIVE, help="GiB per rank the layouts must fit in [from --gpu].")
@click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16"]), default=_tune("precision"),
              show_default=True)
@click.option("--seq-len", type=COUNT, default=_tune("seq_len"), show_default=True)
@click.option("--steps", type=COUNT, default=_tune("steps"), show_default=True, help="Steps per run.")
@click.option("--warmup", type=click.IntRange(min=0), default=_tune("warmup"), show_default=True,
              help="Warm-up steps per run.")
@click.option("--out", type=click.Path(file_okay=False), help="Results folder [runs/tune-TIMESTAMP].")
@click.option("--resume", is_flag=True, help="Continue a tune in --out, keeping the runs already made.")
@click.option("--timeout", type=POSITIVE, default=_tune("timeout"), show_default=True,
              help="Seconds per run before it is stopped.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--dry-run", is_flag=True, help="Rank the layouts and print the first run's launch; run nothing.")
@wide_option
def tune(model: str, num_gpus: int | None, hostfile: str | None, global_batch: int | None, budget: int,
         exhaustive: bool, profile: Any, strategies: list[str] | None, no_checkpointing: bool,
         speed_options: bool, gpu: str,
         gpu_mem: float | None, precision: str, seq_len: int, steps: int, warmup: int, out: str | None, resume: bool,
         timeout: float, as_json: bool, dry_run: bool, wide: bool) -> None:
    """Find the fastest layout (strategy x micro-batch x accumulation x checkpointing) at a fixed global batch:
    the planner ranks them all, then at most --budget real runs decide (--speed-options: then the winner compiled and
    uncompiled, side by side). Every layout steps with a fused Adam, as compare's cells do by default."""
    from dsbench.bench.tune import dry_run as tune_dry_run
    from dsbench.bench.tune import tune as run_tune
    from dsbench.configs.precision import check_precision
    from dsbench.envinfo import default_ranks, local_gpu_count
    from dsbench.hostfile import ranks_of
    from dsbench.local_ranks import check_ranks_here
    from dsbench.report.tables import print_tune

    if hostfile and num_gpus:
        raise UserError("--num-gpus is the ranks on this machine; with --hostfile its slots say it: drop one")
    world = ranks_of(hostfile) if hostfile else num_gpus or default_ranks()
    if not hostfile:
        check_ranks_here(world, "--num-gpus")
    check_precision(precision, cpu=local_gpu_count() == 0)  # as each run's launch would
    check_warmup(warmup, steps)
    check_seq_len(model, seq_len)
    req = TuneRequest(model=model, world=world, global_batch=global_batch or 4 * world, budget=budget,
                      exhaustive=exhaustive, speed_options=speed_options,
                      strategies=strategies, checkpointing=not no_checkpointing, profile=profile, gpu=gpu,
                      gpu_mem=gpu_mem, precision=precision, seq_len=seq_len, steps=steps, warmup=warmup,
                      hostfile=hostfile, out=Path(out or f"runs/tune-{time.strftime('%Y%m%d-%H%M%S')}"),
                      resume=resume, timeout=timeout)
    result = (tune_dry_run if dry_run else run_tune)(req)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        print_tune(result, wide=wide)
    sys.exit(0 if result["winner"] or dry_run else 1)


COMMAND = tune
