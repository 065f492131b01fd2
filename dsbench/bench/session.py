"""``dsbench compare`` end to end: flags/matrix file -> cells -> runs -> report."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dsbench.bench.compare import CellResult, prepare_out, run_matrix
from dsbench.bench.matrix import ACCEL, DEFAULTS, Cell, accelerate_yaml_of, expand
from dsbench.bench.matrix_file import load_matrix_file
from dsbench.bench.progress import RichReporter
from dsbench.configs.precision import check_precision
from dsbench.envinfo import local_gpu_count
from dsbench.errors import InvalidConfig, UserError
from dsbench.local_ranks import check_ranks_here


def matrix_from(matrix_file: str | None, flags: dict[str, Any]) -> dict[str, Any]:
    """Defaults < matrix file < flags."""
    matrix = dict(DEFAULTS)
    if matrix_file:
        matrix.update(load_matrix_file(matrix_file))
    matrix.update({k: v for k, v in flags.items() if v is not None})
    return matrix


def check_accelerate_yamls(cells: list[Cell]) -> list[Cell]:
    """Each ``accel:`` YAML checked for every rank count it will run at, before the first cell starts: a bad YAML
    is one line now, not a failed cell after the others have run. Returns the cells, an ALST YAML's at the
    accumulation that keeps compare's global batch (:func:`_batch_multiple`)."""
    from dsbench.configs import accelerate_worker
    from dsbench.configs.api import validate_accelerate

    multiple = {}
    for path, world in sorted({(c.accelerate_config, c.world_size) for c in cells if c.accelerate_config}):
        config, findings = validate_accelerate(path, None, overrides={"num_processes": world, "num_machines": 1})
        errors = [f for f in findings if f.severity == "error"]
        if config is None or errors:
            raise InvalidConfig(f"{ACCEL}{path} at {world} ranks: {errors[0].line()}" if errors else path)
        refusal = accelerate_worker.worker_refusal(config, world)
        if refusal:
            raise UserError(f"{ACCEL}{path}: {refusal}")
        multiple[path] = _batch_multiple(config, path)
    return [replace(c, grad_accum=c.grad_accum * multiple[c.accelerate_config]) if c.accelerate_config else c
            for c in cells]


def _batch_multiple(config: dict[str, Any], path: str) -> int:
    """The accumulation an ``accel:`` cell takes so that its global batch is every cell's, micro-batch x world
    samples: an ALST YAML's Ulysses groups of sp ranks share each sample (accelerate: ``train_batch_size = micro x
    accumulation x processes // sp_size``), so sp micro-steps, as a native ``ulyssesN`` cell accumulates N
    (strategies.model_parallel). A YAML that settles its own accumulation (inline, or in the DeepSpeed file it
    names) keeps it: its settings stand, as in its own launch."""
    from dsbench.configs import accelerate
    from dsbench.configs.api import ds_file_of
    from dsbench.configs.loader import load_config_strict

    sp = accelerate.ulysses_degree(config)
    if sp == 1:
        return 1
    settled = accelerate.section_keys(config, "deepspeed_config").get("gradient_accumulation_steps")
    ds_path = ds_file_of(config, path)[0]
    if ds_path:  # checked above as the launch checks it (an object, or validation refused it)
        settled = load_config_strict(ds_path).get("gradient_accumulation_steps")
    return 1 if settled not in (None, "auto") else sp


@dataclass(frozen=True, slots=True)
class CompareRun:
    """A finished (or interrupted) matrix: its folder, every cell, and the result of each cell that ran."""

    folder: Path
    cells: list[Cell]
    results: list[CellResult]


def run_compare(matrix_file: str | None, flags: dict[str, Any], out: str | None, resume: bool,
                retry_failed: bool, timeout: float, nvme_path: str | None, quiet: bool) -> CompareRun:
    """Expand and check the matrix, then run its cells (results kept whatever happens)."""
    matrix, cells, folder = checked_matrix(matrix_file, flags, out)
    prepare_out(folder, matrix, resume)
    results = run_matrix(cells, folder, resume, retry_failed, timeout, nvme_path, RichReporter(quiet))
    return CompareRun(folder, cells, results)


def checked_matrix(matrix_file: str | None, flags: dict[str, Any],
                   out: str | None) -> tuple[dict[str, Any], list[Cell], Path]:
    """The matrix, its cells and its folder, checked as a run checks them before its first cell starts (a dry run
    stops here)."""
    matrix = matrix_from(matrix_file, flags)
    if matrix.get("hostfile"):  # by the file it names: `--resume` with ./h for h is the same matrix (as tune's)
        matrix["hostfile"] = os.path.abspath(matrix["hostfile"])
    cells = expand(**matrix)
    here = [cell.world_size for cell in cells if not cell.hostfile]
    if here:  # the cells that run on this machine's ranks, refused now rather than each failing in turn
        check_ranks_here(max(here), "--world-sizes")
    check_precision(matrix["precision"], cpu=local_gpu_count() == 0)  # as each cell's launch would
    cells = check_accelerate_yamls(cells)
    # a user's YAMLs by the files they name once they are checked (errors name the path as typed): `--resume` with
    # accel:$PWD/a.yaml for accel:a.yaml is the same matrix
    matrix["strategies"] = [s if (yaml := accelerate_yaml_of(s)) is None else ACCEL + os.path.abspath(yaml)
                            for s in matrix["strategies"]]
    return matrix, cells, Path(out or f"runs/compare-{time.strftime('%Y%m%d-%H%M%S')}")
