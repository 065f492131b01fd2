"""The rich console for tables: the terminal's width, or the COLUMNS variable (100 when unset) in logs and pipes."""

from __future__ import annotations

import os
from typing import Any

DEFAULT_WIDTH = 100
"""The width of a table printed to a pipe or a log (the COLUMNS variable overrides it)."""


def table_console() -> Any:
    """A rich Console for printing tables to stdout."""
    from rich.console import Console

    console = Console()
    if console.is_terminal:
        return console
    columns = os.environ.get("COLUMNS", "")
    return Console(width=int(columns) if columns.isdigit() and int(columns) > 0 else DEFAULT_WIDTH)
