"""``dsbench presets``: the named flag sets."""

from __future__ import annotations

import click

from dsbench.commands.base import Command


@click.command(cls=Command)
def presets() -> None:
    """List the presets and the flags each one sets."""
    from dsbench.configs.templates import presets as all_presets

    for name, values in all_presets().items():
        click.echo(f"{name:15} " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in values.items()))


COMMAND = presets
