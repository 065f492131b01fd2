"""A results folder edited by hand (a compare cell's cell.json, a step record, summary.json's fields): what compare
writes reads back as the cell it ran (dsbench/cell_record.py); a field of another type is one line naming it, in
report (a corrupt folder), and compare's and tune's --resume run such a cell again rather than trust it."""

from __future__ import annotations

import json

import pytest

from dsbench.bench.compare import read_status
from dsbench.bench.matrix import Cell
from dsbench.bench.tune import finished
from dsbench.cell_record import CellRecord, read_cell
from dsbench.errors import UserError
from dsbench.report.collect import load_run
from tests.conftest import DATA

CELL = Cell(strategy="zero2", world_size=2, micro_batch=2, model="gpt2-tiny", compile=True)


def _written(**changes):
    """cell.json as compare's run_cell writes it at a cell's end, with ``changes`` over its fields (None: removed)."""
    status = {"cell": CELL.to_dict(), "id": CELL.id, "command": "python -m dsbench launch --zero 2", "status": "ok",
              "started": 1795408343.4, "exit_code": 0, "reason": None, "finished": 1795408367.4, "duration_s": 24.0}
    for key, value in changes.items():
        where, name = (status["cell"], key[5:]) if key.startswith("cell_") else (status, key)
        where.pop(name) if value is None else where.__setitem__(name, value)
    return status


def test_what_compare_writes_reads_back_as_the_cell_it_ran(tmp_path):
    (tmp_path / "cell.json").write_text(json.dumps(_written()))
    record = read_cell(tmp_path)
    assert (record.strategy, record.world_size, record.micro_batch, record.model, record.repeat) == (
        CELL.strategy, CELL.world_size, CELL.micro_batch, CELL.model, CELL.repeat)
    assert (record.compile, record.fused_optimizer, record.id, record.status, record.finished) == (
        True, False, CELL.id, "ok", True)
    assert read_cell(tmp_path / "absent") is None  # a plain launch's folder has none
    # a cell from before the speed options existed ran without them
    old = CellRecord.from_dict(_written(cell_compile=None, cell_fused_optimizer=None), "cell.json")
    assert (old.compile, old.fused_optimizer) == (False, False)
    running = CellRecord.from_dict(_written(status="running"), "cell.json")
    assert not running.finished


@pytest.mark.parametrize(("changes", "message"), [
    ({"cell": 0.5}, "cell is 0.5, not the cell's definition (a JSON object)"),
    ({"cell_world_size": "x"}, "cell.world_size is 'x', not a number"),
    ({"cell_world_size": -2}, "cell.world_size is -2, not a count"),
    ({"cell_micro_batch": 0}, "cell.micro_batch is 0, not at least 1"),
    ({"cell_strategy": None}, "cell.strategy is None, not a non-empty string"),
    ({"cell_model": 5}, "cell.model is 5, not a non-empty string"),
    ({"cell_repeat": "a"}, "cell.repeat is 'a', not a number"),
    ({"cell_compile": "yes"}, "cell.compile is 'yes', not true or false"),
    ({"status": 5}, "status is 5, not one of running, ok, failed, timeout, interrupted"),
    ({"status": "weird"}, "status is 'weird', not one of running, ok, failed, timeout, interrupted"),
    ({"id": 5}, "id is 5, not a non-empty string"),
    ({"command": [1]}, "command is [1], not a non-empty string"),
    ({"reason": [1]}, "reason is [1], not a string"),
    ({"started": "noon"}, "started is 'noon', not a number"),
])
def test_a_field_of_another_type_is_one_line_naming_it_and_the_cell_runs_again(tmp_path, changes, message):
    (tmp_path / "cell.json").write_text(json.dumps(_written(**changes)))
    with pytest.raises(UserError) as raised:
        read_cell(tmp_path)
    assert str(raised.value) == f"{tmp_path / 'cell.json'}: {message}"
    # report lists the folder as corrupt with that line; compare's and tune's --resume run the cell again
    run = load_run(tmp_path)
    assert run.status == "corrupt" and message in run.reason
    assert read_status(tmp_path) is None and not finished(tmp_path)


def test_not_an_object_is_one_line(tmp_path):
    (tmp_path / "cell.json").write_text("[1, 2]")
    with pytest.raises(UserError, match=r"cell.json: a cell status is a JSON object, got list$"):
        read_cell(tmp_path)


def test_the_catalogue_fixtures_are_corrupt_for_the_field_edited():
    """tests/data/bad/report_cell: a compare cell of tests/data/runs/compare-cpu with one field edited each."""
    reasons = {folder.name: load_run(folder).reason for folder in (DATA / "bad" / "report_cell").iterdir()}
    assert reasons == {"ranks_text": f"{DATA / 'bad/report_cell/ranks_text/cell.json'}: cell.world_size is 'x', "
                                     "not a number",
                       "status_number": f"{DATA / 'bad/report_cell/status_number/cell.json'}: status is 5, not one "
                                        "of running, ok, failed, timeout, interrupted"}


@pytest.mark.parametrize(("change", "message"), [
    ({"step_time_s": "x"}, "step_time_s is 'x', not a number"),
    ({"step_time_s": None}, "step_time_s is None, not a number"),
    ({"step_time_s": -1}, "step_time_s is -1, not a time (>= 0 s)"),
    ({"warmup": "no"}, "warmup is 'no', not true or false"),
])
def test_a_step_record_edited_into_another_shape_is_one_line_naming_the_step(tmp_path, change, message):
    """The per-step series report plots (metrics.jsonl's step records): until 2026-12-04 a time of another type was
    the Python error's words, and a negative one was plotted."""
    import shutil

    folder = tmp_path / "cell"
    shutil.copytree(DATA / "runs" / "compare-cpu" / "cells" / "zero2-w2-mb2-gpt2-mini-r0", folder)
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    last = max(i for i, line in enumerate(lines) if json.loads(line)["type"] == "step")
    record = json.loads(lines[last])
    lines[last] = json.dumps({**record, **change})
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    run = load_run(folder)
    assert (run.status, run.reason) == ("corrupt", f"{folder / 'metrics.jsonl'}: step {record['step']}'s {message}")
    assert load_run(DATA / "runs" / "compare-cpu" / "cells" / "zero2-w2-mb2-gpt2-mini-r0").status == "ok"


@pytest.mark.parametrize(("field", "value", "message"), [
    ("memory_kind", [1], "memory_kind is [1], not one of rss, cuda_max_allocated"),
    ("memory_kind", "gpu", "memory_kind is 'gpu', not one of rss, cuda_max_allocated"),
    ("reason", 5, "reason is 5, not a string"),
])
def test_a_summary_field_edited_into_another_shape_is_one_line(tmp_path, field, value, message):
    """summary.json's memory_kind and reason (until 2026-12-04 read as written: a list stopped the report with an
    internal error in its table)."""
    import shutil

    folder = tmp_path / "cell"
    shutil.copytree(DATA / "runs" / "compare-cpu" / "cells" / "zero2-w2-mb2-gpt2-mini-r0", folder)
    summary = json.loads((folder / "summary.json").read_text())
    (folder / "summary.json").write_text(json.dumps({**summary, field: value}))
    run = load_run(folder)
    assert (run.status, run.reason) == ("corrupt", f"{folder / 'summary.json'}: {message}")
