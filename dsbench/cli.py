"""The ``dsbench`` command line: flags -> spec -> one library call -> exit code.

Heavy modules (torch, deepspeed, transformers) are imported only inside the commands that need
them, so ``dsbench --help`` stays fast. Every :class:`~dsbench.errors.DsbenchError` becomes one
line on stderr and its exit code (2 for bad input, 1 for an invalid config or failed run).
"""

from __future__ import annotations

import os

import click

from dsbench import __version__
from dsbench.commands import (
    calibrate,
    compare,
    doctor,
    explain,
    export,
    hostfile,
    launch,
    plan,
    presets,
    render,
    report,
    testbed,
    tune,
    validate,
    whatif,
)
from dsbench.commands.base import Group
from dsbench.console import drop_unreadable_sizes


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="dsbench")
@click.option("--debug", is_flag=True, help="Show the traceback of an error (also DSBENCH_DEBUG=1).")
def cli(debug: bool) -> None:
    """Render, validate, launch and compare DeepSpeed / DDP / FSDP training strategies."""


for module in (render, validate, explain, presets, hostfile, launch, compare, report, plan, calibrate, tune, testbed,
               doctor, whatif, export):
    cli.add_command(module.COMMAND)


def main() -> None:
    """Console-script entry point."""
    drop_unreadable_sizes(os.environ)
    cli(prog_name="dsbench")
