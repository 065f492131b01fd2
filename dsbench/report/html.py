"""One self-contained HTML report: plots inlined as base64 PNG, tables, each cell's exact command and config."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

from dsbench.report.render import TEXT_COLUMNS, cell_text, columns_for, method_note

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem auto;max-width:1200px;color:#222}
table{border-collapse:collapse;font-size:.85rem;margin:1rem 0}th,td{border:1px solid #ccc;padding:.3rem .5rem}
th{background:#f2f2f2}td.num{text-align:right;font-variant-numeric:tabular-nums}tr.failed td{background:#fde8e8}
img{max-width:100%;border:1px solid #eee;margin:.5rem 0}pre{background:#f7f7f7;padding:.6rem;overflow-x:auto;
font-size:.8rem}details{margin:.4rem 0}.note{color:#555;font-size:.85rem}
ul.verdict{font-size:1.05rem;line-height:1.5}li.sub{list-style:circle;margin-left:1.5rem}
"""


def _table(rows: list[dict[str, Any]]) -> str:
    columns = columns_for(rows)
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in columns)
    body = []
    for row in rows:
        cells = "".join(
            f"<td class='{'' if k in TEXT_COLUMNS else 'num'}'>"
            f"{html.escape(cell_text(row, k, f))}</td>" for k, _, f in columns)
        body.append(f"<tr class='{'' if row['status'] == 'ok' else 'failed'}'>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _cells(rows: list[dict[str, Any]]) -> str:
    parts = []
    for row in rows:
        for run in row["runs"]:
            status = run["status"] + (f": {run['reason']}" if run.get("reason") else "")
            config = json.dumps(run["ds_config"], indent=2) if run.get("ds_config") else "(no DeepSpeed config)"
            launch = (f"<p>launcher command:</p><pre>{html.escape(run['launch_command'])}</pre>"
                if run.get("launch_command") else "")
            parts.append(
                f"<details><summary>{html.escape(run['id'])} - {html.escape(status)}</summary>"
                f"<p>reproduce:</p><pre>{html.escape(run['command'])}</pre>{launch}"
                f"<p>DeepSpeed config:</p><pre>{html.escape(config)}</pre></details>")
    return "".join(parts)


def _verdict_item(line: str) -> str:
    """One verdict line as a list item (its indented lines, which qualify the group's first, nested in style)."""
    return f"<li{' class=sub' if line.startswith('  ') else ''}>{html.escape(line.strip())}</li>"


def write_html(rows: list[dict[str, Any]], plots: dict[str, Path], env: dict[str, Any], path: Path,
               answer: list[str] | None = None) -> Path:
    """Write the report, opening with the verdict (``answer``); returns its path."""
    from dsbench.io import atomic_write_text

    images = "".join(
        f"<h3>{html.escape(name.replace('_', ' '))}</h3>"
        f"<img alt='{html.escape(name)}' src='data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}'>"
        for name, p in plots.items())
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>dsbench report</title>"
            f"<style>{_STYLE}</style></head><body><h1>dsbench report</h1>"
            + (f"<h2>Verdict</h2><ul class='verdict'>{''.join(_verdict_item(line) for line in answer)}</ul>"
               if answer else "") +
            f"<h2>Cells</h2>"
            f"<p class='note'>{html.escape(method_note(rows))}</p>{_table(rows)}<h2>Plots</h2>{images}"
            f"<h2>Cells: commands and configs</h2>{_cells(rows)}"
            f"<h2>Environment</h2><pre>{html.escape(json.dumps(env, indent=2))}</pre></body></html>\n")
    return atomic_write_text(path, page)
