"""Arithmetic against hand-computed values and the seed articles' tables."""

import pytest

from dsbench.models import PRESETS
from dsbench.records import flops_per_token, mfu, scaling_efficiency, spread, summarize
from dsbench.run_record import upgrade_summary


def test_flops_per_token_gpt2_124m():
    gpt2 = PRESETS["gpt2"]
    # 6 x 124,439,808 + 12 x 12 layers x 768 x 1024 tokens
    assert flops_per_token(gpt2.num_params(), gpt2.layers, gpt2.hidden, 1024) == 746_638_848 + 113_246_208


def test_mfu_against_hand_computed_value():
    # 129k tokens/s x 0.86 GFLOP/token = 110.9 TFLOP/s on a 989 TFLOPS H100 -> 11.2 % (GPU.md's reference row)
    value = mfu(129_000, flops_per_token(124_439_808, 12, 768, 1024), 989.0)
    assert value == pytest.approx(129_000 * 859_885_056 / 989e12) and round(value, 3) == 0.112
    assert mfu(1000.0, 10, None) is None


@pytest.mark.parametrize("gpus, throughput, expected", [(2, 1190, 0.96), (4, 2280, 0.92), (8, 4340, 0.875)])
def test_scaling_efficiency_reproduces_seed_000_ddp_table(gpus, throughput, expected):
    """ResNet-50 DDP: 620 img/s on 1 GPU; 0.96 / 0.92 / 0.87 (the article rounds 0.875 down)."""
    assert scaling_efficiency(throughput, gpus, 620) == pytest.approx(expected, abs=0.005)


def test_spread_quantiles():
    s = spread([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s["median"], s["min"], s["max"], s["n"]) == (3.0, 1.0, 5.0, 5)
    assert s["p10"] == pytest.approx(1.4) and s["p90"] == pytest.approx(4.6)


def _step(i, warmup, t, rank1=None):
    return {"type": "step", "step": i, "warmup": warmup, "loss": 10.0 - i, "step_time_s": max(t, rank1 or 0),
            "step_time_per_rank_s": [t, rank1 or t], "tokens": 400, "peak_memory_bytes": [10 + i, 20],
            "memory_kind": "rss"}


HEADER = {"type": "header", "strategy": "ddp", "world_size": 2, "flops_per_token": 1000, "peak_tflops": 1e-6}


def test_summarize_excludes_warmup_and_uses_the_wall_clock():
    window = {"type": "window", "first_step": 2, "last_step": 4, "seconds": 8.0, "tokens": 1200, "samples": 12,
              "rank_tokens": 600}
    records = [HEADER, _step(0, True, 9.0), _step(1, True, 9.0), _step(2, False, 1.0), _step(3, False, 2.0),
               _step(4, False, 3.0, rank1=4.0), window]
    summary = summarize(records)
    assert summary["measured_steps"] == 3 and summary["warmup_steps"] == 2
    wall = summary["throughput"]
    # 3 steps x 400 tokens in 8 s of wall clock: 150 tokens/s, 75 per rank; 75 x 1000 FLOPs / 1 MFLOP/s peak
    assert (wall["tokens_per_s"], wall["samples_per_s"], wall["tokens_per_s_per_rank"]) == (150, 1.5, 75)
    assert wall["mfu"] == pytest.approx(0.075) and wall["window_s"] == 8.0
    timed = summary["timed_region"]
    # slowest rank per step: 1, 2, 4 s
    assert timed["step_time_s"]["median"] == 2.0 and timed["step_time_s"]["max"] == 4.0
    assert timed["tokens_per_s"]["median"] == 200 and timed["tokens_per_s_overall"] == pytest.approx(1200 / 7)
    # rank 0 spent 1 + 2 + 3 = 6 of its 8 s window inside its timed regions
    assert summary["outside_timed_fraction"] == pytest.approx(0.25)
    assert summary["first_loss"] == 10.0 and summary["final_loss"] == 6.0
    assert summary["peak_memory_bytes_per_rank"] == [14, 20]
    assert summarize(records[:3])["status"] == "no-measured-steps"
    assert summarize(records[:-1])["status"] == "incomplete"  # killed before the window closed
    assert summary["skipped_steps"] == 0  # records before 2026-11-30 have no "skipped"
    records[1], records[3] = {**records[1], "skipped": True}, {**records[3], "skipped": True}
    assert summarize(records)["skipped_steps"] == 2  # fp16's loss scale skipped a warm-up and a measured step


def test_schema_1_summaries_are_read_as_timed_region_only():
    old = {"status": "ok", "step_time_s": {"median": 0.1}, "tokens_per_s": {"median": 5.0}, "mfu": None,
           "tokens_per_s_per_rank": 2.5, "samples_per_s": 1.0, "tflops_per_rank": 1.0, "final_loss": 3.0}
    new = upgrade_summary(old)
    assert new["throughput"] is None and new["timed_region"]["tokens_per_s"] == {"median": 5.0}
    assert "tokens_per_s" not in new and new["final_loss"] == 3.0


def test_the_typed_summary_reads_what_summarize_wrote_and_names_a_bad_figure():
    from dsbench.errors import UserError
    from dsbench.run_record import RunSummary

    window = {"type": "window", "first_step": 1, "last_step": 2, "seconds": 4.0, "tokens": 800, "samples": 8,
              "rank_tokens": 400}
    written = summarize([HEADER, _step(0, True, 9.0), _step(1, False, 1.0), _step(2, False, 3.0), window])
    summary = RunSummary.from_dict(written, "summary.json")
    assert summary.ok and summary.throughput.step_s == 2.0 and summary.throughput.tokens_per_s == 200
    assert summary.timed.step_time_s.median == 2.0 and summary.warmup_s == 9.0 and summary.final_loss == 8.0
    assert summary.peak_memory_bytes_per_rank == (12, 20)
    broken = {**written, "throughput": {**written["throughput"], "window_s": "4 s"}}
    with pytest.raises(UserError, match=r"^summary.json: throughput.window_s is '4 s', not a number$"):
        RunSummary.from_dict(broken, "summary.json")
    with pytest.raises(UserError, match="timed_region is \\[\\], not a record"):
        RunSummary.from_dict({**written, "timed_region": []}, "summary.json")
    # a run that did not finish carries its status and reason, and no figures
    killed = RunSummary.from_dict(summarize([HEADER, _step(0, False, 1.0)]), "summary.json")
    assert (killed.status, killed.throughput, killed.timed) == ("incomplete", None, None)
    # schema 1: the timed region only, no wall clock
    old = {"status": "ok", "step_time_s": {"median": 0.1}, "tokens_per_s": {"median": 5.0}, "mfu": None,
           "final_loss": 3.0, "measured_steps": 3, "warmup_steps": 1, "peak_memory_bytes_per_rank": [1]}
    upgraded = RunSummary.from_dict(old, "summary.json")
    assert upgraded.throughput is None and upgraded.timed.tokens_per_s.median == 5.0


def test_the_typed_header_reads_a_header_record_and_defaults_an_absent_one():
    from dsbench.run_record import RunHeader

    header = RunHeader.from_record({**HEADER, "model": {"name": "gpt2-tiny", "layers": 2}, "tp": 2,
                                    "hostnames": ["a", "b"], "speed": {"compile": True},
                                    "fsdp": {"reshard": False}})
    assert (header.engine, header.world_size, header.model, header.tp, header.pp) == ("ddp", 2, "gpt2-tiny", 2, 1)
    assert header.hostnames == ("a", "b") and header.speed.compile and not header.speed.fused_optimizer
    assert header.shape == {"name": "gpt2-tiny", "layers": 2} and header.fsdp_reshard is False
    empty = RunHeader.from_record({})
    assert (empty.engine, empty.device, empty.tp, empty.model, empty.command) == ("?", "?", 1, None, ())


def test_a_launch_ends_with_what_its_summary_says(tmp_path):
    """``dsbench launch``'s last line, after the launcher's own log lines: the summary's wall-clock figure, read back
    through the typed reader; nothing where rank 0 wrote no summary here (another node's folder) or the run failed."""
    import json

    from dsbench.commands.launch import finished_line

    window = {"type": "window", "first_step": 1, "last_step": 2, "seconds": 4.0, "tokens": 800, "samples": 8,
              "rank_tokens": 400}
    assert finished_line(tmp_path) is None
    (tmp_path / "summary.json").write_text(json.dumps(summarize([HEADER, _step(0, True, 9.0), window])))
    assert finished_line(tmp_path) is None  # no measured step
    (tmp_path / "summary.json").write_text(json.dumps(
        summarize([HEADER, _step(0, True, 9.0), _step(1, False, 1.0), _step(2, False, 3.0), window])))
    # the timed region's spread beside the wall clock's figure: 400 tokens in 1 s and in 3 s, by hand
    assert finished_line(tmp_path) == (f"dsbench: finished {tmp_path}: 200 tokens/s by the wall clock over 2 steps "
                                       f"after 1 warm-up (each step's timed region: 133-400 tokens/s, median 267), "
                                       f"final loss 8.0000; tables and plots: dsbench report {tmp_path}")
    # where rank 0 printed them (a launch across nodes: LaunchSpec.rank_prints_summary), the launch does not again
    assert finished_line(tmp_path, figures=False) == (f"dsbench: finished {tmp_path} (its figures: rank 0's run: line "
                                                      f"above); tables and plots: dsbench report {tmp_path}")
    summary = json.loads((tmp_path / "summary.json").read_text()) | {"skipped_steps": 3}
    (tmp_path / "summary.json").write_text(json.dumps(summary))  # fp16's loss scale skipped 3 optimizer steps
    assert "final loss 8.0000; 3 optimizer steps skipped by fp16's loss scale; tables" in finished_line(tmp_path)


def test_a_ranks_progress_lines_mark_the_warm_up_steps(capsys):
    """Rank 0's progress lines off a terminal: the warm-up steps, slow while caches and JIT warm, say that the run's
    figures leave them out (until 2026-12-03 nothing told them from the measured steps)."""
    from dsbench.worker.run import Progress

    progress = Progress(total=3, quiet=False)
    for step, warmup in ((0, True), (1, False), (2, False)):
        progress.update({"step": step, "warmup": warmup, "loss": 8.0, "timed_tokens_per_s": 1000.0 * (step + 1),
                         "step_time_s": 0.5})
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"step {n}/3  loss 8.0000  {n},000 tok/s (timed region)  500.0 ms/step" +
                     ("  (warm-up: not in the run's figures)" if n == 1 else "") for n in (1, 2, 3)]


def test_every_stored_runs_header_is_of_the_kinds_its_reader_checks():
    """The oracle for the kinds: every header the worker wrote into tests/data (CPU, H100 and H200 runs, 2026-11-24
    on), each read back without a complaint."""
    import glob
    import json

    from dsbench.header_fields import header_problem
    from tests.conftest import DATA

    headers = []
    for path in glob.glob(f"{DATA}/runs/**/metrics.jsonl", recursive=True):
        with open(path) as lines:
            headers.append((path, json.loads(lines.readline())))
    assert len(headers) > 1000 and [(path, header_problem(h)) for path, h in headers if header_problem(h)] == []


@pytest.mark.parametrize("field, value, named", [
    ("tp", "x", 'tp is "x", not a whole number >= 1'),  # was: ValueError: invalid literal for int()
    ("micro_batch", -1, "micro_batch is -1, not a whole number >= 1"),  # was: reported as a run on -1 ranks
    ("world_size", True, "world_size is true, not a whole number >= 1"),
    ("model", "gpt2", 'model is "gpt2", not an object'),  # was: AttributeError: 'str' object has no attribute 'get'
    ("model", {"name": 5}, "model.name is 5, not text"),
    ("hostnames", 5, "hostnames is 5, not a list of text"),  # was: TypeError: 'int' object is not iterable
    ("strategy", 7, "strategy is 7, not text"),
    ("sequence_parallel", "yes", 'sequence_parallel is "yes", not true or false'),
    ("peak_tflops", float("inf"), "peak_tflops is Infinity, not a number > 0"),
])
def test_a_damaged_header_is_named_by_its_field_in_the_report(cli_run, tmp_path, field, value, named):
    """A run folder edited by hand: `dsbench report` marks it corrupt in one line that names the field (exit 1, as
    for any unreadable folder), where it named the Python error the value raised, or reported it as it was."""
    import json
    import shutil

    from tests.conftest import DATA

    run = shutil.copytree(DATA / "runs" / "launch-zero3", tmp_path / "run")
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), field: value})
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    result = cli_run("report", str(run), "-o", str(tmp_path / "out"))
    assert result.exit_code == 1 and f"{run}/metrics.jsonl: its header's {named}); reported as corrupt" in result.output
