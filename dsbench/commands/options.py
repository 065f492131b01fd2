"""Option types and option groups shared by several commands."""

from __future__ import annotations

import functools
from typing import Any

import click

from dsbench.errors import UserError


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


class Hinted(click.Choice):
    """A choice whose refusal of a value another tool spells differently says how dsbench spells it."""

    def __init__(self, choices: list[str], hints: dict[str, str]) -> None:
        super().__init__(choices)
        self.hints = hints

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            if str(value).lower() not in self.hints:
                raise
            self.fail(f"{value!r} is not one of {', '.join(map(repr, self.choices))}: "
                      f"{self.hints[str(value).lower()]}", param, ctx)


# DeepSpeed's runner spells its multi-node backends as `deepspeed --launcher NAME` (deepspeed 0.19 launcher/
# runner.py: pdsh, openmpi, mpich, impi, mvapich, slurm); dsbench's --launcher names the program that starts the ranks
_BACKEND = "{0} is a backend of DeepSpeed's runner here: --launcher deepspeed --launcher-backend {0}"
_UNSUPPORTED = ("dsbench starts DeepSpeed's runner through pdsh, ssh or openmpi (--launcher deepspeed "
                "--launcher-backend ...), not {0}")
LAUNCHER = Hinted(["deepspeed", "torchrun", "accelerate", "slurm"],
                  {**{name: _BACKEND.format(name) for name in ("pdsh", "openmpi", "ssh")},
                   **{name: _UNSUPPORTED.format(name) for name in ("mpich", "impi", "mvapich")},
                   "torch": "torch's launcher is --launcher torchrun"})
POSITIVE = Finite(0, low_open=True)
COUNT = click.IntRange(min=1)
_OFFLOAD = click.Choice(["none", "cpu", "nvme"])


class PerZeroStage(click.ParamType):
    """Three positive numbers, ``S1,S2,S3``: one per ZeRO stage, each at most a million (µs per tensor: a second)."""

    name = "S1,S2,S3"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[float, ...]:
        if isinstance(value, tuple):
            return value
        parts = str(value).split(",")
        if len(parts) != 3:
            self.fail(f"{value!r}: give three numbers, for ZeRO-1, 2 and 3 (e.g. 140,185,660)", param, ctx)
        return tuple(Finite(0, low_open=True, high=1e6).convert(part.strip(), param, ctx) for part in parts)


RENDER_FLAGS = ("zero", "offload", "offload_param", "nvme_path", "precision", "micro_batch", "grad_accum",
                "global_batch", "pipeline_stages", "tp", "ulysses", "grad_clip", "lr", "warmup_steps", "train_steps")


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
        click.option("--pipeline-stages", type=int, help="Pipeline-parallel stages (DeepSpeed's PipelineModule; "
                     "launch --strategy torch_pp or torch_3d: torch's pipelining)."),
        click.option("--tp", type=int, help="Tensor-parallel degree (DeepSpeed AutoTP; launch --strategy torch_tp or "
                     "torch_3d: DTensor TP)."),
        click.option("--ulysses", type=int, help="DeepSpeed Ulysses sequence-parallel degree (sequence_parallel_size; "
                     "ZeRO 1-3)."),
        click.option("--grad-clip", type=float, help="Gradient-norm clipping [1.0]."),
        click.option("--lr", type=float, help="Peak learning rate [3e-4]."),
        click.option("--warmup-steps", type=int, help="Scheduler warm-up steps [0]."),
        click.option("--train-steps", type=int,
                     help="total_num_steps of a decaying scheduler (one named by --set scheduler.type) [100]."),
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


def checked_profile(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """``--profile``: read and checked field by field as the flag is parsed, before any run, so a profile the
    planner cannot use never costs a compare's cells. The command gets the loaded profile
    (:class:`dsbench.plan.profile.Profile`), which it passes on: the file is read once."""
    if value is None:
        return None
    from dsbench.plan.machine_profile import read_profile

    return read_profile(value)


def csv_list(kind: Any) -> Any:
    """A click callback: ``a,b`` as ``[kind(a), kind(b)]``, spaces around an item ignored. An empty item among
    others (``ddp,,zero2``, a trailing comma) is refused: it is a name the user meant to type; so is an item named
    twice (every list is a set of cells, strategies or links: until 2026-12-03 ``--models gpt2-tiny,gpt2-tiny`` ran
    every cell twice)."""
    def parse(ctx: click.Context, param: click.Parameter, value: str | None) -> list[Any] | None:
        if value is None:
            return None
        items = [item.strip() for item in str(value).split(",")]
        if not any(items):
            return []  # refused by Command.parse_args as empty, as any other empty value
        if "" in items:
            raise click.BadParameter(f"{value!r} has an empty item: remove the extra comma")
        try:
            parsed = [kind(item) for item in items]
        except ValueError:
            raise click.BadParameter(f"expected a comma-separated list, got {value!r}") from None
        twice = next((item for item in parsed if parsed.count(item) > 1), None)
        if twice is not None:
            raise click.BadParameter(f"names {twice} twice: name it once")
        return parsed
    return parse


def check_seq_len(model: str, seq_len: int) -> None:
    """The model resolves and has positions for ``seq_len`` (refused before any rank starts)."""
    from dsbench.model_config import resolve_model

    shape = resolve_model(model)
    if seq_len > shape.max_positions:
        raise UserError(f"--seq-len {seq_len} exceeds {shape.name}'s {shape.max_positions} positions")


def default_of(request: type, name: str) -> Any:
    """A request dataclass's default for one field, for the option that sets it: the default is stated once, on the
    request that the use case takes (``TuneRequest``, ``PlanRequest``)."""
    import dataclasses

    return next(f.default for f in dataclasses.fields(request) if f.name == name)


def max_slowdown_option(command: Any) -> Any:
    """``--max-slowdown``: how much slower than the fastest the verdict's least-memory choice may step
    (report/verdict.py)."""
    from dsbench.report.verdict import MAX_SLOWDOWN

    return click.option("--max-slowdown", type=Finite(1), default=MAX_SLOWDOWN, show_default=True,
                        help="The verdict's least-memory choice may step this much slower than the fastest.")(command)


def wide_option(command: Any) -> Any:
    """``--wide``: every column of the printed tables (dsbench/report/grid.py)."""
    return click.option("--wide", is_flag=True, help="Print every column (the default shows the columns that decide, "
                        "fitted to the terminal; --json keeps every figure).")(command)
