"""``dsbench launch``: the training worker under a launcher, from flags to one typed run."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from dsbench.commands.base import Command
from dsbench.commands.options import (
    LAUNCHER,
    POSITIVE,
    SLURM_FLAGS,
    render_options,
    slurm_options,
)
from dsbench.errors import UserError
from dsbench.strategies import ENGINES
from dsbench.trainspec import RECOMPUTE, SCHEDULES


def _slurm_job(launcher: str, folder: Path, flags: dict[str, Any]) -> tuple[Any, int | None]:
    """The SlurmJob for ``--launcher slurm`` (and its ranks per node); the slurm flags are taken out of
    ``flags``. Slurm flags with another launcher are an error."""
    from dsbench.launchers import SlurmJob

    given = {name: flags.pop(name) for name in SLURM_FLAGS}
    if launcher != "slurm":
        used = [SLURM_FLAGS[name] for name, value in given.items() if value not in (None, False)]
        if used:
            raise UserError(f"{used[0]} is for --launcher slurm")
        return None, None
    job = SlurmJob(nodes=1 if given["nodes"] is None else given["nodes"], partition=given["partition"],
                   time=given["time"], account=given["account"], wait=given["wait"],
                   script=str((folder / "job.sbatch").absolute()),
                   output=str((folder / "slurm-%j.out").absolute()))
    if given["gpus_per_node"] is not None and given["gpus_per_node"] < 1:
        raise UserError(f"--gpus-per-node must be >= 1, got {given['gpus_per_node']}")
    return job, given["gpus_per_node"]


def _run_launch(prepared: Any, folder: Path, job: Any, timeout: float | None) -> int:
    """Run a prepared launch (node and SLURM checks first) and say in one line how it ended; its exit code."""
    from dsbench.launch_log import first_error, slurm_failure, slurm_never_trained
    from dsbench.runner import Interrupted, preflight_nodes, preflight_slurm, run

    if prepared.spec.multinode():
        preflight_nodes(prepared.spec)
    if job:
        preflight_slurm()
    try:
        code = run(prepared.command, log_path=folder / "launch.log", timeout=timeout)
    except Interrupted as exc:
        click.echo(f"dsbench: {exc}; what the run wrote is kept in {folder} (its summary.json says interrupted)",
                   err=True)
        return exc.exit_code
    if job and code == 0 and not job.wait:
        click.echo(f"dsbench: submitted; the job writes {job.output} and {folder}/metrics.jsonl")
    elif code == 0 and (said := finished_line(folder, figures=not prepared.train.prints_summary)):
        click.echo(said)  # the last line: the launcher's own log lines end after the rank's
    elif job and code == 0 and (never := slurm_never_trained(folder / "launch.log", folder)):
        click.echo(f"dsbench: error: {never} (log: {folder}/launch.log)", err=True)
        return 1
    if code == 124 and timeout:
        click.echo(f"dsbench: error: the launch ran past --timeout {timeout:g} s and was stopped; what it wrote "
                   f"is kept in {folder} (log: {folder}/launch.log)", err=True)
    elif code != 0:
        reason = ((slurm_failure(folder / "launch.log", job.output) if job else None) or
            first_error(folder / "launch.log") or "no error line in the log")
        click.echo(f"dsbench: error: launch failed with exit code {code}: {reason} (log: {folder}/launch.log)",
                   err=True)
    return code


def finished_line(folder: Path, figures: bool = True) -> str | None:
    """What the run measured, in one line, read back from its summary.json (None where it is not on this machine:
    rank 0 on another node writes it there). Without ``figures`` where rank 0 printed them (its ``run:`` line), so
    that a launch says them once."""
    from dsbench.run_record import read_summary

    summary = read_summary(folder)
    if summary is None or not summary.ok or summary.throughput is None:
        return None
    said = (f": {summary.measured()}, final loss {summary.final_loss:.4f}{summary.skipped_note()}" if figures
            else " (its figures: rank 0's run: line above)")
    return f"dsbench: finished {folder}{said}; tables and plots: dsbench report {folder}"


def run_label(launcher: str, strategy: str, flags: dict[str, Any], elsewhere: bool) -> str:
    """The default run folder's label: the launcher and what it trains, by compare's name where the flags say it
    (``deepspeed-zero3_offload`` for ``--zero 3 --offload cpu``); a DeepSpeed run without ``--zero``, or whose
    config a file, a preset or a ``--set`` may shape (``elsewhere``), is ``deepspeed-deepspeed``."""
    from dsbench.strategy_match import name_of_run

    if strategy != "deepspeed" or flags.get("zero") is None or elsewhere:
        return f"{launcher}-{strategy}"
    name = name_of_run("deepspeed", zero=flags["zero"], offload=flags.get("offload") or "none",
                       offload_param=flags.get("offload_param") or "none", tp=flags.get("tp") or 1,
                       pp=flags.get("pipeline_stages") or 1, ulysses=flags.get("ulysses") or 1)
    return f"{launcher}-{name}"


@click.command(cls=Command)
@render_options
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="Use this DeepSpeed config as is.")
@click.option("--strategy", type=click.Choice(ENGINES),
              help="What the worker trains with [deepspeed].")
@click.option("--launcher", type=LAUNCHER,
              help="How ranks start [deepspeed]; slurm: submit an sbatch script (one srun task per rank).")
@click.option("--recompute", type=click.Choice(RECOMPUTE),
              help="What the backward recomputes: none, full (every block; = -- --activation-checkpointing), "
                   "selective (the attention core), selective-op (torch's selective checkpointing) [none].")
@click.option("--sequence-parallel", is_flag=True, default=None,
              help="torch_tp: norms on sequence shards; TP's all-reduces become reduce-scatter + all-gather.")
@click.option("--loss-parallel", is_flag=True, default=None,
              help="torch_tp: the logits stay split by vocabulary into the loss (untied output layer).")
@click.option("--cp", type=click.IntRange(min=1),
              help="Context parallelism (ring attention): refused here, priced by `dsbench plan --cp`.")
@click.option("--pipeline-schedule", type=click.Choice(SCHEDULES),
              help="torch_pp/torch_3d: 1f1b, gpipe, interleaved (1F1B over --virtual-stages chunks per rank) or "
                   "interleaved-zb (its zero-bubble form) [1f1b].")
@click.option("--virtual-stages", type=click.IntRange(min=1),
              help="torch_pp/torch_3d, interleaved schedules: model chunks per rank [1].")
@click.option("--dp-shard", type=click.IntRange(min=1),
              help="fsdp, torch_3d: data-parallel ranks in one FSDP2 shard group [all: FSDP]; fewer is HSDP (a "
                   "node's ranks, replicated across nodes); torch_3d's 1 is DDP.")
@click.option("--accelerate-config", type=click.Path(dir_okay=False), metavar="YAML",
              help="Run your own accelerate YAML through `accelerate launch` (it picks the engine and its settings).")
@click.option("--num-processes", type=click.IntRange(min=1),
              help="With --accelerate-config: replace its num_processes.")
@click.option("--num-machines", type=click.IntRange(min=1), help="With --accelerate-config: replace its num_machines.")
@click.option("--hostfile", type=click.Path(dir_okay=False), help="DeepSpeed hostfile.")
@slurm_options
@click.option("--include", default="", help="DeepSpeed resource filter, e.g. 'host1:0,1@host2'.")
@click.option("--exclude", default="", help="DeepSpeed resource filter of slots to leave out.")
@click.option("--num-nodes", type=click.IntRange(min=1), help="Use the first N hosts of the hostfile.")
@click.option("--num-gpus", type=click.IntRange(min=1),
              help="Ranks per node without a hostfile [GPUs, or 2 CPU ranks].")
@click.option("--launcher-backend", type=click.Choice(["pdsh", "ssh", "openmpi"]), default="pdsh", show_default=True,
              help="How --launcher deepspeed reaches other nodes: pdsh, openmpi, or ssh (DeepSpeed's --no_ssh "
                   "per-node mode, started by dsbench on each node).")
@click.option("--master-addr", default="127.0.0.1", show_default=True)
@click.option("--master-port", type=click.IntRange(1, 65535),
              help="Rendezvous port [29500 in --dry-run, else a free port].")
@click.option("--run-dir", type=click.Path(file_okay=False), help="Folder for the config, logs and metrics.")
@click.option("--env", "env_pairs", multiple=True, metavar="KEY=VALUE",
              help="Environment for every rank; multi-node deepspeed launches get it through .deepspeed_env.")
@click.option("--dry-run", is_flag=True, help="Print the exact command (and write its files); run nothing.")
@click.option("--timeout", type=POSITIVE, help="Stop the whole launch after this many seconds (exit 124) [none]; "
              "the worker's --dist-timeout bounds one collective.")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
def launch(preset: str | None, model: str | None, sets: tuple[str, ...], config_file: str | None,
           strategy: str | None, launcher: str | None, accelerate_config: str | None, num_processes: int | None,
           num_machines: int | None, launcher_backend: str, hostfile: str | None, include: str, exclude: str,
           num_nodes: int | None, num_gpus: int | None, master_addr: str, master_port: int | None, run_dir: str | None,
           env_pairs: tuple[str, ...], dry_run: bool, timeout: float | None, script_args: tuple[str, ...],
           cp: int | None, **flags: Any) -> None:
    """Launch the training worker through deepspeed, torchrun or accelerate (args after -- go to the worker);
    with --accelerate-config, your own accelerate YAML through `accelerate launch`."""
    from dsbench.envinfo import default_ranks, free_port, local_gpu_count, memory_available
    from dsbench.launch import materialize, prepare
    from dsbench.launch_request import LaunchRequest, inherited_env, parse_env, strategy_and_launcher

    _refuse_context_parallel(cp, cpu=local_gpu_count() == 0)
    strategy, launcher = strategy_and_launcher(strategy, launcher, accelerate_config)
    _refuse_rank_flags_of_another_launcher(accelerate_config, num_processes, num_machines, num_gpus)
    label = f"accelerate-{Path(accelerate_config).stem}" if accelerate_config else run_label(
        launcher, strategy, flags, elsewhere=bool(config_file or preset or sets))
    folder = Path(run_dir or f"runs/launch-{label}-{time.strftime('%Y%m%d-%H%M%S')}")
    job, per_node = _slurm_job(launcher, folder, flags)
    _refuse_two_sources_of_nodes(job is not None, hostfile, num_gpus)
    port = master_port if master_port is not None else 29500 if dry_run else free_port()
    ranks = num_gpus if num_gpus is not None else default_ranks()
    req = LaunchRequest(launcher=launcher, strategy=strategy, render_flags=flags, preset=preset, model=model,
                        sets=sets, config=config_file, hostfile=hostfile, include=include, exclude=exclude,
                        num_nodes=num_nodes, num_gpus=per_node or ranks, master_addr=master_addr, slurm=job,
                        master_port=port, run_dir=folder, cpu=local_gpu_count() == 0, python=sys.executable,
                        cwd=os.getcwd(), launcher_backend=launcher_backend, as_root=os.geteuid() == 0,
                        script_args=script_args,
                        extra_env=parse_env(env_pairs),
                        inherited_env=inherited_env(os.environ, sys.executable),
                        accelerate_config=accelerate_config, num_processes=num_processes,
                        num_machines=num_machines, port_given=master_port is not None,
                        local_gpus=local_gpu_count(), memory_available=memory_available(),
                        cuda_arch_list=os.environ.get("TORCH_CUDA_ARCH_LIST", ""),
                        stale_shm_locks=_stale_shm_locks())
    prepared = prepare(req)
    materialize(prepared)
    _print_prepared(prepared)
    if not dry_run:
        sys.exit(_run_launch(prepared, folder, job, timeout))


def _stale_shm_locks() -> tuple[str, ...]:
    """Stale build locks of DeepSpeed's CPU comm op where this launch's ranks would build it (jitlocks.py)."""
    from dsbench.jitlocks import SHM_COMM_OP, is_stale, op_locks

    now = time.time()
    return tuple(str(lock) for lock in op_locks(SHM_COMM_OP, os.environ, os.getcwd()) if is_stale(lock, now))


def _refuse_rank_flags_of_another_launcher(accelerate_config: str | None, num_processes: int | None,
                                           num_machines: int | None, num_gpus: int | None) -> None:
    """accelerate's rank counts go with its YAML, dsbench's own (--num-gpus) without one."""
    if not accelerate_config and (num_processes or num_machines):
        raise UserError(f"--{'num-processes' if num_processes else 'num-machines'} goes with --accelerate-config "
                        "(dsbench's own launches take --num-gpus or a --hostfile)")
    if accelerate_config and num_gpus is not None:
        raise UserError("--accelerate-config: the YAML's num_processes (or --num-processes) is the rank count; "
                        "drop --num-gpus")


def _refuse_two_sources_of_nodes(slurm: bool, hostfile: str | None, num_gpus: int | None) -> None:
    """The nodes and their slots come from one place: SLURM's allocation, a hostfile, or --num-gpus on this one."""
    if slurm and hostfile:
        raise UserError("--launcher slurm: SLURM picks the nodes; drop --hostfile (use --nodes)")
    if hostfile and num_gpus is not None:
        raise UserError("--num-gpus is the ranks per node without a hostfile; with --hostfile its slots=N say it: "
                        "drop one")


def _print_prepared(prepared: Any) -> None:
    """The launch's notes (stderr), then its config, the files it wrote and the exact command (stdout)."""
    for note in prepared.notes:
        click.echo(f"note: {note}", err=True)
    if prepared.spec.ds_config:
        click.echo(f"# DeepSpeed config: {prepared.spec.ds_config}")
    for path, text in prepared.command.files.items():
        click.echo(f"# {path}:\n" + "".join(f"#   {line}\n" for line in text.splitlines()), nl=False)
    click.echo(prepared.command.shell_line())


def _refuse_context_parallel(cp: int | None, cpu: bool) -> None:
    """``--cp N`` (N > 1) in one line: torch's context_parallel rings the CUDA SDPA kernels only, and the worker
    does not run it on GPUs yet; ``--cp 1`` is no split and passes."""
    if (cp or 1) > 1:
        why = ("context parallelism rings torch's CUDA attention kernels, so it cannot run on CPU ranks" if cpu
               else "dsbench's worker does not run context parallelism yet")
        raise UserError(f"--cp {cp}: {why}; `dsbench plan --layout ... --cp N` prices it")


COMMAND = launch
