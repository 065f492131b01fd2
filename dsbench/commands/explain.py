"""``dsbench explain``: a config in plain words."""

from __future__ import annotations

import click

from dsbench.commands.base import Command
from dsbench.commands.options import (
    world_options,
)


@click.command(cls=Command)
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


COMMAND = explain
