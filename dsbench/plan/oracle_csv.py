"""The oracle schema's CSV (``../shared/oracles``, tests/data/oracles/README.md): its columns, and its rows read
typed, a file or cell that does not follow it being one line naming file, row and column (pure, stdlib only)."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsbench.errors import UserError
from dsbench.io import read_count, read_text

COLUMNS = ("source,row,model,arch,layers,hidden,heads,kv_heads,ffn,vocab,seq_len,gpu,gpus,gpus_per_node,intra_gbs,"
           "inter_gbs,strategy,tp,pp,cp,schedule,virtual_stages,micro_batch,global_batch,recompute,"
           "sequence_parallel,precision,compile,measured_step_s,measured_tokens_per_s_per_gpu,measured_peak_mem_gib,"
           "note").split(",")
OPTIONAL = ("head_dim", "qk_norm")
"""Columns a table may add after the schema's (dsbench's own runs write them, scripts/runs_to_oracle.py): a head
width where the model states one other than hidden / heads, and 1 for Qwen3's query/key norms; empty or absent:
hidden / heads, none."""
INTS = ("row", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq_len", "gpus", "gpus_per_node", "tp",
        "pp", "cp", "virtual_stages", "micro_batch", "global_batch", "head_dim")
FLOATS = ("intra_gbs", "inter_gbs", "measured_step_s", "measured_tokens_per_s_per_gpu", "measured_peak_mem_gib")
FLAGS = ("sequence_parallel", "compile", "qk_norm")
REQUIRED = ("source", "row", "arch", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq_len", "gpu",
            "gpus", "gpus_per_node", "strategy", "tp", "pp", "cp", "global_batch", "recompute", "precision")


@dataclass(frozen=True)
class OracleRow:
    """One published run: its columns, typed (None where the source gives no value)."""

    values: dict[str, Any]
    path: str

    @property
    def source(self) -> str:
        return self.values["source"]

    @property
    def row(self) -> int:
        return self.values["row"]


def typed_row(path: Path, line: int, raw: dict[str, str]) -> dict[str, Any]:
    """One row of the schema, its text typed column by column; a bad cell is one line naming row and column."""
    out: dict[str, Any] = {}
    for column in (*COLUMNS, *OPTIONAL):
        text = (raw.get(column) or "").strip()
        where = f"{path} row {line} column {column}"
        shown = repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text):,} characters)"
        if not text:
            if column in REQUIRED:
                raise UserError(f"{where}: empty, and the model needs it")
            out[column] = None
        elif column in INTS:
            count = read_count(text)  # at most 15 digits: no run had more GPUs or tokens
            if count is None or count == 0 and column != "row":
                raise UserError(f"{where}: {shown} is not a positive whole number")
            out[column] = count
        elif column in FLOATS:
            try:
                value = float(text)
            except ValueError:
                raise UserError(f"{where}: {shown} is not a number") from None
            if not (value > 0 and math.isfinite(value)):  # nan and inf are floats too
                raise UserError(f"{where}: {shown} must be a finite number above 0")
            out[column] = value
        elif column in FLAGS:
            if text not in ("0", "1"):
                raise UserError(f"{where}: {shown}: use 0 or 1")
            out[column] = text == "1"
        else:
            out[column] = text
    return out


def read_rows(paths: list[Path]) -> list[OracleRow]:
    """Every row of the files, typed; a file or row that does not follow the schema is one line naming it."""
    rows: list[OracleRow] = []
    for path in paths:
        # a regular UTF-8 file only (a FIFO would block); a spreadsheet saves its CSV with a byte-order mark first
        text = read_text(path, "--replay").removeprefix("\ufeff")
        reader = csv.DictReader(text.splitlines())
        header = reader.fieldnames or []
        missing = [c for c in COLUMNS if c not in header]
        first = text.partition("\n")[0]
        other = next((sep for sep in (";", "\t") if first.count(sep) > first.count(",")), None)
        if missing and other:  # a spreadsheet's locale saved it with another separator
            raise UserError(f"{path}: its columns are separated by {other!r}; the oracle schema's CSV by commas: "
                            "save it as comma-separated")
        if missing:
            raise UserError(f"{path}: not the oracle schema: no column {missing[0]} (the schema's header: "
                            f"{','.join(COLUMNS)})")
        before = len(rows)
        for line, raw in enumerate(reader, start=2):
            if None in raw:
                raise UserError(f"{path} row {line}: more cells than the header's {len(header)} columns")
            rows.append(OracleRow(typed_row(Path(path), line, raw), str(path)))
        if len(rows) == before:
            raise UserError(f"{path}: the header and no row: add the runs to replay, one per line")
    return rows
