"""The rich console for tables: the terminal's width, or 200 columns in logs and pipes (not squeezed to 80)."""

from __future__ import annotations

from typing import Any


def table_console() -> Any:
    """A rich Console for printing tables to stdout."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=200)
