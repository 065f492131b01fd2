"""``dsbench testbed``: nodes in network namespaces on this machine."""

from __future__ import annotations

import sys

import click

from dsbench.commands.base import Group


@click.group(cls=Group)
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


COMMAND = testbed
