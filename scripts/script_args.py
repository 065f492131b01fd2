"""The command line of a script in scripts/: ``--help`` prints the script's docstring and does nothing else, a
missing or unreadable input is one line on stderr with exit 2, as the ``dsbench`` commands answer (docs/errors.md),
never a traceback, and a count or size is a number above 0 (:func:`positive`)."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import Any

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


def positive(kind: type = int) -> Callable[[str], Any]:
    """An argparse type: a finite number above 0; with ``kind`` int a whole one, written as ``8`` or ``2e8`` (never
    rounded: ``1.5`` is refused). argparse prints the message after the flag's name, one line, exit 2."""
    def parse(text: str) -> Any:
        try:
            number = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(number):
            raise argparse.ArgumentTypeError(f"{text!r} is not a number")
        if kind is int and not number.is_integer():
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
        if not number > 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be above 0")
        if kind is int:  # exact for digits beyond a float's 53 bits
            return int(text) if text.strip().lstrip("+").isdigit() else int(number)
        return kind(number)
    return parse
