"""Seconds per test file from pytest's ``--durations=0`` output (setup, call and teardown summed), slowest first.

    python scripts/durations_by_file.py pytest.log [other.log]   # one column per log, as a Markdown table

The figures are pytest's own per-phase wall-clock timings; the total of a file is what its tests took, session
fixtures included where their setup ran (the first test to use one pays it).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import script_args

LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s (?:setup|call|teardown)\s+(\S+?)::")


def by_file(text: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for line in text.splitlines():
        match = LINE.match(line)
        if match:
            totals[match[2]] = totals.get(match[2], 0.0) + float(match[1])
    return totals


def table(logs: list[Path]) -> str:
    columns = [by_file(log.read_text(errors="replace")) for log in logs]
    files = sorted({f for column in columns for f in column}, key=lambda f: -max(c.get(f, 0.0) for c in columns))
    head = "| file | " + " | ".join(f"{log.name} (s)" for log in logs) + " |"
    rows = [head, "|---|" + "---:|" * len(logs)]
    rows += [f"| {f} | " + " | ".join(f"{c[f]:.0f}" if f in c else "-" for c in columns) + " |" for f in files]
    rows.append("| **total** | " + " | ".join(f"{sum(c.values()):.0f}" for c in columns) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    logs = script_args.parse(__doc__, "PYTEST_LOG", required=True)
    sys.exit(script_args.run(lambda: print(table([Path(arg) for arg in logs]))))
