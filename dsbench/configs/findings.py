"""Validation findings: what is wrong, where (JSON path) and how to fix it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

Severity = Literal["error", "warning"]
MAX_TEXT = 400
MAX_PATH = 200


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
    becomes: str = ""
    """An ``unresolved-auto``'s value under the HF TrainingArguments' defaults, as JSON ("" where none is known)."""

    def __post_init__(self) -> None:
        # a value quoted from the file (a 1 MB string, a key of 10,000 characters) never makes a finding longer than
        # a few lines: what is reported is bounded as what is read is
        for name, limit in (("path", MAX_PATH), ("message", MAX_TEXT), ("fix", MAX_TEXT)):
            text = getattr(self, name)
            if len(text) > limit:
                object.__setattr__(self, name, text[: limit - 20] + f"... ({len(text):,} chars)")

    def text(self) -> str:
        """Where, what and the fix, without the severity: a launch's note says a warning so."""
        fix = f" Fix: {self.fix}" if self.fix else ""
        return f"{self.path or '(file)'}: {self.message.rstrip('.')}.{fix}"  # DeepSpeed's own messages end in one

    def line(self) -> str:
        """One-line human rendering."""
        return f"{self.severity.upper():7} {self.text()}"

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form for ``--json`` (``becomes`` only where known)."""
        return {key: value for key, value in asdict(self).items() if key != "becomes" or value}


def has_errors(findings: list[Finding]) -> bool:
    """True when any finding is an error."""
    return any(f.severity == "error" for f in findings)


def refused_for_launch(source: str, findings: list[Finding]) -> str:
    """Why a launch refuses a config, DeepSpeed's or accelerate's: its errors under the file's name, before any
    rank starts."""
    return f"{source} is invalid for this launch:\n" + "\n".join(f.line() for f in findings if f.severity == "error")


def launch_notes(source: str, findings: list[Finding]) -> list[str]:
    """A launched config's warnings as notes, said as validate says them, but its "auto" values in one line: the
    launch fills them (until 2026-12-02 a Trainer config's 15 "auto" keys were 15 notes, each telling the user to
    fill it)."""
    auto = [f.path for f in findings if f.code == "unresolved-auto"]
    filled = ([f"{source}: {len(auto)} 'auto' value{'s' * (len(auto) > 1)} filled on the ranks from the worker's "
               f"flags, as the HF Trainer fills them: {', '.join(auto)}"] if auto else [])
    return [f"{source}: {f.text()}" for f in findings if f.code != "unresolved-auto"] + filled


def finding_lines(findings: list[Finding]) -> list[str]:
    """validate's lines: one a finding, but two or more "auto" values in one line where the first stood, each with
    what the Trainer's defaults make it (until 2026-12-03 a Trainer config's 15 "auto" keys were 15 ERROR lines
    repeating one explanation and one fix)."""
    auto = [f for f in findings if f.code == "unresolved-auto"]
    if len(auto) < 2:
        return [f.line() for f in findings]
    keys = ", ".join(f.path + (f" ({f.becomes})" if f.becomes else "") for f in auto)
    head = auto[0]
    said = (f"{head.severity.upper():7} {len(auto)} values are 'auto': {keys}; "
            + ("the HF Trainer, accelerate or `dsbench launch --config` fills them" if head.severity == "warning" else
               "only the HF Trainer and accelerate fill them; plain DeepSpeed stops on some and quietly uses its own "
               "default for others")
            + f"; in brackets what TrainingArguments' defaults make them. Fix: {head.fix}")
    return [said if f is head else f.line() for f in findings if f is head or f.code != "unresolved-auto"]
