"""Validation findings: what is wrong, where (JSON path) and how to fix it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One problem found in a config."""

    severity: Severity
    """``error``: DeepSpeed rejects it (now or late) or it cannot mean anything; ``warning``: silently ignored."""
    code: str
    """Stable identifier, e.g. ``unknown-key`` or ``batch-mismatch`` (see docs/errors.md)."""
    path: str
    """Dotted JSON path of the offending value ("" for the whole file)."""
    message: str
    """What is wrong, with the numbers involved."""
    fix: str = ""
    """How to fix it."""

    def line(self) -> str:
        """One-line human rendering."""
        where = self.path or "(file)"
        fix = f" Fix: {self.fix}" if self.fix else ""
        return f"{self.severity.upper():7} {where}: {self.message}.{fix}"

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form for ``--json``."""
        return asdict(self)


def has_errors(findings: list[Finding]) -> bool:
    """True when any finding is an error."""
    return any(f.severity == "error" for f in findings)
