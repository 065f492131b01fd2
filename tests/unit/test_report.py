"""Reports from stored run folders only (no re-run): rows, derived figures, every artefact, merging."""

import csv
import io
import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from dsbench.errors import UserError
from dsbench.report.build import build_report
from dsbench.report.collect import collect
from dsbench.report.render import to_csv, to_markdown
from dsbench.rows import Row
from tests.conftest import DATA

COMPARE = DATA / "runs" / "compare-cpu"
LAUNCH = DATA / "runs" / "launch-zero3"


def summary(cell_id):
    return json.loads((COMPARE / "cells" / cell_id / "summary.json").read_text())


def test_rows_and_derived_figures_from_summaries():
    rows = {r.strategy: r for r in collect([COMPARE])}
    assert set(rows) == {"single", "ddp", "fsdp", "zero1", "zero2", "zero3", "zero2_offload", "zero3_nvme"}
    single = summary("single-w1-mb2-gpt2-mini-r0")["throughput"]["tokens_per_s"]
    ddp = summary("ddp-w2-mb2-gpt2-mini-r0")["throughput"]["tokens_per_s"]
    zero3 = summary("zero3-w2-mb2-gpt2-mini-r0")["throughput"]["tokens_per_s"]
    assert rows["ddp"].tokens_per_s == ddp  # the wall-clock figure is the throughput
    assert rows["ddp"].timed_tokens_per_s == summary("ddp-w2-mb2-gpt2-mini-r0")["timed_region"]["tokens_per_s"][
        "median"]
    assert rows["ddp"].scaling_efficiency == pytest.approx(ddp / (2 * single))  # seeds/000 definition
    assert rows["ddp"].scaling_baseline == "single" and rows["single"].scaling_efficiency == pytest.approx(1)
    assert rows["zero3"].speedup_vs_ddp == pytest.approx(zero3 / ddp)
    mfu = summary("ddp-w2-mb2-gpt2-mini-r0")["throughput"]["mfu"]
    assert rows["ddp"].mfu == pytest.approx(mfu) and 0 < mfu < 1
    states = summary("zero3-w2-mb2-gpt2-mini-r0")["model_state_bytes_per_rank"][0]["total"]
    assert rows["zero3"].model_states_mib == pytest.approx(states / 2**20)
    failed = rows["zero3_nvme"]
    assert failed.status == "failed" and "libaio" in failed.reason and failed.tokens_per_s is None


def test_schema_1_folders_report_their_timed_region_only():
    [row] = collect([LAUNCH])
    old = json.loads((LAUNCH / "summary.json").read_text())
    assert row.status == "ok" and row.tokens_per_s is None and row.mfu is None
    assert row.timed_tokens_per_s == old["tokens_per_s"]["median"]
    assert "-" in to_markdown([row])


def test_gpu_runs_report_cuda_memory_and_mfu():
    rows = collect([DATA / "runs" / "gpu-h100" / "compare-gpt2", DATA / "runs" / "gpu-h100" / "compare-llama-1b"])
    assert len(rows) == 10 and {r.device for r in rows} == {"cuda"}
    assert all(r.memory_kind == "cuda_max_allocated" and 0 < r.mfu < 1 for r in rows)


def test_every_artefact_is_written(tmp_path):
    report = build_report([COMPARE / "cells"], tmp_path)
    for name in ("markdown", "csv", "json", "html", "png:throughput", "png:memory", "png:scaling", "png:loss",
                 "png:step_time"):
        assert report.files[name].stat().st_size > 0, name
    html = report.files["html"].read_text()
    assert html.count("data:image/png;base64,") == 5 and "hand-made fixture of a failed cell" in html
    assert "-m dsbench launch --strategy ddp --launcher torchrun" in html  # each cell's exact command
    assert '&#34;stage&#34;: 3' in html  # and its DeepSpeed config (HTML-escaped by the template's autoescape)
    assert "<p>environment:</p>" in html and "torch" in html  # and what it ran on
    assert '<th data-kind="num">tokens/s (wall)</th>' in html and 'document.querySelectorAll("#cells th")' in html
    rows = list(csv.DictReader(io.StringIO(report.files["csv"].read_text())))
    assert len(rows) == 8 and {r["status"] for r in rows} == {"ok", "failed"}
    data = json.loads(report.files["json"].read_text())
    assert "warm-up" in data["method"] and len(data["cells"]) == 8


def test_the_html_escapes_what_a_run_folder_holds(tmp_path):
    """A run folder is data: a reason or command holding markup is shown as text, never run as script."""
    from dsbench.report.html import write_html

    rows = collect([COMPARE])
    failed = next(row for row in rows if row.status != "ok")
    hostile = replace(failed, strategy="<script>alert(1)</script>",
                      runs=[replace(failed.runs[0], command="dsbench launch </pre><img src=x onerror=alert(2)>")])
    rows = [hostile if row is failed else row for row in rows]
    page = write_html(rows, {}, {"note": "<b>"}, tmp_path / "page.html", ["<i>verdict</i>"]).read_text()
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img src=x" not in page and "<i>verdict" not in page and "<b>" not in page


def test_markdown_names_units_and_method():
    text = to_markdown(collect([COMPARE]))
    assert "tokens/s" in text and "peak mem MiB/rank" in text
    assert "15 measured steps after 5 warm-up steps" in text and "tokens/s (wall)" in text
    assert "zero3_nvme x2 (gpt2-mini): failed" in text
    from dsbench.report.render import method_notes

    one = [replace(row, measured_steps=1, warmup_steps=1, repeats=1) for row in collect([COMPARE])]
    assert method_notes(one)[0] == "1 measured step after 1 warm-up step, 1 repeat."


def test_merging_a_compare_and_a_plain_launch_folder():
    rows = collect([COMPARE, LAUNCH])
    launched = [r for r in rows if r.model == "gpt2-tiny"]
    assert len(rows) == 9 and [r.strategy for r in launched] == ["zero3"]
    assert launched[0].status == "ok" and launched[0].world_size == 2
    assert "gpt2-tiny" in to_csv(rows)


def test_report_cli(cli_run, tmp_path):
    result = cli_run("report", str(COMPARE), str(LAUNCH), "-o", str(tmp_path / "r"), "--no-plots")
    assert result.exit_code == 0 and (tmp_path / "r" / "report.md").exists()
    assert not (tmp_path / "r" / "report.html").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = cli_run("report", str(empty))
    assert missing.exit_code == 2 and "no runs found" in missing.output


CALIBRATED = DATA / "runs" / "cpu-calibrated"


def test_a_profile_adds_predicted_step_times_beside_the_measured(cli_run, tmp_path):
    profile = next(CALIBRATED.glob("profile-*.json"))
    compare = next(CALIBRATED.glob("compare-*"))
    result = cli_run("report", str(compare), "--profile", str(profile), "-o", str(tmp_path / "r"), "--no-plots")
    assert result.exit_code == 0, result.output
    markdown = (tmp_path / "r" / "report.md").read_text()
    assert "predicted step ms" in markdown and "step error" in markdown
    assert "| predicted peak MiB |" not in markdown  # CPU runs: no allocator peak to compare
    cells = json.loads((tmp_path / "r" / "report.json").read_text())["cells"]
    for cell in cells:
        # the measured side by its own route: each repeat's window over its steps (the report divides the global
        # tokens per step by the median tokens/s)
        windows = [json.loads((Path(run["folder"]) / "summary.json").read_text())["throughput"] for run in cell["runs"]]
        step = statistics.median(w["window_s"] / w["steps"] for w in windows)
        assert cell["wall_step_ms"] == pytest.approx(step * 1e3, rel=0.05)
        assert cell["step_error"] == pytest.approx(cell["predicted_step_ms"] / cell["wall_step_ms"] - 1, rel=1e-9)


def test_a_cell_whose_metrics_were_lost_is_reported_without_a_prediction(cli_run, tmp_path):
    """A finished cell whose metrics.jsonl is gone (its summary kept, as in the stored tune folders) has no run
    header: no batch, sequence or precision to plan from. ``report --profile`` shows it unpredicted beside the cells
    it can predict; until 2026-11-29 23:58 the planner divided the header's missing accumulation and the report
    ended in an internal error."""
    import shutil

    compare = next(CALIBRATED.glob("compare-*"))
    copy = tmp_path / "c"
    shutil.copytree(compare, copy)
    lost = sorted((copy / "cells").glob("*/metrics.jsonl"))[0]
    lost.unlink()
    result = cli_run("report", str(copy), "--profile", str(next(CALIBRATED.glob("profile-*.json"))),
                     "-o", str(tmp_path / "r"), "--no-plots")
    assert result.exit_code == 0, result.output
    cells = json.loads((tmp_path / "r" / "report.json").read_text())["cells"]
    unpredicted = [cell for cell in cells if any(Path(run["folder"]) == lost.parent for run in cell["runs"])]
    assert unpredicted and all(cell.get("predicted_step_ms") is None for cell in unpredicted)
    assert any(cell.get("predicted_step_ms") for cell in cells)


def test_no_profile_no_predicted_columns_and_a_bad_one_is_refused(cli_run, tmp_path):
    compare = next(CALIBRATED.glob("compare-*"))
    plain = cli_run("report", str(compare), "-o", str(tmp_path / "r"), "--no-plots")
    assert plain.exit_code == 0 and "predicted" not in (tmp_path / "r" / "report.md").read_text()
    (tmp_path / "bad.json").write_text("{}")
    bad = cli_run("report", str(compare), "--profile", str(tmp_path / "bad.json"), "-o", str(tmp_path / "s"))
    assert bad.exit_code == 2 and "not a dsbench machine profile" in bad.output


def test_compare_refuses_a_bad_profile_before_any_cell_runs(cli_run, tmp_path):
    (tmp_path / "bad.json").write_text("[]")
    result = cli_run("compare", "--strategies", "ddp", "--profile", str(tmp_path / "bad.json"),
                     "--out", str(tmp_path / "c"))
    assert result.exit_code == 2 and "not a dsbench machine profile" in result.output
    assert not (tmp_path / "c").exists()


def test_compiled_rows_show_where_their_compilation_went_and_what_they_stepped_with():
    from dsbench.report.render import columns_for

    eager = Row(strategy="ddp", compile=False, warmup_s=0.3, optimizer="AdamW (for-loop)", **_options_of("ddp"))
    compiled = Row(strategy="ddp+compile", compile=True, warmup_s=14.2, optimizer="AdamW (for-loop)",
                   **_options_of("ddp+compile"))
    headers = [header for _, header, _ in columns_for([eager, compiled])]
    assert "warm-up s (compile)" in headers and "optimizer" in headers
    assert "warm-up s (compile)" not in [header for _, header, _ in columns_for([eager])]  # nothing compiled
    fused = Row(strategy="ddp+fused", fused_optimizer=True, optimizer="AdamW (fused)", **_options_of("ddp+fused"))
    assert "optimizer" in [header for _, header, _ in columns_for([eager, fused])]


def test_a_column_names_the_steps_fp16_s_loss_scale_skipped_when_some_row_skipped_one():
    from dsbench.report.render import columns_for

    clean = Row(strategy="ddp", skipped_steps=0, **_options_of("ddp"))
    skipping = Row(strategy="fsdp", skipped_steps=2, **_options_of("fsdp"))
    assert "fp16 steps skipped" in [header for _, header, _ in columns_for([clean, skipping])]
    assert "fp16 steps skipped" not in [header for _, header, _ in columns_for([clean])]


def test_the_terminal_table_names_the_cells_whose_steps_fp16_s_loss_scale_skipped():
    """In every view, wide or not (the column itself is shown wide only): a skipped step counts in tokens/s."""
    from dsbench.report.terminal import compare_grid

    clean = Row(strategy="ddp", skipped_steps=0, status="ok", **_options_of("ddp"))
    skipping = Row(strategy="fsdp", skipped_steps=2, status="ok", **_options_of("fsdp"))
    for wide in (False, True):
        notes = compare_grid([clean, skipping], wide=wide).notes
        assert [n for n in notes if "fp16's loss scale skipped" in n] == [
            "fp16's loss scale skipped optimizer steps (an overflow; their tokens count in tokens/s, their updates did "
            "not happen): fsdp 2."]
    assert not [n for n in compare_grid([clean]).notes if "fp16" in n]


def _options_of(label: str) -> dict:
    """The typed fields a report row carries beside its printed label (this test writes rows by their labels), and
    the cell fields these tests do not vary."""
    return {"base_strategy": label.split("+")[0], "with_compile": "+compile" in label, "with_fused": "+fused" in label,
            "model": "m", "device": "cpu", "micro_batch": 2, "world_size": 2}


def test_a_compiled_row_scales_against_the_compiled_single_run():
    from dsbench.report.collect import _derive

    def row(strategy, world, tps):
        return Row(**{**_options_of(strategy), "world_size": world}, strategy=strategy, tokens_per_s=tps)

    rows = [row("single", 1, 100.0), row("single+compile", 1, 120.0), row("ddp", 2, 180.0),
            row("ddp+compile", 2, 216.0)]
    rows = _derive(rows)
    by = {r.strategy: r for r in rows}
    assert by["ddp+compile"].scaling_baseline == "single+compile"
    assert by["ddp+compile"].scaling_efficiency == pytest.approx(216 / (2 * 120))  # 0.9, as eager ddp's
    assert by["ddp"].scaling_baseline == "single" and by["ddp+compile"].speedup_vs_ddp == pytest.approx(1.2)
    rows = [row("single", 1, 100.0), row("single+compile+fused", 1, 130.0), row("ddp+compile+fused", 2, 234.0),
            row("ddp+fused", 2, 190.0)]
    rows = _derive(rows)
    by = {r.strategy: r for r in rows}
    assert by["ddp+compile+fused"].scaling_baseline == "single+compile+fused"
    assert by["ddp+fused"].scaling_baseline == "single"  # no fused single ran: the eager one
    assert by["ddp+compile+fused"].speedup_vs_ddp == pytest.approx(234 / 190)  # compare's default DDP: fused


def test_every_row_scales_against_the_single_run_closest_in_speed_options():
    """compare's default runs single+fused: the ZeRO rows (DeepSpeed's FusedAdam) scale against it, as do the fused
    native rows; a for-loop row against the for-loop single when one ran; a run that did not say, plain single."""
    from dsbench.report.collect import _derive, steps_fused

    def row(strategy, world, tps, optimizer=None):
        return Row(**{**_options_of(strategy), "world_size": world}, strategy=strategy, tokens_per_s=tps,
                   optimizer=optimizer)

    assert [steps_fused(o) for o in ("AdamW (fused)", "FusedAdam", "DeepSpeedCPUAdam", "AdamW (for-loop)",
                                     "AdamW (foreach)", None, "unknown")] == [True, True, True, False, False,
                                                                             False, False]
    default = [row("single+fused", 1, 100.0, "AdamW (fused)"), row("ddp+fused", 2, 160.0, "AdamW (fused)"),
               row("zero2", 2, 80.0, "FusedAdam"), row("zero2_offload", 2, 70.0, "DeepSpeedCPUAdam")]
    default = _derive(default)
    assert [r.scaling_baseline for r in default] == ["single+fused"] * 4
    assert default[2].scaling_efficiency == pytest.approx(80 / (2 * 100))
    both = [row("single", 1, 90.0, "AdamW (for-loop)"), row("single+fused", 1, 100.0, "AdamW (fused)"),
            row("ddp", 2, 150.0, "AdamW (for-loop)"), row("zero2", 2, 80.0, "FusedAdam"), row("zero1", 2, 80.0)]
    both = _derive(both)
    assert [r.scaling_baseline for r in both[2:]] == ["single", "single+fused", "single"]


def test_every_column_and_exported_key_is_a_field_of_the_typed_row():
    """The table's columns, the ranges' ends and the CSV/JSON keys name fields of dsbench.rows.Row: a misspelt key
    is a failing test here, not a column of dashes."""
    from dsbench.report.render import COLUMNS, EXPORT_KEYS, PREDICTED_COLUMNS, RANGES, SKIPPED_COLUMN, SPEED_COLUMNS
    from dsbench.rows import FIGURES

    keys = {key for key, _, _ in COLUMNS + PREDICTED_COLUMNS + SPEED_COLUMNS + [SKIPPED_COLUMN] if key not in RANGES}
    keys |= {end for ends in RANGES.values() for end in ends} | set(EXPORT_KEYS)
    assert keys - FIGURES == set()


def test_a_run_whose_data_parallel_copies_differed_is_not_ok(tmp_path):
    """A summary whose replica check failed (worker/replicas.py) is reported as diverged with the ranks, and kept
    out of the verdict as a failed cell is; one that agreed, or kept no copies, stays ok."""
    import shutil

    cell = "ddp-w2-mb2-gpt2-mini-r0"
    for name, replicas in (("agree", {"groups": 1, "ranks_per_group": 2, "agree": True, "differing_ranks": []}),
                           ("differ", {"groups": 1, "ranks_per_group": 2, "agree": False, "differing_ranks": [1]}),
                           ("none", None)):
        folder = tmp_path / name
        shutil.copytree(COMPARE / "cells" / cell, folder)
        data = json.loads((folder / "summary.json").read_text())
        (folder / "summary.json").write_text(json.dumps({**data, "replicas": replicas}))
    rows = {name: collect([tmp_path / name])[0] for name in ("agree", "differ", "none")}
    assert rows["agree"].status == rows["none"].status == "ok"
    assert rows["differ"].status == "diverged" and "ranks [1]" in rows["differ"].reason
    (tmp_path / "differ" / "summary.json").write_text(json.dumps({**data, "replicas": "yes"}))
    [row] = collect([tmp_path / "differ"])
    assert row.status == "corrupt" and "replicas is 'yes'" in row.reason


def test_a_row_counts_the_steps_fp16_s_loss_scale_skipped(tmp_path):
    """The summary's skipped_steps (records.summarize) reaches the row; a summary from before 2026-11-30 has none
    (0); one that is not a number makes the run corrupt, named."""
    import shutil

    cell = "ddp-w2-mb2-gpt2-mini-r0"
    for name, skipped in (("old", None), ("two", 2), ("bad", "two"), ("negative", -1), ("half", 1.5)):
        shutil.copytree(COMPARE / "cells" / cell, tmp_path / name)
        data = json.loads((tmp_path / name / "summary.json").read_text())
        data.pop("skipped_steps", None)
        (tmp_path / name / "summary.json").write_text(json.dumps(data if skipped is None
                                                                 else {**data, "skipped_steps": skipped}))
    rows = {name: collect([tmp_path / name])[0] for name in ("old", "two", "bad", "negative", "half")}
    assert (rows["old"].skipped_steps, rows["two"].skipped_steps) == (0, 2)
    assert rows["bad"].status == "corrupt" and "skipped_steps is 'two', not a number" in rows["bad"].reason
    assert rows["negative"].status == rows["half"].status == "corrupt"
    assert "skipped_steps is -1, not a count" in rows["negative"].reason


def test_a_run_stopped_before_its_header_is_named_by_its_folder(cli_run, tmp_path, monkeypatch):
    """A metrics file whose only line is a torn header (the run killed while writing it): the run is corrupt, said
    so, and the verdict and table name its folder; until 2026-12-02 it was "Failed: ? xNone (None): incomplete"
    with ranks "None". Beside a sound run, that run's row stays as it was."""
    import shutil

    from dsbench.report.verdict import verdict

    torn = tmp_path / "torn"
    torn.mkdir()
    (torn / "metrics.jsonl").write_text('{"type": "header", "world_si')
    [row] = collect([torn])
    assert row.status == "corrupt" and "no complete header record" in row.reason
    [line] = [line for line in verdict([row]) if line.startswith("Failed")]
    assert line.startswith(f"Failed: {torn}: corrupt: ") and "None" not in line
    monkeypatch.setenv("COLUMNS", "400")  # the verdict's line unwrapped, whatever the path's length
    result = cli_run("report", str(torn), "--out", str(tmp_path / "report"))
    # exit 1 as for any folder report cannot read (commands/report.py), with the one-line warning naming it
    assert result.exit_code == 1 and "None" not in result.output and f"Failed: {torn}" in result.output
    assert f"dsbench: warning: {torn}: unreadable run folder" in result.output
    shutil.copytree(COMPARE / "cells" / "ddp-w2-mb2-gpt2-mini-r0", tmp_path / "sound")
    rows = {row.status: row for row in collect([torn, tmp_path / "sound"])}
    assert set(rows) == {"corrupt", "ok"} and rows["ok"].strategy == "ddp"


@pytest.mark.parametrize("name", ["report.md", "throughput.png", "report.json"])
def test_a_report_never_writes_over_a_file_it_did_not_write(tmp_path, name):
    """A user's own file of a report's name stays, and the report is refused in one line (until 2026-12-03 `-o`
    wrote over it); an earlier dsbench report in the folder is rewritten."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / name).write_text("my notes")
    with pytest.raises(UserError, match=f"{name} is not from a dsbench report .* give the report a new or empty "):
        build_report([COMPARE / "cells"], mine, plots=False)
    assert (mine / name).read_text() == "my notes" and len(list(mine.iterdir())) == 1
    ours = tmp_path / "ours"
    build_report([COMPARE / "cells"], ours, plots=False)
    (ours / "report.md").write_text("stale")
    build_report([COMPARE / "cells"], ours, plots=False)
    assert (ours / "report.md").read_text().startswith("# dsbench report")
