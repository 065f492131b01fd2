"""``--set a.b.c=VALUE`` overrides and dotted-path access on nested dicts (pure)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any

from dsbench.errors import UserError
from dsbench.io import MAX_JSON_DEPTH, check_depth

_MISSING = object()


def parse_value(text: str, source: str = "--set") -> Any:
    """JSON-typed value: ``3`` -> int, ``1e-4`` -> float, ``true`` -> bool, ``[1,2]`` -> list, else a string; a
    number too long to read or nesting too deep to walk is refused as a config file's would be."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
    except ValueError:  # int('9' * 5000): beyond Python's 4300 digits
        raise UserError(f"{source}: a number too long to read (over 4,300 digits)") from None
    except RecursionError:
        raise UserError(f"{source}: nested deeper than {MAX_JSON_DEPTH} levels") from None


def parse_set(item: str) -> tuple[list[str], Any]:
    """Split ``a.b.c=VALUE`` into its key path and JSON-typed value, no deeper together than a config file may
    nest (the checks that walk the config would otherwise meet Python's recursion limit)."""
    key, sep, value = item.partition("=")
    parts = key.strip().split(".")
    if not sep or not key.strip() or any(not p for p in parts):
        raise UserError(f"--set {item!r}: expected KEY.PATH=VALUE, e.g. --set zero_optimization.stage=3")
    shown = f"--set {key.strip()[:60]}{'...' if len(key.strip()) > 60 else ''}"
    if len(parts) > MAX_JSON_DEPTH:
        raise UserError(f"{shown}: {len(parts):,} keys deep; a config nests at most {MAX_JSON_DEPTH} levels")
    parsed = parse_value(value.strip(), shown)
    nested: Any = parsed
    for part in reversed(parts):  # the value where it will sit, for the depth the config will have
        nested = {part: nested}
    check_depth(nested, shown)
    return parts, parsed


def get_path(data: dict[str, Any], path: str, default: Any = None) -> Any:
    """Value at a dotted path, or ``default`` if any part is missing."""
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def set_path(data: dict[str, Any], parts: list[str], value: Any) -> None:
    """Set ``value`` at a key path, creating intermediate objects; refuses to replace a non-object."""
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part, _MISSING)
        if child is _MISSING:
            child = node[part] = {}
        if not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            raise UserError(f"--set {'.'.join(parts)}: {where} is {json.dumps(child)}, not an object")
        node = child
    node[parts[-1]] = value


def apply_overrides(config: dict[str, Any], items: Iterable[str]) -> dict[str, Any]:
    """Return a deep copy of ``config`` with every ``--set`` item applied in order."""
    out = copy.deepcopy(config)
    for item in items:
        parts, value = parse_set(item)
        set_path(out, parts, value)
    return out


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Recursive merge: objects merge key by key, anything else in ``extra`` replaces ``base``."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def iter_leaves(data: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    """Yield ``(dotted.path, value)`` for every non-object value (lists are leaves)."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from iter_leaves(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, data
