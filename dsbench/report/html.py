"""One self-contained HTML report from a Jinja2 template (package data, templates/report.html.j2): the verdict,
the table (sorted by clicking a header), the plots inlined as base64 PNG, and each cell's command, config and
environment."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from dsbench.report.render import TEXT_COLUMNS, cell_text, columns_for, method_note
from dsbench.rows import Row, Run

TEMPLATE = "report.html.j2"


def _environment(run: Run) -> str:
    """What the cell ran on, from its header: versions, machine, hosts, git revision, start time."""
    header = run.header
    return json.dumps({"versions": header.versions, "machine": header.machine, "hostnames": list(header.hostnames),
                       "git_rev": header.git_rev, "started_at": header.started_at}, indent=2)


def page_context(rows: list[Row], plots: dict[str, Path], env: dict[str, Any],
                 answer: list[str] | None) -> dict[str, Any]:
    """The template's values, all text (autoescaped by the template)."""
    columns = columns_for(rows)
    runs = [{"id": run.id, "status": run.status + (f": {run.reason}" if run.reason else ""),
             "command": run.command, "launch_command": run.launch_command,
             "config": json.dumps(run.ds_config, indent=2) if run.ds_config else "(no DeepSpeed config)",
             "environment": _environment(run)}
            for row in rows for run in row.runs]
    return {
        "verdict": [{"text": line.strip(), "sub": line.startswith("  ")} for line in answer or []],
        "method": method_note(rows),
        "columns": [{"header": header, "kind": "text" if key in TEXT_COLUMNS else "num"} for key, header, _ in columns],
        "rows": [{"failed": row.status != "ok",
                  "cells": [{"text": cell_text(row, key, fmt), "num": key not in TEXT_COLUMNS}
                            for key, _, fmt in columns]} for row in rows],
        "plots": [{"name": name, "title": name.replace("_", " "),
                   "data": base64.b64encode(path.read_bytes()).decode()} for name, path in plots.items()],
        "runs": runs,
        "env": json.dumps(env, indent=2),
    }


def render_html(context: dict[str, Any]) -> str:
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    environment = Environment(loader=PackageLoader("dsbench.report", "templates"),
                              autoescape=select_autoescape(["j2", "html"]), undefined=StrictUndefined,
                              keep_trailing_newline=True)
    return environment.get_template(TEMPLATE).render(**context)


def write_html(rows: list[Row], plots: dict[str, Path], env: dict[str, Any], path: Path,
               answer: list[str] | None = None) -> Path:
    """Write the report, opening with the verdict (``answer``); returns its path."""
    from dsbench.io import atomic_write_text

    return atomic_write_text(path, render_html(page_context(rows, plots, env, answer)))
