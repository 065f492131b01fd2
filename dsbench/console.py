"""The rich console for tables: the terminal's width, or the COLUMNS variable (100 when unset) in logs and pipes."""

from __future__ import annotations

import os
from typing import Any

from dsbench.io import read_count

DEFAULT_WIDTH = 100
"""The width of a table printed to a pipe or a log (the COLUMNS variable overrides it)."""
SIZE_VARIABLES = ("COLUMNS", "LINES", "JUPYTER_COLUMNS", "JUPYTER_LINES")
"""What rich reads for the terminal's size, with ``str.isdigit`` then ``int``: '²' passes the one, fails the other."""


def terminal_size(text: str) -> int | None:
    """A size variable's value as a count of cells (ASCII digits, 1 to 999,999), or None."""
    return read_count(text, digits=6) or None


def drop_unreadable_sizes(environ: dict[str, str] | os._Environ[str]) -> None:
    """Forget a size variable no console could read (COLUMNS=² stopped every command in rich's Console()): the
    terminal's own size, or DEFAULT_WIDTH, is used instead."""
    for name in SIZE_VARIABLES:
        if name in environ and terminal_size(environ[name]) is None:
            del environ[name]


def table_console() -> Any:
    """A rich Console for printing tables to stdout. Without rich's markup: what it prints holds text from files and
    flags (a rank's error line, a folder's name), and rich took ``[rank 0]`` in a failed cell's reason for a style
    tag and dropped it (until 2026-12-04); a cell's own style is a ``rich.text.Text``."""
    from rich.console import Console

    console = Console(markup=False)
    if console.is_terminal:
        return console
    return Console(width=terminal_size(os.environ.get("COLUMNS", "")) or DEFAULT_WIDTH, markup=False)
