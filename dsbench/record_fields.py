"""Typed fields of the records dsbench reads back from a run folder (stdlib only): a value of another type is one
line naming the file and the field, never the Python error its use would raise, nor a figure printed from it.
:mod:`dsbench.run_record` (a run's header and summary) and :mod:`dsbench.cell_record` (a compare cell) read
through these."""

from __future__ import annotations

import math
from typing import Any

from dsbench.errors import UserError


def number_field(value: Any, where: str, name: str, optional: bool = False) -> Any:
    """A figure that must be a finite number (or None where ``optional``): one line naming it otherwise."""
    if value is None and optional:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise UserError(f"{where}: {name} is {value!r}, not a number")
    return value


def count_field(value: Any, where: str, name: str) -> int:
    """A count that must be a whole number >= 0 (JSON's 3 or 3.0): one line naming it otherwise."""
    number = number_field(value, where, name)
    if number < 0 or number != int(number):
        raise UserError(f"{where}: {name} is {value!r}, not a count")
    return int(number)


def text_field(value: Any, where: str, name: str, optional: bool = False) -> str | None:
    """Text, non-empty unless ``optional`` (then None too): one line naming it otherwise."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or (not optional and not value):
        raise UserError(f"{where}: {name} is {value!r}, not {'a string' if optional else 'a non-empty string'}")
    return value


def flag_field(value: Any, where: str, name: str) -> bool:
    """True or false, nothing else (JSON's 1 or "yes" is not a flag): one line naming it otherwise."""
    if not isinstance(value, bool):
        raise UserError(f"{where}: {name} is {value!r}, not true or false")
    return value
