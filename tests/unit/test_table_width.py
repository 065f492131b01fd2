"""Every table dsbench prints fits 80, 100 and 120 columns: no line wider, no number cut, no cell wrapped (issue 29).

Each table is rendered through the printer its command calls, into a console of the given width; a cell counts as
whole when the row's shown cells appear in order on one line of the output."""

import functools
import io
import json
import re

import pytest
from click.testing import CliRunner
from rich.console import Console
from rich.text import Text

from dsbench.report.build import build_report
from dsbench.report.collect import collect
from dsbench.report.grid import Col, Grid
from dsbench.report.tables import check_grid, doctor_grid, plan_grid, tune_grids, verify_grid, whatif_grid
from dsbench.report.terminal import compare_grid
from tests.conftest import DATA

WIDTHS = (80, 100, 120)
COMPARE = DATA / "runs" / "compare-cpu"
LONG_NAMES = DATA / "runs" / "cpu-calibrated" / "oos-20261126-0738-gpt2-mini" / "compare"


@functools.cache
def _plan() -> dict:
    from dsbench.cli import cli

    out = CliRunner().invoke(cli, ["plan", "--model", "llama-7b", "--gpus", "16", "--nodes", "2", "--json"]).output
    return json.loads(out)


def _tune() -> dict:
    def layout(name, predicted, measured):
        return {"layout": name, "fits": True, "predicted_tokens_per_s": predicted, "corrected_tokens_per_s": None,
                "measured_tokens_per_s": measured, "status": "ok" if measured else "not run"}

    return {"layouts": [layout("torch_pipe2_interleaved2 mb2 x2 ckpt", 9000, 8000), layout("zero1 mb2 x2", 8800,
                                                                                         8400)],
            "speed": [{"layout": "zero1 mb2 x2", "tokens_per_s": 8400}, {"layout": "zero1 mb2 x2 +compile",
                                                                        "tokens_per_s": 9100}],
            "runs_used": 2, "winner": {"layout": "zero1 mb2 x2", "tokens_per_s": 8400, "command": "dsbench launch"}}


def _verify() -> list:
    from dsbench.rows import VerifyRow

    ok = VerifyRow(candidate="zero3_offload", folder="runs/plan-verify/zero3_offload", status="ok", accounting="fp32",
                   predicted_model_state_bytes=3e7, measured_model_state_bytes=2.9e7, model_state_error=0.034,
                   measured_peak_memory_bytes=9.9e8, memory_kind="rss", predicted_step_s=0.51, measured_step_s=0.62,
                   step_error=-0.18)
    return [ok, VerifyRow(candidate="ddp", folder="runs/plan-verify/ddp", status="failed")]


def _doctor() -> list:
    from dsbench.doctor import Row

    return [Row("node-a", "versions", "ok", "python 3.11.7 dsbench 0.1.0 torch 2.13.0+cpu deepspeed 0.19.8", ""),
            Row("node-b", "ssh", "FAIL", "Permission denied (publickey)", "ssh-copy-id node-b")]


@functools.cache
def grids() -> dict[str, Grid]:
    from dsbench.plan.replay import as_json, replay
    from tests.conftest import ROOT

    built = {"compare": compare_grid(collect([COMPARE])), "compare-long-names": compare_grid(collect([LONG_NAMES])),
             "plan": plan_grid(_plan(), 12), "verify": verify_grid(_verify()), "doctor": doctor_grid(_doctor())}
    built["tune"], built["tune-speed"] = tune_grids(_tune())
    from dsbench.bench.whatif import Row
    from dsbench.plan.selfcheck import check_record

    built["whatif"] = whatif_grid([Row("unshaped", "torch_pipe2_interleaved2", "ok", 12345.6, 0.123, None, 1, None),
                                   Row("20mbit", "zero3", "failed", None, None, None, None, 1.234)])
    checked = check_record([{"strategy": "torch_pipe2_interleaved2", "family": "pipeline", "measured_step_ms": 1234.5,
                             "predicted_step_ms": 1000.0}, {"strategy": "zero3", "family": "zero3",
                                                            "measured_step_ms": 60.0, "predicted_step_ms": 66.0}])
    built["check"] = check_grid({**checked, "steps": 12, "warmup": 3})
    replayed = as_json(replay([str(ROOT / "tests" / "data" / "oracles" / "korthikanti2022-table5.csv")]))
    from dsbench.report.replay_table import replay_grids

    built["replay"], built["replay-stats"] = replay_grids(replayed)
    return built


NAMES = ("compare", "compare-long-names", "plan", "verify", "doctor", "tune", "tune-speed", "replay",
         "replay-stats", "whatif", "check")


def render(grid: Grid, width: int, wide: bool = False) -> str:
    buffer = io.StringIO()
    grid.print(Console(file=buffer, width=width, highlight=False), wide)
    return buffer.getvalue()


def whole_rows(grid: Grid, text: str, keep: list[int]) -> list[str]:
    """The rows whose shown cells are not all, in order, on one line of ``text``."""
    lines = text.splitlines()
    broken = []
    for cells in grid.rows:
        shown = [cells[i].plain if isinstance(cells[i], Text) else cells[i] for i in keep if cells[i]]  # no markup
        pattern = r"\s+".join(re.escape(cell) for cell in shown)
        if not any(re.search(pattern, line) for line in lines):
            broken.append(" | ".join(shown))
    return broken


def test_every_grid_is_named():
    assert sorted(grids()) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("width", WIDTHS)
def test_every_table_fits_without_cutting_or_wrapping_a_cell(name, width):
    grid = grids()[name]
    text = render(grid, width)
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    assert "…" not in text
    assert not whole_rows(grid, text, grid.shown(width))


@pytest.mark.parametrize("name", NAMES)
def test_wide_shows_every_column_uncut(name):
    grid = grids()[name]
    text = render(grid, 80, wide=True)
    assert "…" not in text and not whole_rows(grid, text, list(range(len(grid.columns))))
    assert "more column" not in text


def test_compare_shows_the_columns_that_decide():
    grid = grids()["compare"]
    headers = lambda width: [grid.columns[i].header for i in grid.shown(width)]  # noqa: E731
    assert headers(80) == ["strategy", "tokens/s (range)", "vs best", "MiB/rank", "status"]
    assert headers(100) == ["strategy", "ranks", "tokens/s (range)", "vs best", "MiB/rank", "MFU %", "loss", "status"]
    assert "more columns with --wide" in render(grid, 100)


def test_the_plan_keeps_its_reasons_as_numbered_notes():
    grid, plan = grids()["plan"], _plan()
    text = render(grid, 100)
    first = plan["candidates"][0]
    assert f"1. {first['reason']}" in " ".join(text.split()) or first["reason"] in grid.notes
    assert [grid.columns[i].header for i in grid.shown(100)][:3] == ["#", "strategy", "tp/pp/dp mb"]


def test_the_columns_dropped_first_are_the_least_important():
    grid = Grid([Col("name", 80, left=True), Col("a", 80), Col("b", 100), Col("c", 100), Col("d", 0)])
    grid.add("x" * 60, "1" * 10, "2" * 10, "3" * 10, "4")
    assert grid.shown(120) == [0, 1, 2, 3]
    assert grid.shown(100) == [0, 1, 2]  # c (tier 100, rightmost) goes first
    assert grid.shown(80) == [0, 1]  # below 100 columns, only the 80 tier
    assert grid.shown(80, wide=True) == [0, 1, 2, 3, 4]


def test_print_report_fits_100_columns(tmp_path, monkeypatch, capsys):
    import shutil

    compare = tmp_path / "compare"
    shutil.copytree(LONG_NAMES, compare)
    built = build_report([compare], tmp_path / "report", plots=False)
    monkeypatch.setenv("COLUMNS", "100")
    from dsbench.report.terminal import print_report

    print_report(built)
    out = capsys.readouterr().out
    table = out[out.index("strategies compared"):out.index("markdown ")]
    assert max(len(line.rstrip()) for line in table.splitlines()) <= 100 and "…" not in out
