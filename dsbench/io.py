"""File helpers: atomic writes and JSON reads that report line and column.

Every file dsbench writes goes through :func:`atomic_write_text`, so an interrupted run never
leaves a half-written config, metrics file or report behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from dsbench.errors import UserError


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder and ``os.replace``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def dumps_json(data: Any) -> str:
    """Deterministic JSON text: two-space indent, keys in insertion order, trailing newline."""
    return json.dumps(data, indent=2) + "\n"


def atomic_write_json(path: str | os.PathLike[str], data: Any) -> Path:
    """Write ``data`` as JSON atomically."""
    return atomic_write_text(path, dumps_json(data))


def read_text(path: str | os.PathLike[str], what: str = "file") -> str:
    """Read a UTF-8 text file, turning OS errors into one-line :class:`UserError`."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{what} not found: {p}") from None
    except IsADirectoryError:
        raise UserError(f"{what} is a directory, expected a file: {p}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {what} {p}: {exc}") from None


def read_json(path: str | os.PathLike[str], what: str = "JSON file") -> Any:
    """Read a JSON file; malformed JSON raises a :class:`UserError` naming line and column."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}:{exc.lineno}:{exc.colno}: malformed JSON: {exc.msg}") from None
