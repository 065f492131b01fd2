"""Terminal tables that fit the terminal: the columns that decide, never a cut number or a cell wrapped mid-word.

Every table dsbench prints is a ``Grid``: cells are text, each column says from which terminal width it is shown
(80 or 100 columns; 0 = only with ``--wide``). At a given width the grid shows its columns of that tier and drops
the least important (highest tier, rightmost) until the table's natural width fits; no cell is ever cut or wrapped
(rich's ``no_wrap``, and a width the table fits). Explanations go under the table as numbered notes, wrapped at
words like any prose. ``--wide`` shows every column at the table's own width; ``--json``, CSV and HTML keep every
figure.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Col:
    header: str
    tier: int = 100
    """Shown from a terminal this wide (80 or 100 columns); 0: only with --wide."""
    left: bool = False
    """Text (left-aligned) rather than a figure (right-aligned)."""


@dataclass
class Grid:
    columns: list[Col]
    rows: list[list[Any]] = field(default_factory=list)
    styles: list[str | None] = field(default_factory=list)
    title: str | None = None
    notes: list[str] = field(default_factory=list)
    """Printed under the table as ``1. ...``, ``2. ...`` (a cell refers to one as ``[1]``)."""

    def add(self, *cells: Any, style: str | None = None) -> None:
        """A row: each cell a str, printed as it is (no rich markup), or a ``rich.text.Text`` with its style."""
        assert len(cells) == len(self.columns), (len(cells), [c.header for c in self.columns])
        self.rows.append(list(cells))
        self.styles.append(style)

    def note(self, text: str) -> str:
        """Number a note (the same text keeps its number) and return its marker for a cell."""
        if text not in self.notes:
            self.notes.append(text)
        return f"[{self.notes.index(text) + 1}]"

    def shown(self, width: int, wide: bool = False) -> list[int]:
        """The columns to show at ``width``: every one with --wide; else those of the width's tier (80 below 100
        columns, 100 from there), dropping the highest tier from the right until the table fits. The first column
        (a row's name) always stays."""
        if wide:
            return list(range(len(self.columns)))
        tier = 80 if width < 100 else 100
        keep = [i for i, col in enumerate(self.columns) if col.tier and col.tier <= tier]
        while self.natural_width(keep) > width and len(keep) > 1:
            order = sorted(keep[1:], key=lambda i: (self.columns[i].tier, i))
            keep.remove(order[-1])
        return keep

    def natural_width(self, keep: list[int]) -> int:
        """The width the table takes with these columns, uncut (measured by rendering it)."""
        buffer = io.StringIO()
        _console(buffer, 100_000).print(self._table(keep))
        return max((len(line) for line in buffer.getvalue().splitlines()), default=0)

    def _table(self, keep: list[int]) -> Any:
        from rich import box
        from rich.table import Table

        table = Table(title=self.title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
        for i in keep:
            col = self.columns[i]
            table.add_column(col.header, justify="left" if col.left else "right", no_wrap=True)
        for cells, style in zip(self.rows, self.styles, strict=True):
            table.add_row(*(cells[i] for i in keep), style=style)
        return table

    def print(self, console: Any, wide: bool = False) -> None:
        """Print the table and its notes; a hidden column is named in a last note."""
        keep = self.shown(console.width, wide)
        notes = list(self.notes)
        hidden = len(self.columns) - len(keep)
        if hidden:
            names = [col.header for i, col in enumerate(self.columns) if i not in keep]
            notes.append(f"{hidden} more column{'s' if hidden != 1 else ''} with --wide"
                         + (f" ({', '.join(names)})" if hidden <= 6 else "") + ".")
        if wide:  # the table at its own width: the terminal may fold long lines, but no cell is cut
            console = _console(console.file, max(console.width, self.natural_width(keep)))
        console.print(self._table(keep))
        for number, text in enumerate(notes, 1):
            console.print(f"{number}. {text}", highlight=False)


def _console(file: Any, width: int) -> Any:
    from rich.console import Console

    return Console(file=file, width=width, highlight=False, soft_wrap=False, markup=False)  # as table_console
