"""Load the JSON templates and presets kept in ``ds_configs/``."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from dsbench.errors import UserError
from dsbench.paths import shipped_dir


def templates_dir() -> Path:
    """``ds_configs/templates``: one JSON fragment per feature."""
    return shipped_dir("ds_configs") / "templates"


@cache
def _load(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def load_template(name: str) -> dict[str, Any]:
    """A fresh dict parsed from ``ds_configs/templates/<name>.json``."""
    path = templates_dir() / f"{name}.json"
    if not path.is_file():
        raise UserError(f"template {name!r} not found in {templates_dir()}")
    return json.loads(_load(str(path)))


def presets() -> dict[str, dict[str, Any]]:
    """Preset name -> render flag values, from ``ds_configs/presets.json``."""
    return json.loads(_load(str(shipped_dir("ds_configs") / "presets.json")))


def preset(name: str) -> dict[str, Any]:
    """Flag values of one preset; unknown names list the known ones."""
    known = presets()
    if name not in known:
        raise UserError(f"--preset {name!r} is not a preset; choose one of: {', '.join(known)}")
    return dict(known[name])
