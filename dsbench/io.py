"""File helpers: atomic writes and JSON reads that report line and column.

Every file dsbench writes goes through :func:`atomic_write_text`, so an interrupted run never
leaves a half-written config, metrics file or report behind.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from dsbench.errors import DsbenchError, UserError


def read_count(text: str, digits: int = 15) -> int | None:
    """A whole number >= 0 written in ASCII digits, at most ``digits`` of them; None otherwise. ``str.isdigit``
    alone also accepts '²', which ``int`` refuses, and Arabic-Indic digits, which ``int`` reads and no launcher does;
    and ``int`` refuses over 4,300 digits with a ValueError of its own."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= digits else None


MAX_INPUT_BYTES = 64 * 2**20
"""Largest config, hostfile, matrix or record file read whole: far above any real one, far below the RAM."""
MAX_JSON_DEPTH = 64
"""Deepest JSON nesting accepted (DeepSpeed configs nest 3-4 levels); deeper input is refused, not recursed into."""


class WriteError(DsbenchError):
    """The disk refused a write (full, quota, I/O error): exit 1, what was written before stays."""

    exit_code = 1


_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def check_output_path(path: str | os.PathLike[str]) -> Path:
    """The file an output would be written to (a symlink's target): it may be new or a regular file, never a
    folder, device, FIFO or socket, which replacing would destroy (``render -o /dev/full`` as root)."""
    target = Path(path)
    if target.is_symlink():
        target = target.resolve()
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise UserError(f"{path} is {_kind(mode)}, not a regular file: give a file path to write to")
    return target


def check_creatable_folder(folder: Path, flag: str) -> None:
    """``folder`` exists as a writable folder, or its nearest existing parent is one (so it can be made): checked
    before any work, so that a run never trains and then fails at its first save."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing == folder and not folder.is_dir():
        raise UserError(f"{flag} {folder}: exists and is not a folder")
    if not existing.is_dir():
        raise UserError(f"{flag} {folder}: {existing} is a file, so no folder can be made under it")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {folder}: {existing} is not writable")


def write_failed(path: str | os.PathLike[str], exc: OSError) -> DsbenchError:
    """A one-line error for a failed write: a full or failing disk is exit 1, a path that cannot be written exit 2."""
    message = f"cannot write {path}: {exc.strerror or exc}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG):
        return WriteError(message + " (files written before it are intact)")
    return UserError(message + ": choose a folder you can write to")


def json_object_with(path: str | os.PathLike[str], keys: set[str]) -> bool:
    """Whether ``path`` holds a JSON object with every one of ``keys`` (False where it is absent, unreadable or not
    JSON): how dsbench knows a file it wrote (a report's report.json, a launch's run.json) before writing beside it."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and keys <= set(data)


def refuse_other_file(path: str | os.PathLike[str], text: str, flag: str) -> None:
    """Nothing a user wrote is written over: a file at ``path`` must be absent or already hold ``text`` (the same
    render again writes nothing new), else a one-line error naming ``flag``."""
    target = check_output_path(path)
    try:
        same = target.stat().st_size == len(text.encode()) and target.read_text(encoding="utf-8") == text
    except FileNotFoundError:
        return
    except (OSError, UnicodeDecodeError):
        same = False
    if not same:
        raise UserError(f"{path} exists and holds something else: give {flag} a new file, or move it away first "
                        "(dsbench writes over no file; the same render again changes nothing)")


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder and ``os.replace``; the old
    content stays whole until the new one is complete. Refuses a path that is not a regular file."""
    target = check_output_path(path)
    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        raise write_failed(path, exc) from None
    finally:
        if tmp is not None and os.path.lexists(tmp):
            Path(tmp).unlink(missing_ok=True)
    return target


def dumps_json(data: Any) -> str:
    """Deterministic JSON text: two-space indent, keys in insertion order, trailing newline."""
    return json.dumps(data, indent=2) + "\n"


def atomic_write_json(path: str | os.PathLike[str], data: Any) -> Path:
    """Write ``data`` as JSON atomically."""
    return atomic_write_text(path, dumps_json(data))


def read_text(path: str | os.PathLike[str], what: str = "file") -> str:
    """Read a UTF-8 text file, turning OS errors into one-line :class:`UserError`. Only regular files are read:
    a FIFO would block forever and a device never ends."""
    p = Path(path)
    try:
        info = os.stat(p)
        if stat.S_ISDIR(info.st_mode):
            raise UserError(f"{what} is a directory, expected a file: {p}")
        if not stat.S_ISREG(info.st_mode):
            raise UserError(f"{what} {p} is {_kind(info.st_mode)}, not a regular file: give a file")
        if info.st_size > MAX_INPUT_BYTES:
            raise UserError(f"{what} {p} is {info.st_size / 2**20:.0f} MiB; a {what} is never that large "
                            f"(at most {MAX_INPUT_BYTES // 2**20} MiB)")
        data = p.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{what} not found: {p}") from None
    except OSError as exc:
        raise UserError(f"cannot read {what} {p}: {exc.strerror or exc}") from None
    if b"\0" in data:
        raise UserError(f"{what} {p} is binary (it holds NUL bytes), not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {p} is not UTF-8 text (byte {exc.start}): save it as UTF-8") from None


def loads_json(text: str, source: str, **kwargs: Any) -> Any:
    """``json.loads`` with every way it can fail as a one-line :class:`UserError` naming ``source``: malformed
    text (line and column), numbers beyond Python's 4300-digit limit, nesting too deep to walk."""
    try:
        data = json.loads(text, **kwargs)
    except json.JSONDecodeError as exc:
        raise UserError(f"{source}:{exc.lineno}:{exc.colno}: malformed JSON: {exc.msg}") from None
    except RecursionError:
        raise UserError(f"{source}: JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:  # int('9' * 5000): "Exceeds the limit (4300 digits) for integer string conversion"
        raise UserError(f"{source}: a number too long to read ({str(exc).split(':')[0]})") from None
    check_depth(data, source)
    return data


def check_depth(data: Any, source: str) -> None:
    """Refuse JSON nested deeper than :data:`MAX_JSON_DEPTH` (walked without recursion)."""
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise UserError(f"{source}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def read_json(path: str | os.PathLike[str], what: str = "JSON file") -> Any:
    """Read a JSON file; malformed JSON raises a :class:`UserError` naming line and column."""
    return loads_json(read_text(path, what), str(path))


def parse_size(text: str, flag: str = "--max-shard-size") -> int:
    """``2GB``, ``500MB``, ``1.5GiB`` or a byte count -> bytes (at least 1 kB, below 1 PiB)."""
    units = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 10**3, "mb": 10**6, "gb": 10**9, "b": 1}
    raw = text.strip().lower()
    unit = next((u for u in units if raw.endswith(u)), "")
    number = raw[: len(raw) - len(unit)] if unit else raw
    if not number.isascii():
        raise UserError(f"{flag} {text!r}: expected a size such as 2GB or 500MB")
    try:
        value = float(number) * units.get(unit, 1)
    except ValueError:
        raise UserError(f"{flag} {text!r}: expected a size such as 2GB or 500MB") from None
    if not (value >= 1000 and value < 2**50):
        raise UserError(f"{flag} {text!r}: must be between 1kB and 1PiB")
    return int(value)
