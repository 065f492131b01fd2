"""The compare/report table for a terminal: the verdict, then the columns that decide (dsbench/report/grid.py).

At 100 columns: strategy, ranks, tokens/s with its spread, vs best, memory, MFU, final loss, status; at 80:
strategy, tokens/s, vs best, memory, status; every other figure with ``--wide`` (and always in the Markdown, CSV,
JSON and HTML the report writes). The spread and the memory are the verdict's own (report/verdict.py), so the
table and the sentences above it cannot disagree.
"""

from __future__ import annotations

from typing import Any

from dsbench.report.grid import Col, Grid
from dsbench.report.render import TEXT_COLUMNS, cell_text, columns_for, method_notes, predicted_note
from dsbench.report.verdict import group_of, memory_of, noise_rule
from dsbench.rows import Row

SHOWN = {"strategy", "world_size", "status", "mfu", "final_loss"}
"""Figures of render.COLUMNS the default table shows under its own headers."""


def _tokens(row: Row, low: str, high: str) -> str:
    """The wall clock's tokens/s, and in brackets the range the verdict compares (:func:`noise_rule`), as it is: two
    cells are within noise where their brackets overlap. Until 2026-12-03 a ± of half that range stood around the
    figure, which the range need not surround (one repeat's is the timed region's, over the steps): 7,533 ±10.7%
    beside 6,589 ±14.2% read as overlapping where the ranges, 7,557-9,342 and 5,498-7,445, do not. A timed range is
    marked so (``5,920 (timed 5,924-6,134)``): the timed region leaves out what the wall clock counts, so the figure
    can sit below it."""
    if not row.tokens_per_s:
        return "-"
    lo, hi = row.figure(low), row.figure(high)
    timed = "timed " if low.startswith("timed") else ""
    return f"{row.tokens_per_s:,.0f}" + ("" if lo is None or hi is None else f" ({timed}{lo:,.0f}-{hi:,.0f})")


def _best(rows: list[Row]) -> dict[tuple[Any, ...], float]:
    """The fastest tokens/s among cells of the same model, device and ranks (the verdict's groups), for groups of
    two cells or more: a cell alone in its group (``single``, the one 1-rank cell) has nothing to be compared with."""
    by_group: dict[tuple[Any, ...], list[float]] = {}
    for row in rows:
        if row.status == "ok" and row.tokens_per_s:
            by_group.setdefault(group_of(row), []).append(row.tokens_per_s)
    return {group: max(figures) for group, figures in by_group.items() if len(figures) > 1}


def compare_grid(rows: list[Row], wide: bool = False) -> Grid:
    """The table; its notes say how the shown figures were measured (every column's with ``wide``)."""
    ok = [row for row in rows if row.status == "ok" and row.tokens_per_s]
    low, high, what, caveat = noise_rule(ok) if ok else ("tokens_per_s_min", "tokens_per_s_max", "", "")
    best = _best(rows)
    several = {key: len({row.figure(key) for row in ok}) > 1 for key in ("model", "device")}  # failed cells aside
    rest = [col for col in columns_for(rows) if col[0] not in SHOWN]
    grid = Grid([Col("strategy", 80, left=True), Col("ranks", 100), Col("tokens/s (range)", 80), Col("vs best", 80),
                 Col("MiB/rank", 80), Col("MFU %", 100), Col("loss", 100), Col("status", 80, left=True),
                 *(Col(header, 100 if several.get(key) else 0, left=key in TEXT_COLUMNS) for key, header, _ in rest)],
                title="strategies compared")  # the same table under compare and report
    for row in rows:
        top = best.get(group_of(row))
        memory = memory_of(row)[0]
        grid.add(row.strategy, str(row.world_size or "-"), _tokens(row, low, high),
                 f"{row.tokens_per_s / top:.2f}x" if top and row.tokens_per_s else "-",
                 "-" if memory is None else f"{memory:,.1f}", cell_text(row, "mfu", ""),
                 cell_text(row, "final_loss", "{:.4f}"), row.status,
                 *(cell_text(row, key, fmt) for key, _, fmt in rest), style=None if row.status == "ok" else "red")
    how = method_notes(rows)
    grid.notes.append(how[0] + (f" tokens/s: global, by the wall clock over the measured window; in brackets the "
                                f"range the verdict compares, {what}" + (f" ({caveat})" if caveat else "")
                                + ": cells are within noise where their ranges overlap." if what else ""))
    grid.notes.append("vs best: tokens/s over the fastest's among cells of the same model, device and ranks (- for "
                      "a cell alone in its group). "
                      "MiB/rank: model states per rank on CPU (params+grads+optimizer states+fp32 master, from rank "
                      "0's tensors), peak device memory on GPU (torch.cuda.max_memory_allocated).")
    skipped = [f"{row.strategy} {row.skipped_steps}" for row in rows if row.skipped_steps]
    if skipped:  # in every view: a step that did not update the model still counts in its throughput
        grid.notes.append(f"fp16's loss scale skipped optimizer steps (an overflow; their tokens count in tokens/s, "
                          f"their updates did not happen): {', '.join(skipped)}.")
    grid.notes += how[1:] + predicted_note(rows)[1:] if wide else ["report.md explains every column."]
    return grid


def print_report(report: Any, wide: bool = False) -> None:
    """The verdict, the table, and where each artefact is."""
    from dsbench.console import table_console

    console = table_console()
    for line in report.verdict:  # the answer first
        console.print(line, highlight=False)
    compare_grid(report.rows, wide).print(console, wide)
    for name, path in report.files.items():
        console.print(f"{name:18} {path}", highlight=False, soft_wrap=True)
