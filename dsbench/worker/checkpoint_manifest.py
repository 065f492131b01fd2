"""A checkpoint as a rank opens it: located and typed (dsbench/checkpoints.py), then every pickle in it checked for
globals that could run code, before anything loads it."""

from __future__ import annotations

import os
from pathlib import Path

from dsbench.checkpoints import Manifest, locate
from dsbench.worker import safe_load


def resolve(path: str | os.PathLike[str]) -> tuple[Path, Manifest]:
    """The checkpoint at ``path`` (its folder or one tag folder) and its manifest, its pickles checked
    (:func:`safe_load.check_folder`)."""
    target, manifest = locate(path)
    safe_load.check_folder(target)
    return target, manifest
