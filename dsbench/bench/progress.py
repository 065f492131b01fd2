"""Progress for ``dsbench compare``: an overall bar over cells with ETA, and the running cell's live step."""

from __future__ import annotations

from typing import Any

from dsbench.bench.matrix import Cell


class RichReporter:
    """rich progress bars on a terminal; plain lines otherwise (CI logs)."""

    def __init__(self, quiet: bool = False) -> None:
        from rich.console import Console

        self.console = Console(stderr=True, markup=False)  # cell ids and errors as they are (console.table_console)
        self.quiet = quiet
        self.progress: Any = None

    def start(self, total: int) -> None:
        if self.quiet or not self.console.is_terminal:
            self.console.print(f"compare: {total} cells")
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=self.console)
        self.progress.start()
        self.overall = self.progress.add_task("cells", total=total)
        self.current = self.progress.add_task("", total=None, visible=False)

    def skipped(self, cell: Cell, status: str) -> None:
        self._line(f"skip {cell.id} ({status} earlier)")
        if self.progress:
            self.progress.advance(self.overall)

    def begin(self, cell: Cell) -> None:
        self._line(f"run  {cell.id}")
        if self.progress:
            self.progress.update(self.current, description=f"  {cell.id}", total=cell.steps, completed=0,
                                 visible=True)

    def step(self, cell: Cell, record: dict[str, Any]) -> None:
        if self.progress:
            self.progress.update(self.current, completed=record["step"] + 1,
                                 description=f"  {cell.id}  loss {record['loss']:.3f}  "
                                             f"{record['timed_tokens_per_s']:,.0f} tok/s (timed region)")

    def end(self, cell: Cell, status: str, reason: str | None) -> None:
        self._line(f"{status:4} {cell.id}" + (f": {reason}" if reason else ""))
        if self.progress:
            self.progress.advance(self.overall)
            self.progress.update(self.current, visible=False)

    def stop(self) -> None:
        if self.progress:
            self.progress.stop()

    def _line(self, text: str) -> None:
        if self.progress:
            self.progress.console.print(text)
        elif not self.quiet or not text.startswith("run"):
            self.console.print(text)
