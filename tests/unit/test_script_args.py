"""The scripts that take only paths answer --help with their docstring and do nothing else, and a missing input
with one line and exit 2 (scripts/script_args.py), as the dsbench commands do."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, load_script

GENERATORS = ("build_tokenizer", "gen_accelerate_schema", "gen_ds_schema")
"""Scripts that write a shipped file when run: --help must not."""


def _script(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, f"scripts/{name}.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("name", [*GENERATORS, "durations_by_file", "fit_gpu_constants", "runs_to_oracle",
                                  "checkpoint_globals", "bench_accum_split", "bench_zero_reductions", "bench_cpu_adam"])
def test_help_prints_the_docstring_and_writes_nothing(name, tmp_path):
    before = {p: p.stat().st_mtime_ns for p in (ROOT / "dsbench" / "data").iterdir()}
    done = _script(name, "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: ") and "wrote" not in done.stdout, done.stdout
    assert {p: p.stat().st_mtime_ns for p in (ROOT / "dsbench" / "data").iterdir()} == before


@pytest.mark.parametrize("name, args, message", [
    ("durations_by_file", ["/nonexistent.log"], "No such file"),
    ("fit_gpu_constants", ["/nonexistent.csv"], "--replay not found: /nonexistent.csv"),
    ("runs_to_oracle", ["/nonexistent"], "metrics file not found"),
    ("bench_accum_split", ["--profile", "/nonexistent.json"], "--profile not found: /nonexistent.json"),
    ("bench_accum_split", ["--profile", "scripts/bench_accum_split.py", "--accums", "4"], "--accums needs two"),
])
def test_a_missing_input_is_one_line(name, args, message):
    done = _script(name, *args)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == 2 and "Traceback" not in done.stderr and len(errors) == 1 and message in errors[0]


def test_a_path_taking_script_without_paths_prints_its_usage():
    done = _script("durations_by_file")
    assert done.returncode == 2 and "usage: durations_by_file.py" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("args, message", [
    (["--repeats", "0"], "argument --repeats: '0' must be above 0"),
    (["--grad-accum", "-1"], "argument --grad-accum: '-1' must be above 0"),
    (["--micro-batch", "1.5"], "argument --micro-batch: '1.5' is not a whole number"),
    (["--seq-len", "x"], "argument --seq-len: 'x' is not a number"),
    (["--seq-len", "9999"], "--seq-len 9999 exceeds gpt2-mini's 256 positions"),
    (["--model", "nope"], "--model 'nope': not a preset"),
    (["--out", "scripts"], "--out scripts: give a new file in an existing folder"),  # never replaced, never a folder
])
def test_the_zero_reductions_benchmark_refuses_bad_flags_before_any_rank_starts(args, message):
    """scripts/bench_zero_reductions.py runs under torchrun; its flags are checked before DeepSpeed is imported."""
    done = _script("bench_zero_reductions", *args)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines()[-1].startswith("bench_zero_reductions.py: error: ") and message in done.stderr


@pytest.mark.parametrize("text, value", [("8", 8), ("2e8", 200_000_000), ("+3", 3),
                                         ("12345678901234567890123", 12345678901234567890123)])
def test_a_count_is_read_exactly(text, value):
    positive = load_script("script_args").positive
    assert positive(int)(text) == value and type(positive(int)(text)) is int


@pytest.mark.parametrize("text, message", [("0", "'0' must be above 0"), ("-1", "'-1' must be above 0"),
                                           ("1.5", "'1.5' is not a whole number"), ("nan", "'nan' is not a number"),
                                           ("inf", "'inf' is not a number"), ("", "'' is not a number"),
                                           ("$(id)", "'$(id)' is not a number")])
def test_a_count_that_is_not_one_is_refused_by_name(text, message):
    import argparse

    positive = load_script("script_args").positive
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
        positive(int)(text)
    assert positive(float)("0.5") == 0.5
