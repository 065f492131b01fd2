"""Read a config file the way DeepSpeed does, and report how it differs from strict JSON.

DeepSpeed loads config files with ``hjson`` and rejects duplicate keys
(``deepspeed/runtime/config.py``); the HF Trainer and accelerate use ``json.load``. A file that
only hjson accepts (comments, trailing commas, unquoted keys) works with ``deepspeed`` but fails
with the Trainer, so it is a warning; a file neither accepts is an error with line and column.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dsbench.configs.findings import Finding
from dsbench.configs.overrides import iter_leaves
from dsbench.errors import UserError
from dsbench.io import check_depth, loads_json, read_text


class DuplicateKey(ValueError):
    """A key appears twice in one JSON object."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


def parse_config_text(text: str, source: str) -> tuple[Any, list[Finding]]:
    """Parse config text; returns ``(config or None, findings)``."""
    if not text.strip():
        return None, [Finding(severity="error", code="empty-file", path="", message=f"{source} is empty",
                              fix="write the config's JSON object into it")]
    try:
        config = json.loads(text, object_pairs_hook=_no_duplicates)
        check_depth(config, source)
        if config is None:  # JSON null: not a config, though every check of an object's keys would pass it
            return None, [Finding(severity="error", code="not-an-object", path="", message=f"{source}: a DeepSpeed "
                                  "config is a JSON object, got null", fix="write the settings as { ... }")]
        shell = _placeholders(config, _SHELL) if isinstance(config, dict) else []
        return (None, shell) if shell else (config, [])
    except DuplicateKey as exc:
        return None, [Finding(severity="error", code="duplicate-key", path=str(exc),
                              message=f"key '{exc}' appears twice in one object; DeepSpeed refuses the file",
                              fix="keep one of the two")]
    except json.JSONDecodeError as exc:
        strict_error = exc
    except (RecursionError, ValueError, UserError):  # too deep, or a number beyond Python's 4300 digits
        try:
            loads_json(text, source)
        except UserError as why:
            return None, [Finding(severity="error", code="unreadable-json", path="", message=str(why),
                                  fix="correct the file")]
    return _not_strict(text, source, strict_error)


def _not_strict(text: str, source: str, strict_error: json.JSONDecodeError) -> tuple[Any, list[Finding]]:
    """Text that strict JSON refused: what DeepSpeed's own loader (hjson) reads (a warning: the HF Trainer and
    accelerate read it with json.load), else malformed at the strict parser's line and column."""
    try:
        import hjson  # DeepSpeed's own loader (a deepspeed dependency)

        loose = hjson.loads(text, object_pairs_hook=_no_duplicates)
        check_depth(loose, source)
    except Exception:  # hjson's own errors, RecursionError, the depth check: not hjson either
        loose = None
    at = f"{source}:{strict_error.lineno}:{strict_error.colno}"
    if isinstance(loose, dict):
        placeholders = _placeholders(loose)
        if placeholders:
            return None, placeholders
        return json.loads(json.dumps(loose)), [Finding(
            severity="warning", code="not-strict-json", path="",
            message=f"{at}: not strict JSON ({strict_error.msg}); "
                    "DeepSpeed reads it with hjson but the HF Trainer and accelerate (json.load) reject it",
            fix=_loose_fix(text))]
    return None, [Finding(severity="error", code="malformed-json", path="",
                          message=f"{at}: malformed JSON: {strict_error.msg}",
                          fix=f"correct line {strict_error.lineno}, column {strict_error.colno}")]


def _loose_fix(text: str) -> str:
    """What makes text that hjson reads strict JSON: no UTF-8 byte-order mark (a Windows editor's; json.load stops at
    it, hjson skips it), no comments or trailing commas, quoted keys."""
    loose = "remove comments/trailing commas and quote keys"
    if not text.startswith("\ufeff"):
        return loose
    try:
        json.loads(text[1:])
    except ValueError:
        return f"save it without the UTF-8 byte-order mark, and {loose}"
    return "save it without the UTF-8 byte-order mark (UTF-8, not UTF-8 with BOM)"


# An unquoted upper-case token or shell variable where a value belongs (``"train_batch_size": CONFIG_BATCH_SIZE,``,
# ``"stage": ${zero_stage},``) is a template placeholder; hjson reads it as the string "CONFIG_BATCH_SIZE," up to the
# end of the line. A quoted value that is a shell variable alone (``"device": "$OFFLOAD_DEVICE"``, from a heredoc
# that a script expands) is one too, in strict JSON as well.
_SHELL = re.compile(r"^(\$\{?[A-Za-z_][A-Za-z0-9_]*\}?),?$")
_PLACEHOLDER = re.compile(rf"^([A-Z][A-Z0-9_]{{2,}}),?$|{_SHELL.pattern}")


def _placeholders(config: dict[str, Any], pattern: re.Pattern[str] = _PLACEHOLDER) -> list[Finding]:
    found = []
    for path, value in iter_leaves(config):
        match = pattern.match(value) if isinstance(value, str) else None
        if match:
            token = next(group for group in match.groups() if group)
            found.append(Finding(severity="error", code="template-placeholder", path=path,
                                 message=f"unfilled template placeholder {token} (this file is a template, "
                                         "not a config)",
                                 fix=f"substitute a value for {token} before using the file"))
    return found


def load_config(path: str) -> tuple[Any, list[Finding]]:
    """Read and parse a config file (missing/unreadable files are a :class:`UserError`)."""
    return parse_config_text(read_text(path, "config"), path)


def load_config_strict(path: str) -> dict[str, Any]:
    """Read a config that must parse (for render/launch ``--config``): errors become a one-line UserError."""
    text = read_text(path, "config")
    from dsbench.configs.accelerate import looks_like_accelerate

    if looks_like_accelerate(path, text):
        raise UserError(f"{path} is an accelerate config, not a DeepSpeed JSON: `dsbench validate` and "
                        "`dsbench explain` read it; give the DeepSpeed file it names (deepspeed_config_file)")
    config, findings = parse_config_text(text, path)
    errors = [f for f in findings if f.severity == "error"]
    if errors or not isinstance(config, dict):
        detail = errors[0].message if errors else "expected a JSON object"
        raise UserError(detail if detail.startswith(path) else f"{path}: {detail}")
    return config
