"""``dsbench hostfile check``: every bad line of a DeepSpeed hostfile."""

from __future__ import annotations

import sys

import click

from dsbench.commands.base import Group


@click.group(cls=Group)
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
    slots = sum(h.slots for h in hosts)
    click.echo(f"{path}: valid ({len(hosts)} host{'s' * (len(hosts) != 1)}, {slots} slot{'s' * (slots != 1)})")


COMMAND = hostfile
