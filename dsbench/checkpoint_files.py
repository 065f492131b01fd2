"""The files of a checkpoint's tag folder as its manifest records them (stdlib only): listed with their sizes when a
save ends, checked before a resume or an export reads any (dsbench/checkpoints.py reads the manifest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsbench.errors import UserError

MANIFEST = "dsbench_checkpoint.json"


def inside(name: Any) -> bool:
    """A relative path that stays in the tag folder."""
    return isinstance(name, str) and bool(name) and not name.startswith("/") and ".." not in name.split("/")


def files_of(folder: Path) -> dict[str, int]:
    """The tag folder's files but the manifest, each with its size (what the manifest records when the save ends)."""
    return {path.relative_to(folder).as_posix(): path.stat().st_size for path in sorted(folder.rglob("*"))
            if path.is_file() and path.name != MANIFEST}


def check_files(folder: Path, files: dict[str, int] | None) -> None:
    """Every file the save wrote is there, at the size it wrote, before anything reads one: a rank that met a
    missing or truncated file while the others waited in a collective stopped them with a lost connection (until
    2026-12-04); now every rank, the launch and export refuse it alike, by name."""
    for name, size in (files or {}).items():
        path = folder / name
        if not path.is_file():
            raise UserError(f"{folder}: {name} is missing (the save wrote {len(files or {})} files): the "
                            "checkpoint is incomplete")
        if (found := path.stat().st_size) != size:
            raise UserError(f"{path}: {found:,} bytes, where the save wrote {size:,}: the file was truncated or "
                            "replaced")
