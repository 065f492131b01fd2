"""compare's matrix file (``--matrix``): YAML or JSON with the keys of compare's flags, read bounded and typed
(its values are checked with the flags', by matrix.expand)."""

from __future__ import annotations

import difflib
import json
from typing import Any

from dsbench.errors import UserError


def load_matrix_file(path: str) -> dict[str, Any]:
    """A YAML or JSON matrix file: keys strategies, world_sizes, micro_batches, models, repeats, steps, ..."""
    from dsbench.configs.yaml_reader import YamlProblem, load_yaml
    from dsbench.io import loads_json, read_text

    text = read_text(path, "matrix file")
    if path.endswith((".yaml", ".yml")):
        try:
            data = load_yaml(text, path)  # bounded: aliases, duplicate keys, overlong numbers
        except YamlProblem as exc:
            raise UserError(f"cannot parse matrix file: {exc}") from None
    else:
        data = loads_json(text, path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: a matrix is a mapping of keys ({', '.join(MATRIX_TYPES)}), got "
                        f"{type(data).__name__}")
    extra = sorted(set(data) - set(MATRIX_TYPES))
    if extra:
        close = difflib.get_close_matches(extra[0], sorted(MATRIX_TYPES), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UserError(f"{path}: unexpected matrix keys {extra}{hint}; allowed: {', '.join(sorted(MATRIX_TYPES))}")
    for key, value in data.items():
        kind = MATRIX_TYPES[key]
        items = value if kind in (list[int], list[str]) else [value]
        item_type = int if kind in (list[int], int) else str
        if (kind in (list[int], list[str]) and not isinstance(value, list)) or not all(
                isinstance(item, item_type) and not isinstance(item, bool) for item in items):
            raise UserError(f"{path}: {key} must be {_KIND_NAMES[kind]}, got {json.dumps(value, default=str)[:60]}")
    return data


# The matrix file's keys and the type of each (the flags of `dsbench compare` with the same names).
MATRIX_TYPES: dict[str, Any] = {"strategies": list[str], "world_sizes": list[int], "micro_batches": list[int],
                                "models": list[str], "repeats": int, "steps": int, "warmup": int, "seq_len": int,
                                "precision": str, "compile": str, "fused_optimizer": str}
_KIND_NAMES = {list[str]: "a list of names", list[int]: "a list of integers", int: "an integer", str: "a name"}
