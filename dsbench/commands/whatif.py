"""``dsbench whatif``: strategies across test-bed nodes at several link rates."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from dsbench.commands.base import Command
from dsbench.commands.options import (
    COUNT,
    POSITIVE,
    csv_list,
)


@click.command(cls=Command)
@click.option("--links", default="unshaped,1gbit,100mbit", show_default=True, callback=csv_list(str),
              help="Link rates between the nodes, comma-separated tc rates (unshaped = the bare bridge).")
@click.option("--strategies", default="ddp,zero2,zero3,fsdp,pipe2", show_default=True, callback=csv_list(str),
              help="Compare strategies to run on every link.")
@click.option("--nodes", type=int, default=2, show_default=True, help="Test-bed nodes.")
@click.option("--slots", type=int, default=1, show_default=True, help="Ranks per node.")
@click.option("--model", default="gpt2-tiny", show_default=True)
@click.option("--micro-batch", type=COUNT, default=2, show_default=True)
@click.option("--steps", type=int, default=10, show_default=True)
@click.option("--warmup", type=int, default=2, show_default=True)
@click.option("--seq-len", type=COUNT, default=128, show_default=True)
@click.option("--out", type=click.Path(file_okay=False), help="Results folder [runs/whatif-<time>].")
@click.option("--timeout", type=POSITIVE, default=900, show_default=True, help="Seconds per cell.")
@click.option("--quiet", is_flag=True, help="No live progress.")
@click.option("--dry-run", is_flag=True, help="Check the inputs and print each link's cells; bring nothing up.")
def whatif(links: list[str], strategies: list[str], nodes: int, slots: int, model: str, micro_batch: int, steps: int,
           warmup: int, seq_len: int, out: str | None, timeout: float, quiet: bool, dry_run: bool) -> None:
    """Run strategies across test-bed nodes at several link rates, beside the planner's communication time
    (needs root: it brings `dsbench testbed` up and down once per link). Exit 1 when a cell failed."""
    from dsbench.bench.progress import RichReporter
    from dsbench.bench.whatif import whatif_main, write
    from dsbench.console import table_console
    from dsbench.report.plots import by_link
    from dsbench.report.tables import whatif_grid

    folder = Path(out or f"runs/whatif-{time.strftime('%Y%m%d-%H%M%S')}")
    if dry_run:
        from dsbench.bench.whatif import dry_run_lines

        for line in dry_run_lines(links, strategies, nodes, slots, model, micro_batch, steps, warmup, seq_len, folder):
            click.echo(line)
        return
    rows = whatif_main(links, strategies, nodes, slots, model, micro_batch, steps, warmup, seq_len, folder, timeout,
                       RichReporter(quiet))
    files = write(rows, folder)
    files["plot"] = by_link(rows, list(dict.fromkeys(r.link for r in rows)), folder / "whatif.png")
    whatif_grid(rows).print(table_console())
    for name, path in files.items():
        click.echo(f"{name:9} {path}")
    sys.exit(1 if any(r.status != "ok" for r in rows) else 0)


COMMAND = whatif
