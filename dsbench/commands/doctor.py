"""``dsbench doctor``: what would stop a launch on these hosts, before it starts."""

from __future__ import annotations

import json
import os
import sys

import click

from dsbench.commands.base import Command


@click.command(cls=Command)
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
        from dsbench.console import table_console
        from dsbench.report.tables import doctor_grid

        doctor_grid(rows).print(table_console())
    sys.exit(1 if failed(rows) else 0)


COMMAND = doctor
