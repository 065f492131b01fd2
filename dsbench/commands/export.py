"""``dsbench export``: a checkpoint as a Hugging Face folder."""

from __future__ import annotations

import sys

import click

from dsbench.commands.base import Command
from dsbench.errors import UserError


@click.command(cls=Command)
@click.argument("checkpoint", type=click.Path())
@click.argument("out", type=click.Path())
@click.option("--max-shard-size", default="2GB", show_default=True,
              help="Largest safetensors shard (as save_pretrained's max_shard_size).")
def export(checkpoint: str, out: str, max_shard_size: str) -> None:
    """Write a checkpoint (DeepSpeed ZeRO 0-3 or its pipeline, or DCP of a torch engine) as a new Hugging Face folder:
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
    sys.exit(run(command, echo=sys.stdout, errors=sys.stderr))  # its error line on stderr, as every command's


COMMAND = export
