"""``dsbench validate``: every finding of a DeepSpeed config or an accelerate YAML, with its fix."""

from __future__ import annotations

import json
import sys

import click

from dsbench.commands.base import Command
from dsbench.commands.options import (
    world_options,
)


@click.command(cls=Command)
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
    from dsbench.configs.findings import finding_lines, has_errors

    world = world_size_from(world_size, hostfile, include, exclude)
    _, findings = validate_file(config, world, allow_auto, deepspeed_check)
    errors = has_errors(findings) or (strict and bool(findings))
    if as_json:
        click.echo(json.dumps({"config": config, "world_size": world, "valid": not errors,
                               "findings": [f.to_dict() for f in findings]}, indent=2))
    else:
        for line in finding_lines(findings):
            click.echo(line)
        n_err = sum(f.severity == "error" for f in findings)
        verdict = "invalid" if has_errors(findings) else "fails --strict" if errors else "valid"
        n_warn = len(findings) - n_err
        click.echo(f"{config}: {verdict} ({n_err} error{'s' * (n_err != 1)}, {n_warn} warning{'s' * (n_warn != 1)}"
                   f"{f', world size {world}' if world else ''})")
    sys.exit(1 if errors else 0)


COMMAND = validate
