"""A compare cell's status file, ``cell.json``, as a typed record: the one reader of it (stdlib only).

compare writes the file when a cell starts and again when it ends (:func:`dsbench.bench.compare.run_cell`).
report, tune and compare's ``--resume`` read it through :func:`read_cell`. A results folder may come from anyone
and may have been edited by hand: a field that is missing or of another type is one line naming it, never a
figure printed from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsbench.errors import UserError
from dsbench.record_fields import count_field, flag_field, number_field, text_field

CELL_FILE = "cell.json"
STATUSES = ("running", "ok", "failed", "timeout", "interrupted")
"""What compare writes: ``running`` at the start, one of the others at the end."""
FINISHED = ("ok", "failed", "timeout")
"""A cell that ran to its end: ``--resume`` keeps it (an interrupted or still-running one runs again)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CellRecord:
    """A cell as compare ran it: the fields of its definition that readers use, the command and the outcome."""

    strategy: str
    world_size: int
    micro_batch: int
    model: str
    repeat: int
    compile: bool
    fused_optimizer: bool
    id: str
    command: str
    status: str
    reason: str | None
    started: float | None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @classmethod
    def from_dict(cls, data: Any, where: str) -> CellRecord:
        if not isinstance(data, dict):
            raise UserError(f"{where}: a cell status is a JSON object, got {type(data).__name__}")
        cell = data.get("cell")
        if not isinstance(cell, dict):
            raise UserError(f"{where}: cell is {cell!r}, not the cell's definition (a JSON object)")
        status = data.get("status")
        if status not in STATUSES:
            raise UserError(f"{where}: status is {status!r}, not one of {', '.join(STATUSES)}")
        ranks, micro = (count_field(cell.get(key), where, f"cell.{key}") for key in ("world_size", "micro_batch"))
        if not ranks or not micro:
            raise UserError(f"{where}: cell.{'world_size' if not ranks else 'micro_batch'} is 0, not at least 1")
        return cls(strategy=text_field(cell.get("strategy"), where, "cell.strategy"), world_size=ranks,
                   micro_batch=micro, model=text_field(cell.get("model"), where, "cell.model"),
                   repeat=count_field(cell.get("repeat", 0), where, "cell.repeat"),
                   compile=flag_field(cell.get("compile", False), where, "cell.compile"),
                   fused_optimizer=flag_field(cell.get("fused_optimizer", False), where, "cell.fused_optimizer"),
                   id=text_field(data.get("id"), where, "id"),
                   command=text_field(data.get("command"), where, "command"),
                   status=status, reason=text_field(data.get("reason"), where, "reason", optional=True),
                   started=number_field(data.get("started"), where, "started", optional=True))


def read_cell(folder: Path) -> CellRecord | None:
    """A run folder's ``cell.json`` as a :class:`CellRecord` (None when there is none: a plain launch's folder); a
    file that is not JSON, or a field missing or of another type, is a one-line UserError naming it."""
    from dsbench.io import read_json

    path = Path(folder) / CELL_FILE
    if not path.exists():
        return None
    return CellRecord.from_dict(read_json(path, "cell status"), str(path))
