"""``dsbench render``: a DeepSpeed config (or an accelerate YAML) from flags and presets."""

from __future__ import annotations

from typing import Any

import click

from dsbench.commands.base import Command
from dsbench.commands.options import (
    render_options,
    world_options,
)
from dsbench.errors import UserError
from dsbench.strategies import RENDERED_ENGINES


@click.command(cls=Command)
@render_options
@world_options
@click.option("--keep-auto", is_flag=True, help="Leave 'auto' values for the HF Trainer / accelerate to fill.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to FILE (atomically) instead of stdout.")
@click.option("--from-accelerate", "from_accelerate", type=click.Path(dir_okay=False), metavar="YAML",
              help="Write the DeepSpeed config an accelerate YAML's inline deepspeed_config makes (no other flags).")
@click.option("--to-accelerate", "to_accelerate", type=click.Path(dir_okay=False), metavar="YAML",
              help="Also write an accelerate YAML that runs it (DeepSpeed plugin pointing at -o FILE).")
@click.option("--strategy", type=click.Choice(RENDERED_ENGINES),
              help="With --to-accelerate: the engine the YAML selects [deepspeed]; ddp/fsdp write no JSON.")
def render(preset: str | None, model: str | None, sets: tuple[str, ...], world_size: int | None,
           hostfile: str | None, include: str, exclude: str, keep_auto: bool, output: str | None,
           from_accelerate: str | None, to_accelerate: str | None, strategy: str | None, **flags: Any) -> None:
    """Render a DeepSpeed config from templates, a preset, flags and --set overrides (or from an accelerate
    YAML's inline DeepSpeed settings); with --to-accelerate, also the accelerate YAML that runs it."""
    from dsbench.configs.api import from_accelerate_yaml, render_config, world_size_from
    from dsbench.io import dumps_json

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
        _write_config(output, config)
    else:
        click.echo(dumps_json(config), nl=False)


def _write_config(output: str, config: dict[str, Any]) -> None:
    """The rendered JSON at ``-o``: a new file, or one holding this render already (nothing a user wrote is lost)."""
    from dsbench.io import atomic_write_text, dumps_json, refuse_other_file

    text = dumps_json(config)
    refuse_other_file(output, text, "-o")
    atomic_write_text(output, text)
    click.echo(f"wrote {output}", err=True)


def _render_to_accelerate(path: str, kind: str, output: str | None, preset: str | None, model: str | None,
                          sets: tuple[str, ...], keep_auto: bool, world_options_given: tuple[Any, ...],
                          flags: dict[str, Any]) -> None:
    """``render --to-accelerate``: the DeepSpeed JSON (for deepspeed) at ``-o``, then the accelerate YAML that runs
    it on the given ranks (``--world-size``, or a hostfile's machines and slots)."""
    from dsbench.configs.api import render_config, world_size_from
    from dsbench.hostfile import read_hostfile
    from dsbench.io import atomic_write_text, refuse_other_file
    from dsbench.launchers import LaunchSpec
    from dsbench.launchers.accelerate import (
        ACCELERATE_PRECISION,
        accelerate_yaml,
        check_to_accelerate,
        yaml_text,
    )

    world_size, hostfile, include, exclude = world_options_given
    given = [f"--{name.replace('_', '-')}" for name, value in flags.items() if value is not None]
    given += ["--preset"] * bool(preset) + ["--model"] * bool(model) + ["--set"] * bool(sets)
    check_to_accelerate(kind, given + ["--keep-auto"] * keep_auto, output)
    world = world_size_from(world_size, hostfile, include, exclude)
    if world is None:
        raise UserError("--to-accelerate needs --world-size N or --hostfile: the YAML's num_processes")
    spec = (LaunchSpec(hosts=tuple(read_hostfile(hostfile)), hostfile=hostfile, include=include, exclude=exclude)
        if hostfile else LaunchSpec(nproc_per_node=world))
    world = spec.even_world()  # the same ranks on every node, checked before anything is written
    yaml = yaml_text(accelerate_yaml(kind, processes=world, machines=spec.nodes(), main_ip=spec.first_host(),
                                     port=29500, ds_config=output,
                                     mixed_precision=ACCELERATE_PRECISION[flags.get("precision") or "fp32"]), path)
    refuse_other_file(path, yaml, "--to-accelerate")  # both checked before either is written
    if kind == "deepspeed":
        assert output
        config, notes = render_config(dict(flags, world_size=world), preset, model, keep_auto, sets)
        for note in notes:
            click.echo(f"note: {note}", err=True)
        _write_config(output, config)
    atomic_write_text(path, yaml)
    click.echo(f"wrote {path}: " + (f"accelerate launch --config_file {path} -m dsbench.train" if spec.nodes() == 1
                                     else f"its header gives the command for each of its {spec.nodes()} nodes"),
               err=True)


COMMAND = render
