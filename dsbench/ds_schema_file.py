"""The one reader of ``dsbench/data/ds_schema.json`` (written by scripts/gen_ds_schema.py from DeepSpeed itself):
configs/schema.py types it for validation, and zero_section.py reads the ZeRO section's deprecated keys from it."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from dsbench.paths import data_file


@lru_cache(maxsize=1)
def raw_schema() -> dict[str, Any]:
    """The file as JSON, read once per process."""
    return json.loads(data_file("ds_schema.json").read_text(encoding="utf-8"))
