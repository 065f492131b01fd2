"""The command line of a script in scripts/ that takes only paths (or nothing): ``--help`` prints the script's
docstring and does nothing else, and a missing or unreadable input is one line on stderr with exit 2, as the
``dsbench`` commands answer (docs/errors.md), never a traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from dsbench.errors import UserError


def parse(doc: str | None, paths: str | None = None, *, required: bool = False) -> list[str]:
    """The script's positional paths (``paths`` names them in the usage; None: the script takes none)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if paths:
        parser.add_argument("paths", metavar=paths, nargs="+" if required else "*")
    return list(getattr(parser.parse_args(), "paths", []))


def run(main: Callable[[], int | None]) -> int:
    """``main()``'s exit code; a bad input (dsbench's one-line errors, or a file that cannot be read) is one line."""
    try:
        return main() or 0
    except (UserError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
