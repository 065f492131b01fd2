"""The ``dsbench`` command line: flags -> spec -> one library call -> exit code.

Heavy modules (torch, deepspeed, transformers) are imported only inside the commands that need
them, so ``dsbench --help`` stays fast. Every :class:`~dsbench.errors.DsbenchError` becomes one
line on stderr and its exit code (2 for bad input, 1 for an invalid config or failed run).
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from dsbench import __version__
from dsbench.errors import DsbenchError, UserError
from dsbench.io import write_failed


class _Command(click.Command):
    """A command whose options and arguments, when typed, are never empty: ``--strategies ''`` would otherwise mean
    "every strategy" and ``-o ''`` or ``--run-dir ''`` "the default", silently (exit 2, naming the option)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        rest = super().parse_args(ctx, args)
        for param in self.params:
            if getattr(param, "is_flag", False) or param.nargs == -1 or param.name is None:
                continue
            if ctx.get_parameter_source(param.name) != click.core.ParameterSource.COMMANDLINE:
                continue
            value = ctx.params.get(param.name)
            values = list(value) if param.multiple and isinstance(value, tuple | list) else [value]
            if (isinstance(value, list) and not value and not param.multiple) or any(
                    isinstance(v, str) and not v.strip() for v in values):
                raise click.BadParameter("is empty: give a value, or leave it out", ctx=ctx, param=param)
        return rest


class _Group(click.Group):
    """Turns dsbench errors into a one-line message and exit code instead of a traceback; anything else that
    escapes is a dsbench bug, also one line (exit 1), with the traceback under ``--debug``."""

    command_class = _Command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except DsbenchError as exc:
            if _debug(ctx):
                raise
            click.echo(f"dsbench: error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("dsbench: interrupted", err=True)
            ctx.exit(130)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except OSError as exc:  # a path the user gave that the system refuses (name too long, no permission, ...)
            if _debug(ctx):
                raise
            error = write_failed(exc.filename or "a path", exc)  # a full or failing disk is exit 1, else exit 2
            click.echo(f"dsbench: error: {exc.filename or ''}: {exc.strerror or exc}".replace(": : ", ": ")
                       [:400], err=True)
            ctx.exit(error.exit_code)
        except Exception as exc:
            if _debug(ctx):
                raise
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            click.echo(f"dsbench: error: internal error {type(exc).__name__}: {first} (a dsbench bug: rerun with "
                       "--debug for the traceback and report it)", err=True)
            ctx.exit(1)


def _debug(ctx: click.Context) -> bool:
    return bool(ctx.params.get("debug")) or os.environ.get("DSBENCH_DEBUG", "") not in ("", "0")


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="dsbench")
@click.option("--debug", is_flag=True, help="Show the traceback of an error (also DSBENCH_DEBUG=1).")
def cli(debug: bool) -> None:
    """Render, validate, launch and compare DeepSpeed / DDP / FSDP training strategies."""


class Finite(click.ParamType):
    """A finite float in a range: click's FloatRange lets NaN through (every comparison with NaN is false)."""

    name = "number"

    def __init__(self, low: float | None = None, low_open: bool = False, high: float | None = None) -> None:
        self.low, self.low_open, self.high = low, low_open, high

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        import math

        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.low is not None and (number < self.low or (self.low_open and number == self.low)):
            self.fail(f"{value} must be {'>' if self.low_open else '>='} {self.low:g}", param, ctx)
        if self.high is not None and number > self.high:
            self.fail(f"{value} must be <= {self.high:g}", param, ctx)
        return number


POSITIVE = Finite(0, low_open=True)
COUNT = click.IntRange(min=1)
_OFFLOAD = click.Choice(["none", "cpu", "nvme"])
RENDER_FLAGS = ("zero", "offload", "offload_param", "nvme_path", "precision", "micro_batch", "grad_accum",
                "global_batch", "pipeline_stages", "tp", "grad_clip", "lr", "warmup_steps", "train_steps")


def render_options(func: Any) -> Any:
    """The config-shaping flags shared by ``render`` and ``launch`` (default None = not given)."""
    options = [
        click.option("--preset", help="Start from a named preset (see `dsbench presets`)."),
        click.option("--zero", type=click.IntRange(0, 3), help="ZeRO stage 0-3."),
        click.option("--offload", type=_OFFLOAD, help="Offload optimizer states to cpu or nvme."),
        click.option("--offload-param", type=_OFFLOAD, help="Offload parameters (ZeRO-3 only)."),
        click.option("--nvme-path", help="Folder for NVMe offload swap files."),
        click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]), help="Training precision."),
        click.option("--micro-batch", type=int, help="Samples per rank per micro-step."),
        click.option("--grad-accum", type=int, help="Gradient-accumulation steps."),
        click.option("--global-batch", type=int, help="Samples per optimizer step (derives --grad-accum)."),
        click.option("--pipeline-stages", type=int, help="Pipeline-parallel stages (DeepSpeed PipelineModule)."),
        click.option("--tp", type=int, help="Tensor-parallel degree (DeepSpeed AutoTP)."),
        click.option("--grad-clip", type=float, help="Gradient-norm clipping [1.0]."),
        click.option("--lr", type=float, help="Peak learning rate [3e-4]."),
        click.option("--warmup-steps", type=int, help="Scheduler warm-up steps [0]."),
        click.option("--train-steps", type=int, help="Total steps for decaying schedulers [100]."),
        click.option("--model", help="Model preset, local dir with config.json, or cached hub id (sizes 'auto')."),
        click.option("--set", "sets", multiple=True, metavar="KEY.PATH=VALUE",
                     help="Override any key (JSON-typed value); repeatable, applied after the flags."),
    ]
    return functools.reduce(lambda f, opt: opt(f), reversed(options), func)


def world_options(func: Any) -> Any:
    """``--world-size`` or ``--hostfile`` (+ ``--include``/``--exclude``)."""
    options = [
        click.option("--world-size", type=COUNT, help="Total ranks."),
        click.option("--hostfile", type=click.Path(dir_okay=False), help="DeepSpeed hostfile (world = its slots)."),
        click.option("--include", default="", help="DeepSpeed resource filter, e.g. 'host1:0,1@host2'."),
        click.option("--exclude", default="", help="DeepSpeed resource filter of slots to leave out."),
    ]
    return functools.reduce(lambda f, opt: opt(f), reversed(options), func)


@cli.command()
@render_options
@world_options
@click.option("--keep-auto", is_flag=True, help="Leave 'auto' values for the HF Trainer / accelerate to fill.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to FILE (atomically) instead of stdout.")
@click.option("--from-accelerate", "from_accelerate", type=click.Path(dir_okay=False), metavar="YAML",
              help="Write the DeepSpeed config an accelerate YAML's inline deepspeed_config makes (no other flags).")
@click.option("--to-accelerate", "to_accelerate", type=click.Path(dir_okay=False), metavar="YAML",
              help="Also write an accelerate YAML that runs it (DeepSpeed plugin pointing at -o FILE).")
@click.option("--strategy", type=click.Choice(["deepspeed", "ddp", "fsdp"]),
              help="With --to-accelerate: the engine the YAML selects [deepspeed]; ddp/fsdp write no JSON.")
def render(preset: str | None, model: str | None, sets: tuple[str, ...], world_size: int | None,
           hostfile: str | None, include: str, exclude: str, keep_auto: bool, output: str | None,
           from_accelerate: str | None, to_accelerate: str | None, strategy: str | None, **flags: Any) -> None:
    """Render a DeepSpeed config from templates, a preset, flags and --set overrides (or from an accelerate
    YAML's inline DeepSpeed settings); with --to-accelerate, also the accelerate YAML that runs it."""
    from dsbench.configs.api import from_accelerate_yaml, render_config, world_size_from
    from dsbench.io import atomic_write_text, dumps_json

    if strategy and not to_accelerate:
        raise UserError("--strategy goes with --to-accelerate (render writes a DeepSpeed config otherwise)")
    if to_accelerate:
        if from_accelerate:
            raise UserError("--from-accelerate reads an accelerate YAML and --to-accelerate writes one: give one")
        _render_to_accelerate(to_accelerate, strategy or "deepspeed", output, preset, model, sets, keep_auto,
                              world_options_given=(world_size, hostfile, include, exclude), flags=flags)
        return
    if from_accelerate:
        given = [n for n, v in {**flags, "preset": preset, "model": model, "set": sets, "world_size": world_size,
                                "hostfile": hostfile, "keep_auto": keep_auto}.items() if v]
        if given:
            raise UserError(f"--from-accelerate converts the YAML as it is: drop --{given[0].replace('_', '-')}")
        config, notes = from_accelerate_yaml(from_accelerate), []
    else:
        flags["world_size"] = world_size_from(world_size, hostfile, include, exclude)
        config, notes = render_config(flags, preset, model, keep_auto, sets)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    if output:
        atomic_write_text(output, dumps_json(config))
        click.echo(f"wrote {output}", err=True)
    else:
        click.echo(dumps_json(config), nl=False)


def _render_to_accelerate(path: str, kind: str, output: str | None, preset: str | None, model: str | None,
                          sets: tuple[str, ...], keep_auto: bool, world_options_given: tuple[Any, ...],
                          flags: dict[str, Any]) -> None:
    """``render --to-accelerate``: the DeepSpeed JSON (for deepspeed) at ``-o``, then the accelerate YAML that runs
    it on the given ranks (``--world-size``, or a hostfile's machines and slots)."""
    from dsbench.configs.api import render_config, world_size_from
    from dsbench.hostfile import read_hostfile
    from dsbench.io import atomic_write_text, dumps_json
    from dsbench.launchers import LaunchSpec
    from dsbench.launchers.accelerate import ACCELERATE_PRECISION, accelerate_yaml, check_to_accelerate, yaml_text

    world_size, hostfile, include, exclude = world_options_given
    given = [f"--{name.replace('_', '-')}" for name, value in flags.items() if value is not None]
    given += ["--preset"] * bool(preset) + ["--model"] * bool(model) + ["--set"] * bool(sets)
    check_to_accelerate(kind, given + ["--keep-auto"] * keep_auto, output)
    world = world_size_from(world_size, hostfile, include, exclude)
    if world is None:
        raise UserError("--to-accelerate needs --world-size N or --hostfile: the YAML's num_processes")
    spec = LaunchSpec(hosts=tuple(read_hostfile(hostfile)), hostfile=hostfile, include=include, exclude=exclude) \
        if hostfile else LaunchSpec(nproc_per_node=world)
    if kind == "deepspeed":
        assert output
        config, notes = render_config(dict(flags, world_size=world), preset, model, keep_auto, sets)
        for note in notes:
            click.echo(f"note: {note}", err=True)
        atomic_write_text(output, dumps_json(config))
        click.echo(f"wrote {output}", err=True)
    yaml = accelerate_yaml(kind, processes=world, machines=spec.nodes(), main_ip=spec.first_host(), port=29500,
                           ds_config=output, mixed_precision=ACCELERATE_PRECISION[flags.get("precision") or "fp32"])
    atomic_write_text(path, yaml_text(yaml, path))
    click.echo(f"wrote {path}: accelerate launch --config_file {path} -m dsbench.train", err=True)


@cli.command()
@click.argument("config", type=click.Path(dir_okay=False))
@world_options
@click.option("--allow-auto", is_flag=True, help="Report unresolved 'auto' as warnings (configs for the Trainer).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable findings.")
@click.option("--deepspeed-check/--no-deepspeed-check", default=True, show_default=True,
              help="Also run DeepSpeed's own config parser.")
@click.option("--strict", is_flag=True, help="Warnings fail too (exit 1): for CI.")
def validate(config: str, world_size: int | None, hostfile: str | None, include: str, exclude: str,
             allow_auto: bool, as_json: bool, deepspeed_check: bool, strict: bool) -> None:
    """Check CONFIG for what DeepSpeed accepts silently or rejects late. Exit 0 valid, 1 invalid (or, with
    --strict, any warning), 2 usage."""
    from dsbench.configs.api import validate_file, world_size_from
    from dsbench.configs.findings import has_errors

    world = world_size_from(world_size, hostfile, include, exclude)
    _, findings = validate_file(config, world, allow_auto, deepspeed_check)
    errors = has_errors(findings) or (strict and bool(findings))
    if as_json:
        click.echo(json.dumps({"config": config, "world_size": world, "valid": not errors,
                               "findings": [f.to_dict() for f in findings]}, indent=2))
    else:
        for finding in findings:
            click.echo(finding.line())
        n_err = sum(f.severity == "error" for f in findings)
        verdict = "invalid" if has_errors(findings) else "fails --strict" if errors else "valid"
        click.echo(f"{config}: {verdict} ({n_err} errors, {len(findings) - n_err} warnings"
                   f"{f', world size {world}' if world else ''})")
    sys.exit(1 if errors else 0)


@cli.command()
@click.argument("config", type=click.Path(dir_okay=False))
@world_options
def explain(config: str, world_size: int | None, hostfile: str | None, include: str, exclude: str) -> None:
    """Say in plain words what CONFIG (DeepSpeed JSON or accelerate YAML) does: engine, stage, sharding,
    offload, batch, precision, processes."""
    from dsbench.configs.accelerate import looks_like_accelerate
    from dsbench.configs.api import explain_accelerate, load_valid_config, world_size_from
    from dsbench.configs.explain import explain as explain_config

    world = world_size_from(world_size, hostfile, include, exclude)
    lines = (explain_accelerate(config) if looks_like_accelerate(config)
             else explain_config(load_valid_config(config, world), world))
    for line in lines:
        click.echo(f"- {line}")


@cli.command()
def presets() -> None:
    """List the presets and the flags each one sets."""
    from dsbench.configs.templates import presets as all_presets

    for name, values in all_presets().items():
        click.echo(f"{name:15} " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in values.items()))


@cli.group(cls=_Group)
def hostfile() -> None:
    """DeepSpeed hostfiles."""


@hostfile.command("check")
@click.argument("path", type=click.Path(dir_okay=False))
def hostfile_check(path: str) -> None:
    """Check a hostfile strictly (grammar, hostnames, slots, duplicates). Exit 1 on bad lines."""
    from dsbench.hostfile import HostfileError, read_hostfile

    try:
        hosts = read_hostfile(path)
    except HostfileError as exc:
        for line, message in exc.problems:
            click.echo(f"{path}:{line}: {message}" if line else f"{path}: {message}")
        sys.exit(1)
    for host in hosts:
        click.echo(f"{host.name:30} slots={host.slots}")
    click.echo(f"{path}: valid ({len(hosts)} hosts, {sum(h.slots for h in hosts)} slots)")


SLURM_FLAGS = {"nodes": "--nodes", "gpus_per_node": "--gpus-per-node", "partition": "--partition",
               "time": "--time", "account": "--account", "wait": "--wait"}


def slurm_options(command: Any) -> Any:
    """The flags of ``--launcher slurm`` (collected by :func:`_slurm_job`)."""
    for option in reversed([
        click.option("--nodes", type=int, help="slurm: nodes to ask for [1]."),
        click.option("--gpus-per-node", type=int, help="slurm: ranks (GPUs) per node [GPUs, or 2 CPU ranks]."),
        click.option("--partition", help="slurm: the partition (sbatch --partition)."),
        click.option("--time", help="slurm: the time limit, e.g. 30, 02:00:00, 1-00:00:00 (sbatch --time)."),
        click.option("--account", help="slurm: the account to charge (sbatch --account)."),
        click.option("--wait", is_flag=True, help="slurm: wait for the job and exit with its exit code."),
    ]):
        command = option(command)
    return command


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
    from dsbench.runner import Interrupted, first_error, preflight_nodes, preflight_slurm, run, slurm_failure

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
    if code == 124 and timeout:
        click.echo(f"dsbench: error: the launch ran past --timeout {timeout:g} s and was stopped; what it wrote "
                   f"is kept in {folder} (log: {folder}/launch.log)", err=True)
    elif code != 0:
        reason = (slurm_failure(folder / "launch.log", job.output) if job else None) or \
            first_error(folder / "launch.log") or "no error line in the log"
        click.echo(f"dsbench: error: launch failed with exit code {code}: {reason} (log: {folder}/launch.log)",
                   err=True)
    return code


@cli.command()
@render_options
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="Use this DeepSpeed config as is.")
@click.option("--strategy", type=click.Choice(["deepspeed", "ddp", "fsdp", "single", "torch_pp", "torch_tp"]),
              help="What the worker trains with [deepspeed].")
@click.option("--launcher", type=click.Choice(["deepspeed", "torchrun", "accelerate", "slurm"]),
              help="How ranks start [deepspeed]; slurm: submit an sbatch script (one srun task per rank).")
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
           **flags: Any) -> None:
    """Launch the training worker through deepspeed, torchrun or accelerate (args after -- go to the worker);
    with --accelerate-config, your own accelerate YAML through `accelerate launch`."""
    from dsbench.envinfo import default_ranks, free_port, local_gpu_count
    from dsbench.launch import (
        LaunchRequest,
        inherited_env,
        materialize,
        parse_env,
        prepare,
        strategy_and_launcher,
        worker_args,
    )

    strategy, launcher = strategy_and_launcher(strategy, launcher, accelerate_config)
    if not accelerate_config and (num_processes or num_machines):
        raise UserError(f"--{'num-processes' if num_processes else 'num-machines'} goes with --accelerate-config "
                        "(dsbench's own launches take --num-gpus or a --hostfile)")
    if accelerate_config and num_gpus is not None:
        raise UserError("--accelerate-config: the YAML's num_processes (or --num-processes) is the rank count; "
                        "drop --num-gpus")
    label = f"accelerate-{Path(accelerate_config).stem}" if accelerate_config else f"{launcher}-{strategy}"
    folder = Path(run_dir or f"runs/launch-{label}-{time.strftime('%Y%m%d-%H%M%S')}")
    job, per_node = _slurm_job(launcher, folder, flags)
    if job and hostfile:
        raise UserError("--launcher slurm: SLURM picks the nodes; drop --hostfile (use --nodes)")
    if hostfile and num_gpus is not None:
        raise UserError("--num-gpus is the ranks per node without a hostfile; with --hostfile its slots=N say it: "
                        "drop one")
    port = master_port if master_port is not None else 29500 if dry_run else free_port()
    ranks = num_gpus if num_gpus is not None else default_ranks()
    req = LaunchRequest(launcher=launcher, strategy=strategy, render_flags=flags, preset=preset, model=model,
                        sets=sets, config=config_file, hostfile=hostfile, include=include, exclude=exclude,
                        num_nodes=num_nodes, num_gpus=per_node or ranks,
                        master_addr=master_addr, slurm=job,
                        master_port=port, run_dir=folder, cpu=local_gpu_count() == 0, python=sys.executable,
                        cwd=os.getcwd(), launcher_backend=launcher_backend, as_root=os.geteuid() == 0,
                        script_args=worker_args(folder, model, flags, script_args, strategy),
                        extra_env=parse_env(env_pairs),
                        inherited_env=inherited_env(os.environ, sys.executable),
                        accelerate_config=accelerate_config, num_processes=num_processes,
                        num_machines=num_machines, port_given=master_port is not None)
    prepared = prepare(req)
    materialize(prepared)
    for note in prepared.notes:
        click.echo(f"note: {note}", err=True)
    if prepared.config_path:
        click.echo(f"# DeepSpeed config: {prepared.config_path}")
    for path, text in prepared.command.files.items():
        click.echo(f"# {path}:\n" + "".join(f"#   {line}\n" for line in text.splitlines()), nl=False)
    click.echo(prepared.command.shell_line())
    if not dry_run:
        sys.exit(_run_launch(prepared, folder, job, timeout))


def _checked_profile(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--profile``: read and checked field by field as the flag is parsed, before any run, so a profile the
    planner cannot use never costs a compare's cells."""
    if value is not None:
        from dsbench.plan.api import read_profile

        read_profile(value)
    return value


def _csv(kind: Any) -> Any:
    def parse(ctx: click.Context, param: click.Parameter, value: str | None) -> list[Any] | None:
        if value is None:
            return None
        try:
            return [kind(item.strip()) for item in value.split(",") if item.strip()]
        except ValueError:
            raise click.BadParameter(f"expected a comma-separated list, got {value!r}") from None
    return parse


@cli.command()
@click.option("--strategies", callback=_csv(str), help="Comma list [single,ddp,fsdp,zero1,zero2,zero3,zero2_offload].")
@click.option("--world-sizes", callback=_csv(int), help="Comma list of rank counts [2].")
@click.option("--micro-batches", callback=_csv(int), help="Comma list of per-rank micro-batches [2].")
@click.option("--models", callback=_csv(str), help="Comma list of models [gpt2-mini].")
@click.option("--matrix", "matrix_file", type=click.Path(dir_okay=False), help="YAML/JSON matrix (flags override it).")
@click.option("--repeats", type=COUNT, help="Repeat every cell R times [1].")
@click.option("--steps", type=int, help="Optimizer steps per cell [20].")
@click.option("--warmup", type=click.IntRange(min=0), help="Warm-up steps excluded from figures [5].")
@click.option("--seq-len", type=COUNT, help="Tokens per sample [128].")
@click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16"]), help="[fp32]")
@click.option("--compile", type=click.Choice(["off", "on", "both"]),
              help="torch.compile the cells: off, on, or both (each strategy eager and compiled side by side) [off].")
@click.option("--fused-optimizer", type=click.Choice(["auto", "off", "on", "both"]),
              help="torch AdamW's fused kernel for the cells that step torch AdamW: auto (wherever it applies, as "
                   "DeepSpeed steps its FusedAdam), off, on, or both (side by side) [auto].")
@click.option("--out", type=click.Path(file_okay=False), help="Results folder [runs/compare-TIMESTAMP].")
@click.option("--resume", is_flag=True, help="Continue an interrupted matrix in --out, skipping finished cells.")
@click.option("--retry-failed", is_flag=True, help="With --resume, run failed/timed-out cells again.")
@click.option("--timeout", type=POSITIVE, default=900, show_default=True, help="Seconds per cell before it is stopped.")
@click.option("--nvme-path", help="Folder for zero3_nvme swap files [inside each cell's folder].")
@click.option("--no-report", is_flag=True, help="Do not build the report at the end.")
@click.option("--quiet", is_flag=True, help="No live progress (one line per cell).")
@click.option("--profile", type=click.Path(dir_okay=False), callback=_checked_profile,
              help="Machine profile (dsbench calibrate): the report shows predicted beside measured step time.")
def compare(matrix_file: str | None, out: str | None, resume: bool, retry_failed: bool, timeout: float,
            nvme_path: str | None, no_report: bool, quiet: bool, profile: str | None, **flags: Any) -> None:
    """Run a matrix of strategies side by side (real launches) and build the report."""
    from dsbench.bench.session import compare_main

    sys.exit(compare_main(matrix_file, flags, out, resume, retry_failed, timeout, nvme_path, no_report, quiet,
                          profile))


@cli.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False, exists=True))
@click.option("-o", "--out", type=click.Path(file_okay=False), help="Report folder [first RUN_DIR/report].")
@click.option("--no-plots", is_flag=True, help="Tables only (no matplotlib).")
@click.option("--profile", type=click.Path(dir_okay=False), callback=_checked_profile,
              help="Machine profile (dsbench calibrate): add the planner's predicted step time beside the measured.")
def report(run_dirs: tuple[str, ...], out: str | None, no_plots: bool, profile: str | None) -> None:
    """Build tables, CSV/JSON/Markdown, PNG plots and an HTML report from run folders (merged; nothing re-runs).
    Exit 1 when a folder could not be read (it is listed as corrupt; the others are reported)."""
    from dsbench.bench.session import predictor, print_report
    from dsbench.report.build import build_report

    folder = Path(out or Path(run_dirs[0]) / "report")
    built = build_report([Path(d) for d in run_dirs], folder, plots=not no_plots, predict=predictor(profile))
    print_report(built)
    corrupt = [run for row in built.rows for run in row["runs"] if run["status"] == "corrupt"]
    for run in corrupt:
        click.echo(f"dsbench: warning: {run['folder']}: unreadable run folder ({run['reason']}); reported as corrupt",
                   err=True)
    sys.exit(1 if corrupt else 0)


@cli.command()
@click.option("--model", help="Model preset, local dir with config.json, or cached hub id.")
@click.option("--params", type=float, help="Parameter count instead of a model (a Llama-like shape is assumed).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="Explain this DeepSpeed config too.")
@click.option("--gpus", type=COUNT, help="Total GPUs (one node unless --nodes).")
@click.option("--nodes", type=COUNT, default=1, show_default=True)
@click.option("--gpus-per-node", type=COUNT, help="[--gpus on one node, else 8]")
@click.option("--gpu", default="h100", show_default=True, help="GPU kind (sets peak TFLOPS and memory).")
@click.option("--gpu-mem", type=POSITIVE, help="GB per GPU [from --gpu].")
@click.option("--peak-tflops", type=POSITIVE, help="Dense peak per GPU [from --gpu].")
@click.option("--efficiency", type=Finite(0, low_open=True, high=1), default=0.5, show_default=True,
              help="Achievable fraction of peak.")
@click.option("--interconnect", default="infiniband", show_default=True, help="Between nodes.")
@click.option("--intra", help="Within a node [nvlink4 for h100/h200, else nvlink].")
@click.option("--bandwidth", type=POSITIVE, help="Custom inter-node bandwidth, GB/s per GPU.")
@click.option("--latency", type=Finite(0), help="Custom latency, µs.")
@click.option("--seq-len", type=COUNT, help="[min(model max positions, 2048)]")
@click.option("--micro-batch", type=COUNT, default=1, show_default=True)
@click.option("--grad-accum", type=COUNT, default=8, show_default=True)
@click.option("--precision", type=click.Choice(["bf16", "fp16", "fp32"]), default="bf16", show_default=True)
@click.option("--accounting", type=click.Choice(["mixed16", "mixed12", "fp32", "fp32_deepspeed"]),
              help="Bytes/param accounting [mixed16 = ZeRO paper's 16; mixed12 = seeds' 12].")
@click.option("--host-mem", type=POSITIVE, default=1000, show_default=True, help="CPU RAM per node, GB.")
@click.option("--top", type=COUNT, default=12, show_default=True, help="Rows to show.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--verify", is_flag=True, help="Run the top candidates for a few steps and compare with measurements.")
@click.option("--profile", type=click.Path(dir_okay=False), callback=_checked_profile,
              help="A machine profile from `dsbench calibrate`: measured compute rate and links instead of datasheet "
              "figures.")
def plan(top: int, as_json: bool, verify: bool, config_file: str | None, **opts: Any) -> None:
    """Estimate memory, communication, bubble and step time per strategy, and recommend one."""
    from dsbench.plan.api import PlanRequest, print_plan
    from dsbench.plan.api import plan as make_plan

    result = make_plan(PlanRequest(config=config_file, **opts))
    if verify:
        from dsbench.bench.verify import verify as run_verify

        result["verify"] = run_verify(result, opts)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        print_plan(result, top)
        if verify:
            from dsbench.plan.verify import print_verify

            print_verify(result["verify"])


def check_seq_len(model: str, seq_len: int) -> None:
    """The model resolves and has positions for ``seq_len`` (refused before any rank starts)."""
    from dsbench.models import resolve_model

    shape = resolve_model(model)
    if seq_len > shape.max_positions:
        raise UserError(f"--seq-len {seq_len} exceeds {shape.name}'s {shape.max_positions} positions")


@cli.command()
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
@click.option("--dry-run", is_flag=True, help="Print the command; run nothing.")
def calibrate(hostfile: str | None, num_gpus: int | None, model: str, micro_batch: int, seq_len: int,
              precision: str, output: str | None, run_dir: str | None, master_port: int | None, timeout: float,
              dry_run: bool) -> None:
    """Measure this machine for the planner: compute rate per rank at the model's shapes, and latency and
    bandwidth of all-reduce, all-gather, reduce-scatter and point-to-point on the real ranks (`plan --profile`)."""
    from dsbench.envinfo import default_ranks, free_port, local_gpu_count
    from dsbench.hostfile import read_hostfile
    from dsbench.io import atomic_write_json, check_output_path, read_json
    from dsbench.launch import inherited_env
    from dsbench.launchers import LaunchSpec, build
    from dsbench.plan.profile import fit_profile, summary_lines

    if hostfile and num_gpus:
        raise UserError("--num-gpus is the ranks on this machine; with --hostfile its slots say it: drop one")
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
    spec = LaunchSpec(launcher="torchrun", strategy="ddp", module="dsbench.worker.calibrate",
                      nproc_per_node=num_gpus or default_ranks(), hostfile=hostfile, hosts=hosts,
                      master_port=master_port or (29500 if dry_run else free_port()), cpu=local_gpu_count() == 0,
                      python=sys.executable, cwd=os.getcwd(), launch_script=str(folder / "launch_nodes.sh"),
                      extra_env=inherited_env(os.environ, sys.executable) if hosts else (),
                      script_args=("--model", model, "--micro-batch", str(micro_batch), "--seq-len", str(seq_len),
                                   "--precision", precision, "--out", str(measured), "--command", command))
    launch = build(spec)
    for path, text in launch.files.items():
        from dsbench.io import atomic_write_text

        atomic_write_text(path, text)
    click.echo(launch.shell_line())
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
    click.echo(f"profile: {target}  (dsbench plan --profile {target} ...)")


@cli.command()
@click.option("--model", default="gpt2-mini", show_default=True, help="The model to train.")
@click.option("--num-gpus", type=COUNT, help="Ranks on this machine [GPUs, or 2 CPU ranks].")
@click.option("--hostfile", type=click.Path(dir_okay=False), help="Run across these hosts (their slots).")
@click.option("--global-batch", type=COUNT, help="Samples per optimizer step, fixed for every layout [4 x ranks].")
@click.option("--budget", type=COUNT, default=3, show_default=True, help="Real runs at most.")
@click.option("--exhaustive", is_flag=True,
              help="Run every layout that fits, best predicted first (the oracle a search is checked against).")
@click.option("--profile", type=click.Path(dir_okay=False), callback=_checked_profile,
              help="A machine profile (`dsbench calibrate`).")
@click.option("--strategies", callback=_csv(str), help="Comma list of compare strategies [every one that runs].")
@click.option("--no-checkpointing", is_flag=True, help="Leave activation checkpointing out of the search.")
@click.option("--speed-options", is_flag=True, help="Then race the winning layout compiled (--compile, where it "
              "applies) against itself uncompiled, and keep the faster.")
@click.option("--gpu", default="h100", show_default=True, help="GPU kind for memory when --gpu-mem is not given.")
@click.option("--gpu-mem", type=POSITIVE, help="GB per rank the layouts must fit in [from --gpu].")
@click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True)
@click.option("--seq-len", type=COUNT, default=128, show_default=True)
@click.option("--steps", type=COUNT, default=12, show_default=True, help="Steps per run.")
@click.option("--warmup", type=click.IntRange(min=0), default=4, show_default=True, help="Warm-up steps per run.")
@click.option("--out", type=click.Path(file_okay=False), help="Results folder [runs/tune-TIMESTAMP].")
@click.option("--resume", is_flag=True, help="Continue a tune in --out, keeping the runs already made.")
@click.option("--timeout", type=POSITIVE, default=900, show_default=True, help="Seconds per run before it is stopped.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def tune(model: str, num_gpus: int | None, hostfile: str | None, global_batch: int | None, budget: int,
         exhaustive: bool, profile: str | None, strategies: list[str] | None, no_checkpointing: bool,
         speed_options: bool, gpu: str,
         gpu_mem: float | None, precision: str, seq_len: int, steps: int, warmup: int, out: str | None, resume: bool,
         timeout: float, as_json: bool) -> None:
    """Find the fastest layout (strategy x micro-batch x accumulation x checkpointing) at a fixed global batch:
    the planner ranks them all, then at most --budget real runs decide (--speed-options: then the winner compiled and
    uncompiled, side by side). Every layout steps with a fused Adam, as compare's cells do by default."""
    from dsbench.bench.tune import TuneRequest, print_result
    from dsbench.bench.tune import tune as run_tune
    from dsbench.envinfo import default_ranks
    from dsbench.hostfile import read_hostfile, world_size_of

    if hostfile and num_gpus:
        raise UserError("--num-gpus is the ranks on this machine; with --hostfile its slots say it: drop one")
    world = world_size_of({h.name: list(range(h.slots)) for h in read_hostfile(hostfile)}) if hostfile \
        else num_gpus or default_ranks()
    if not 0 <= warmup < steps:
        raise UserError(f"--warmup must be in 0..{steps - 1}")
    check_seq_len(model, seq_len)
    req = TuneRequest(model=model, world=world, global_batch=global_batch or 4 * world, budget=budget,
                      exhaustive=exhaustive, speed_options=speed_options,
                      strategies=strategies, checkpointing=not no_checkpointing, profile=profile, gpu=gpu,
                      gpu_mem=gpu_mem, precision=precision, seq_len=seq_len, steps=steps, warmup=warmup,
                      hostfile=hostfile, out=Path(out or f"runs/tune-{time.strftime('%Y%m%d-%H%M%S')}"),
                      resume=resume, timeout=timeout)
    result = run_tune(req)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        print_result(result)
    sys.exit(0 if result["winner"] else 1)


@cli.group(cls=_Group)
def testbed() -> None:
    """Several "nodes" on this machine (network namespaces with sshd) for real multi-node launches."""


@testbed.command("up")
@click.option("--nodes", type=int, required=True, help="Number of nodes (1-16).")
@click.option("--slots", type=int, default=1, show_default=True, help="Ranks per node in the hostfile.")
@click.option("--bandwidth", help="Shape every link to this tc rate each way, e.g. 1gbit, 100mbit.")
@click.option("--latency", type=float, help="Add this one-way delay each way, ms.")
def testbed_up(nodes: int, slots: int, bandwidth: str | None, latency: float | None) -> None:
    """Make the nodes: a namespace, an address and an sshd each; print the DeepSpeed hostfile's path."""
    from dsbench.testbed.layout import Testbed
    from dsbench.testbed.manage import testbed_dir, up

    made = up(Testbed(nodes=nodes, slots=slots, bandwidth=bandwidth, latency_ms=latency, root=testbed_dir()))
    for name in made.names():
        click.echo(f"{name:10} {made.address(name):14} slots={slots}")
    shaped = ", ".join(filter(None, [bandwidth, f"{latency:g} ms" if latency else None])) or "unshaped"
    click.echo(f"links: {shaped}")
    click.echo(f"hostfile: {made.hostfile}")


@testbed.command("down")
def testbed_down() -> None:
    """Remove the nodes and everything dsbench made for them (also after a failed or interrupted up)."""
    from dsbench.testbed.manage import down

    for item in down():
        click.echo(f"removed {item}")


@testbed.command("status")
def testbed_status() -> None:
    """List the nodes and whether each answers. Exit 0 when a test bed is up, 1 when none is."""
    from dsbench.testbed.manage import status

    info = status()
    if not info["up"]:
        click.echo("no test bed is up" + (" (leftovers of one: `dsbench testbed down` removes them)"
                                          if info["partial"] else ""))
        sys.exit(1)
    state = info["state"]
    for node in info["nodes"]:
        click.echo(f"{node['name']:10} {node['address']:14} namespace={'yes' if node['namespace'] else 'MISSING'} "
                   f"sshd={'up' if node['sshd'] else 'DOWN'}")
    click.echo(f"slots per node: {state['slots']}; links: {state['bandwidth'] or 'unshaped'}"
               f"{', ' + format(state['latency_ms'], 'g') + ' ms' if state['latency_ms'] else ''}")
    click.echo(f"hostfile: {state['hostfile']}")


@cli.command()
@click.option("--hostfile", type=click.Path(dir_okay=False), help="Check every host of this DeepSpeed hostfile "
              "(default: this host only).")
@click.option("--master-port", type=click.IntRange(1, 65535), default=29500, show_default=True,
              help="Rendezvous port to check.")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
def doctor(hostfile: str | None, master_port: int, as_json: bool) -> None:
    """Check that a launch on these hosts would work: ssh, pdsh, versions, port, interface, GPUs vs slots, JIT
    ops. Exit 1 when something would make a launch fail."""
    import dataclasses

    from dsbench.doctor import diagnose, failed
    from dsbench.envinfo import default_ranks

    rows = diagnose(hostfile, sys.executable, os.getcwd(), master_port, default_ranks())
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(r) for r in rows], indent=2))
    else:
        from rich.table import Table

        from dsbench.console import table_console

        table = Table("host", "check", "status", "detail", "fix")
        for row in rows:
            style = {"FAIL": "bold red", "note": "yellow"}.get(row.status, "green")
            table.add_row(row.host, row.check, f"[{style}]{row.status}[/]", row.detail, row.fix)
        table_console().print(table)
    sys.exit(1 if failed(rows) else 0)


@cli.command()
@click.option("--links", default="unshaped,1gbit,100mbit", show_default=True,
              help="Link rates between the nodes, comma-separated tc rates (unshaped = the bare bridge).")
@click.option("--strategies", default="ddp,zero2,zero3,fsdp,pipe2", show_default=True,
              help="Compare strategies to run on every link.")
@click.option("--nodes", type=int, default=2, show_default=True, help="Test-bed nodes.")
@click.option("--slots", type=int, default=1, show_default=True, help="Ranks per node.")
@click.option("--model", default="gpt2-tiny", show_default=True)
@click.option("--micro-batch", type=COUNT, default=2, show_default=True)
@click.option("--steps", type=int, default=10, show_default=True)
@click.option("--warmup", type=int, default=2, show_default=True)
@click.option("--seq-len", type=COUNT, default=128, show_default=True)
@click.option("--out", type=click.Path(file_okay=False), help="Results folder [runs/whatif-<time>].")
@click.option("--timeout", type=POSITIVE, default=900, show_default=True, help="Seconds per cell.")
@click.option("--quiet", is_flag=True, help="No live progress.")
def whatif(links: str, strategies: str, nodes: int, slots: int, model: str, micro_batch: int, steps: int,
           warmup: int, seq_len: int, out: str | None, timeout: float, quiet: bool) -> None:
    """Run strategies across test-bed nodes at several link rates, beside the planner's communication time
    (needs root: it brings `dsbench testbed` up and down once per link). Exit 1 when a cell failed."""
    from dsbench.bench.progress import RichReporter
    from dsbench.bench.whatif import markdown, whatif_main, write

    folder = Path(out or f"runs/whatif-{time.strftime('%Y%m%d-%H%M%S')}")
    link_list = [x.strip() for x in links.split(",") if x.strip()]
    rows = whatif_main(link_list, [x.strip() for x in strategies.split(",") if x.strip()], nodes, slots, model,
                       micro_batch, steps, warmup, seq_len, folder, timeout, RichReporter(quiet))
    files = write(rows, list(dict.fromkeys(r.link for r in rows)), folder)
    click.echo(markdown(rows), nl=False)
    for name, path in files.items():
        click.echo(f"{name:9} {path}")
    sys.exit(1 if any(r.status != "ok" for r in rows) else 0)


@cli.command()
@click.argument("checkpoint", type=click.Path())
@click.argument("out", type=click.Path())
@click.option("--max-shard-size", default="2GB", show_default=True,
              help="Largest safetensors shard (as save_pretrained's max_shard_size).")
def export(checkpoint: str, out: str, max_shard_size: str) -> None:
    """Write a checkpoint (DeepSpeed ZeRO 0-3, or DCP of ddp/fsdp/single) as a new Hugging Face folder:
    config, tokenizer and safetensors weights that from_pretrained loads. CHECKPOINT is a --checkpoint-dir
    (its latest) or one global_stepN folder in it. Exit 2 for a bad checkpoint or OUT, 1 for an I/O error."""
    from dsbench.io import parse_size
    from dsbench.launchers import LaunchCommand
    from dsbench.runner import run

    parse_size(max_shard_size)  # refused here, before a process starts
    for name, value in (("CHECKPOINT", checkpoint), ("OUT", out)):
        if not value.strip() or "\0" in value:
            raise UserError(f"{name} {value!r}: give a folder path")
    # "--flag=value": a value that starts with "-" stays a value for the export program's parser
    command = LaunchCommand(argv=[sys.executable, "-m", "dsbench.worker.export", f"--max-shard-size={max_shard_size}",
                                  "--", checkpoint, out], env={"DS_ACCELERATOR": "cpu"})
    sys.exit(run(command, echo=sys.stdout))


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="dsbench")
