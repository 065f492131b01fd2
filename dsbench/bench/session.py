"""``dsbench compare`` end to end: flags/matrix file -> cells -> runs -> report."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from dsbench import strategies as registry
from dsbench.bench.compare import prepare_out, run_matrix
from dsbench.bench.matrix import ACCEL, Cell, expand, load_matrix_file
from dsbench.bench.progress import RichReporter
from dsbench.errors import InvalidConfig, UserError
from dsbench.spec import DEFAULT_MICRO_BATCH

DEFAULTS: dict[str, Any] = {"strategies": list(registry.DEFAULT_COMPARE), "world_sizes": [2],
                            "micro_batches": [DEFAULT_MICRO_BATCH],
                            "models": ["gpt2-mini"], "repeats": 1, "steps": 20, "warmup": 5, "seq_len": 128,
                            "precision": "fp32", "compile": "off",
                            "fused_optimizer": "auto"}


def matrix_from(matrix_file: str | None, flags: dict[str, Any]) -> dict[str, Any]:
    """Defaults < matrix file < flags."""
    matrix = dict(DEFAULTS)
    if matrix_file:
        matrix.update(load_matrix_file(matrix_file))
    matrix.update({k: v for k, v in flags.items() if v is not None})
    return matrix


def print_report(report: Any) -> None:
    """Terminal table and where each artefact is."""
    from dsbench.console import table_console
    from dsbench.report.render import to_rich_table

    console = table_console()
    console.print(to_rich_table(report.rows))
    for name, path in report.files.items():
        console.print(f"{name:18} {path}")


def check_accelerate_yamls(cells: list[Cell]) -> None:
    """Each ``accel:`` YAML checked for every rank count it will run at, before the first cell starts: a bad YAML
    is one line now, not a failed cell after the others have run."""
    from dsbench.configs import accelerate
    from dsbench.configs.api import validate_accelerate

    for path, world in sorted({(c.accelerate_config, c.world_size) for c in cells if c.accelerate_config}):
        config, findings = validate_accelerate(path, None, overrides={"num_processes": world, "num_machines": 1})
        errors = [f for f in findings if f.severity == "error"]
        if config is None or errors:
            raise InvalidConfig(f"{ACCEL}{path} at {world} ranks: {errors[0].line()}" if errors else path)
        refusal = accelerate.worker_refusal(config, world)
        if refusal:
            raise UserError(f"{ACCEL}{path}: {refusal}")


def predictor(profile: str | None) -> Any:
    """The report's predicted columns from a machine profile (checked here, so a bad file is refused before any
    work), or None without one."""
    if profile is None:
        return None
    from functools import partial

    from dsbench.plan.api import read_profile
    from dsbench.plan.verify import predicted_figures

    read_profile(profile)
    return partial(predicted_figures, profile=profile)


def compare_main(matrix_file: str | None, flags: dict[str, Any], out: str | None, resume: bool,
                 retry_failed: bool, timeout: float, nvme_path: str | None, no_report: bool, quiet: bool,
                 profile: str | None = None) -> int:
    """Run the matrix and report; exit 0 when every cell succeeded, 1 otherwise (results kept either way)."""
    from dsbench.report.build import build_report

    predict = predictor(profile)  # a bad profile is refused before any cell runs
    matrix = matrix_from(matrix_file, flags)
    cells = expand(**matrix)
    check_accelerate_yamls(cells)
    folder = Path(out or f"runs/compare-{time.strftime('%Y%m%d-%H%M%S')}")
    prepare_out(folder, matrix, resume)
    results = run_matrix(cells, folder, resume, retry_failed, timeout, nvme_path, RichReporter(quiet))
    if not no_report:
        print_report(build_report([folder / "cells"], folder / "report", predict=predict))
    failed = [r for r in results if r.status != "ok"]
    print(f"{len(results) - len(failed)}/{len(results)} cells ok; results in {folder}"
          + (f"; report: {folder / 'report' / 'report.html'}" if not no_report else ""))
    interrupted = next((r for r in results if r.status == "interrupted"), None)
    if interrupted:
        print(f"interrupted: {len(cells) - len(results)} cell(s) not started; `dsbench compare --resume --out "
              f"{folder}` runs them and {interrupted.cell.id} again", file=sys.stderr)
        return 130
    return 1 if failed else 0
