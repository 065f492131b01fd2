"""The report's verdict (dsbench/report/verdict.py): what it says follows from the rows, by the documented rules.

Oracles: hand-made rows whose answer is read off their numbers, and the stored compares, whose fastest cell and
within-noise set are worked out here from each run's summary.json (the wall-clock tokens/s), not from the report.
"""

from __future__ import annotations

import json
import statistics

from dsbench.report.collect import collect
from dsbench.report.verdict import verdict
from dsbench.rows import Row
from tests.conftest import DATA


def _row(strategy, tps, low=None, high=None, ok=2, states=10.0, world=2, status="ok", reason=None, **extra):
    return Row(strategy=strategy, base_strategy=strategy, model="m", device="cpu", micro_batch=2, world_size=world,
               status=status, reason=reason, ok=ok if status == "ok" else 0,
               tokens_per_s=tps if status == "ok" else None, tokens_per_s_min=low, tokens_per_s_max=high,
               model_states_mib=states, **{"memory_kind": "rss", **extra})


def test_the_fastest_its_margin_the_ties_and_the_frugal_choice():
    rows = [_row("ddp", 1000, 950, 1050, states=40), _row("zero1", 980, 900, 960, states=20),
            _row("zero3", 700, 690, 710, states=8), _row("fsdp", 850, 840, 860, states=10)]
    lines = verdict(rows)
    assert lines[0].startswith("m on 2 cpu ranks: ddp is fastest at 1,000 tokens/s")
    assert "1.02x the next, zero1" in lines[0]
    assert "min-max tokens/s over repeats overlap): zero1." in lines[1]  # 960 >= 950; fsdp's 860 < 950
    # within 1.25x of ddp's step: zero1 (1.02x), fsdp (1.18x); zero3 (1.43x) is not, though it holds least
    assert "fsdp, 10.0 MiB of model states per rank against 40.0 MiB, at 1.18x the step time" in lines[2]
    assert "zero3" in verdict(rows, max_slowdown=1.5)[2]


def test_one_repeat_uses_the_timed_spread_and_says_so():
    rows = [_row("ddp", 1000, ok=1, timed_tokens_per_s_p10=900.0, timed_tokens_per_s_p90=1100.0),
            _row("fsdp", 800, ok=1, timed_tokens_per_s_p10=700.0, timed_tokens_per_s_p90=880.0)]
    lines = verdict(rows)
    assert lines[1] == ("  No other strategy is within noise of it (their timed p10-p90 tokens/s over the steps would "
                        "overlap; one repeat, so no spread across runs).")


def test_gpu_rows_are_judged_by_peak_memory_and_failures_and_predictions_are_named():
    rows = [_row("ddp", 1000, 990, 1010, memory_kind="cuda_max_allocated", peak_memory_mib=900.0, step_error=0.1),
            _row("zero2", 900, 880, 905, memory_kind="cuda_max_allocated", peak_memory_mib=600.0, step_error=-0.3),
            _row("zero3_nvme", None, status="failed", reason="no --nvme-path")]
    lines = verdict(rows)
    assert "zero2, 600.0 MiB of peak device memory per rank against 900.0 MiB" in lines[2]
    assert "Failed: zero3_nvme x2 (m): no --nvme-path" in lines
    assert lines[-1] == ("The planner (--profile) predicted 2 cells' step time with a median error of 20%, the worst "
                         "30% (zero2).")


def test_the_stored_compare_s_fastest_and_ties_from_its_summaries():
    compare = DATA / "runs" / "cpu-calibrated" / "oos-20261126-0437-llama-tiny" / "compare"
    per_cell: dict[str, list[float]] = {}
    for cell in (compare / "cells").iterdir():
        definition = json.loads((cell / "cell.json").read_text())["cell"]
        label = definition["strategy"] + "+fused" * bool(definition.get("fused_optimizer"))
        summary = json.loads((cell / "summary.json").read_text())
        per_cell.setdefault(label, []).append(summary["throughput"]["tokens_per_s"])
    fastest = max(per_cell, key=lambda name: statistics.median(per_cell[name]))
    ties = [name for name, runs in sorted(per_cell.items(), key=lambda item: -statistics.median(item[1]))
            if name != fastest and max(runs) >= min(per_cell[fastest])]
    lines = verdict(collect([compare]))
    assert f": {fastest} is fastest at {statistics.median(per_cell[fastest]):,.0f} tokens/s" in lines[0]
    assert ties and lines[1].endswith(f"overlap): {', '.join(ties)}.")


def test_a_lone_baseline_is_silent_beside_a_compared_group():
    rows = [_row("single", 500, 490, 510, world=1), _row("ddp", 900, 880, 920), _row("fsdp", 800, 790, 810)]
    lines = verdict(rows)
    assert not any("only single ran" in line for line in lines) and lines[0].startswith("m on 2 cpu ranks: ddp")
    assert verdict([rows[0]]) == ["m on 1 cpu rank: only single ran (500 tokens/s); nothing to compare."]


def test_one_strategy_beside_the_baseline_says_how_it_scales():
    """`compare --strategies single,ddp`: each rank count has one cell, and until 2026-12-03 the verdict said
    "nothing to compare" twice. The strategy's line now gives its scaling against the 1-rank baseline, as the table's
    scaling efficiency (by hand: 800 / (2 x 500) = 80%, 1.60x), and the baseline's own line goes."""
    rows = [_row("single", 500, world=1, ok=1),
            _row("ddp", 800, ok=1, scaling_efficiency=0.8, scaling_baseline="single")]
    assert verdict(rows) == ["m on 2 cpu ranks: only ddp ran (800 tokens/s), 1.60x single on 1 rank: a scaling "
                             "efficiency of 80%."]
    unscaled = [rows[0], _row("ddp", 800, ok=1)]  # no efficiency derived: each line its own
    assert [line.split(": ")[1] for line in verdict(unscaled)] == ["only single ran (500 tokens/s); nothing to "
                                                                   "compare.", "only ddp ran (800 tokens/s); nothing "
                                                                   "to compare."]


def test_a_lone_one_rank_run_is_not_scaled_against_itself():
    """`dsbench report RUN` of one `dsbench launch` on 1 rank: collect derives its efficiency against itself (1.0,
    the scaling plot's first point), and until 2026-12-04 the verdict said "1.00x zero2 on 1 rank: a scaling
    efficiency of 100%"."""
    rows = [_row("zero2", 4, world=1, ok=1, scaling_efficiency=1.0, scaling_baseline="zero2")]
    assert verdict(rows) == ["m on 1 cpu rank: only zero2 ran (4 tokens/s); nothing to compare."]
    both = [*rows, _row("ddp", 800, ok=1, scaling_efficiency=0.8, scaling_baseline="zero2")]
    assert verdict(both) == ["m on 2 cpu ranks: only ddp ran (800 tokens/s), 1.60x zero2 on 1 rank: a scaling "
                             "efficiency of 80%."]


def test_the_markdown_html_and_terminal_open_with_the_verdict(tmp_path, capsys):
    import shutil

    from dsbench.report.build import build_report
    from dsbench.report.html import write_html
    from dsbench.report.terminal import print_report

    compare = tmp_path / "compare"
    shutil.copytree(DATA / "runs" / "cpu-calibrated" / "oos-20261126-0437-llama-tiny" / "compare", compare)
    built = build_report([compare], tmp_path / "report", plots=False, max_slowdown=1.5)
    assert built.verdict == verdict(built.rows, 1.5) and "within 1.50x" in built.verdict[2]
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert markdown.startswith("# dsbench report\n\n## Verdict\n\n- " + built.verdict[0].strip())
    assert markdown.index("## Verdict") < markdown.index("| strategy |")
    page = write_html(built.rows, {}, {}, tmp_path / "page.html", built.verdict).read_text()
    assert page.index("<h2>Verdict</h2>") < page.index('<table id="cells">')
    print_report(built)
    printed = capsys.readouterr().out
    assert printed.index(built.verdict[0][:40]) < printed.index("strategies compared")



def test_with_none_close_enough_it_says_what_less_memory_costs():
    """The stored gpt2-mini compares said "It also holds the least model states per rank (20.6 MiB) of those within
    1.25x its step time" with no other cell within 1.25x: true of a set of one. It now names the fastest cell that
    holds less and its step time, or says the fastest holds the least of all."""
    rows = [_row("ddp", 1000, states=40), _row("zero3", 700, states=8), _row("fsdp", 600, states=10),
            _row("zero1", 500, states=50)]
    assert verdict(rows)[-1] == ("  Less memory costs more than 1.25x its step time (--max-slowdown): the fastest that "
                                "holds less, zero3, 8.0 MiB of model states per rank against 40.0 MiB, at 1.43x the "
                                "step time.")
    lean = [_row("ddp", 1000, states=8), _row("zero3", 700, states=10)]
    assert verdict(lean)[-1] == "  It also holds the least model states per rank of them all (8.0 MiB)."
    close = [_row("ddp", 1000, states=8), _row("zero3", 900, states=10)]  # within 1.25x: the old line, true here
    assert verdict(close)[-1] == ("  It also holds the least model states per rank (8.0 MiB) of those within 1.25x "
                                  "its step time.")


def test_a_failure_s_status_is_said_once_and_its_rank_tag_reaches_the_terminal(tmp_path, capsys):
    """"Failed: zero3_nvme x2 (gpt2-mini): failed: exit code 1:  dsbench.train: ...": the status said twice, and the
    reason's ``[rank 0]`` gone from the terminal, where rich read it as a style tag (report.md kept it)."""
    from dsbench.report.build import build_report
    from dsbench.report.terminal import print_report

    rows = [_row("ddp", 1000), _row("zero3", None, status="failed", reason="exit code 1: [rank 0] boom"),
            _row("zero2", None, status="timeout", reason="no step in 600 s")]
    assert verdict(rows)[-2:] == ["Failed: zero3 x2 (m): exit code 1: [rank 0] boom",
                                  "Failed: zero2 x2 (m): timeout: no step in 600 s"]
    built = build_report([DATA / "runs" / "compare-cpu"], tmp_path / "report", plots=False)
    print_report(built)
    printed = " ".join(capsys.readouterr().out.split())
    assert "Failed: zero3_nvme x2 (gpt2-mini): exit code 1: [rank 0] dsbench.train: error: RuntimeError" in printed


def test_the_table_shows_the_range_the_verdict_compares():
    """In brackets beside the wall clock's figure, the range itself: one repeat's timed p10-p90 over the steps (which
    need not surround the figure, and says it is timed: since 2026-12-03), or the min-max over repeats."""
    from dsbench.report.terminal import compare_grid

    timed = [_row("ddp", 1000, ok=1, timed_tokens_per_s_p10=1010.0, timed_tokens_per_s_p90=1300.0),
             _row("fsdp", 800, ok=1, timed_tokens_per_s_p10=700.0, timed_tokens_per_s_p90=1020.0)]
    repeats = [_row("ddp", 1000, 950, 1050), _row("fsdp", 800, 700, 960)]
    for rows, shown in ((timed, ["1,000 (timed 1,010-1,300)", "800 (timed 700-1,020)"]),
                        (repeats, ["1,000 (950-1,050)", "800 (700-960)"])):
        grid = compare_grid(rows)
        column = [c.header for c in grid.columns].index("tokens/s (range)")
        assert [row[column] for row in grid.rows] == shown
        assert verdict(rows)[1].endswith(": fsdp.")  # the brackets overlap, and the verdict says so


def test_vs_best_is_a_dash_for_a_cell_with_nothing_beside_it():
    """single is the one 1-rank cell of a compare: "1.00x" beside ddp's 1.00x read as a tie for first (until
    2026-12-03); the ratio stands only among cells of the same model, device and ranks."""
    from dsbench.report.terminal import compare_grid

    rows = [_row("single", 500, ok=1, world=1), _row("ddp", 1000, ok=1), _row("fsdp", 800, ok=1)]
    grid = compare_grid(rows)
    column = [c.header for c in grid.columns].index("vs best")
    assert [row[column] for row in grid.rows] == ["-", "1.00x", "0.80x"]
    assert "(- for a cell alone in its group)" in grid.notes[1]
