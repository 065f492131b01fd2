"""Which files a ``--dataset`` path names, checked without reading them (pure but for the file system; no
``datasets`` import): the launch checks them before any rank starts, each rank again before it reads them."""

from __future__ import annotations

import os
from pathlib import Path

from dsbench.errors import UserError

FORMATS = {".txt": "text", ".text": "text", ".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}
"""File suffix -> the ``datasets`` builder that reads it."""
MAX_FILES = 100_000
"""Most files a dataset folder may hold, data or not: ``--dataset /`` would otherwise walk the whole file system (and
/proc)."""


def _walk(folder: Path, given: str) -> list[Path]:
    """The data files under ``folder`` (symbolic links to folders not followed), sorted; refused past MAX_FILES
    files of any kind, counted as the walk goes."""
    found: list[Path] = []
    seen = 0
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        seen += len(names) + len(dirs)
        if seen > MAX_FILES:
            raise UserError(f"--dataset {given}: over {MAX_FILES:,} files below it: give the folder that holds the "
                            "corpus")
        found.extend(Path(root) / name for name in names if Path(name).suffix in FORMATS)
    return sorted(found)


DatasetFiles = tuple[list[Path], str]
"""A dataset's files and the ``datasets`` builder that reads them."""


def dataset_files(path: str, cwd: str = "") -> DatasetFiles:
    """The regular, non-empty files of one format that ``path`` (a file, or a folder searched below; relative to
    ``cwd`` where given) names, and that format's ``datasets`` builder; each way it cannot be a corpus is one line
    naming the path as given."""
    p = Path(cwd) / path
    files = _walk(p, path) if p.is_dir() else [p]
    if not files or not all(f.is_file() for f in files):
        kind = "" if not p.exists() or p.is_dir() or p.is_file() else " (not a regular file)"
        raise UserError(f"--dataset {path}: no .txt/.json/.jsonl/.parquet/.csv files found{kind}")
    kinds = {FORMATS.get(f.suffix) for f in files}
    if None in kinds or len(kinds) != 1:
        raise UserError(f"--dataset {path}: use files of one format among {', '.join(sorted(FORMATS))}")
    if all(f.stat().st_size == 0 for f in files):
        raise UserError(f"--dataset {path}: empty (no text to train on)")
    return files, kinds.pop() or ""
