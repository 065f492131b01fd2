"""A fuzz pass over every command's flags and the files they read: each hostile value ends in one line and a
documented exit code (0, 1, 2), never a traceback or an "internal error", and nothing starts a process before the
checks are done.

The command tree is read from click itself, so a new command or flag is fuzzed without editing this file. Process
starts are stopped at ``subprocess.Popen`` (dsbench.runner is the only module that starts processes): reaching it
means every check the inputs allow passed, which is fine; what must not happen is a crash on the way there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from dsbench.cli import cli
from tests.conftest import DATA, file_digests

# Values for any flag: empty, zero, negative, NaN, huge, non-ASCII digits, a trailing newline, metacharacters.
VALUES = ["", "0", "-1", "nan", "inf", "1e400", "9" * 5000, "\u0661\u0662", "2\n", " 3 ", "$(touch pwned)",
          "x|.*[", "a b;c&d", "../../etc/passwd", "\u00e9\u6f22", "-", "--help"]
# Files for flags and arguments that take a path: a folder, a FIFO, binary, truncated, deeply nested, missing.
FILES = ["folder", "fifo.json", "binary.bin", "truncated.json", "deep.json", "missing.json", "list.json",
         "billion.yaml", "null.json"]
# What each command needs besides the fuzzed value to get as far as it can without real work.
BASE = {
    ("validate",): ["good.json", "--no-deepspeed-check"], ("explain",): ["good.json"],
    ("hostfile", "check"): ["hostfile"], ("launch",): ["--dry-run"], ("compare",): ["--out", "c"],
    ("report",): ["runs"], ("plan",): ["--model", "gpt2-tiny"], ("calibrate",): ["--dry-run"],
    ("tune",): ["--out", "t"], ("whatif",): ["--out", "w"], ("export",): ["ck", "hf"],
}


class _WouldStart(BaseException):  # noqa: N818 -- not an error: the point where a process would start
    """Raised where a process would start; BaseException, so no dsbench handler turns it into a message."""


def _commands() -> list[tuple[tuple[str, ...], click.Command]]:
    found = []

    def walk(group: click.Group, prefix: tuple[str, ...]) -> None:
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                walk(command, (*prefix, name))
            else:
                found.append(((*prefix, name), command))

    walk(cli, ())
    return found


def _cases() -> list[pytest.param]:
    cases = []
    for path, command in _commands():
        for param in command.params:
            if getattr(param, "is_flag", False) or param.nargs == -1 or isinstance(param.type, click.Choice):
                continue
            takes_path = isinstance(param.type, click.Path) or param.name in ("config", "checkpoint", "run_dirs")
            cases.append(pytest.param(path, param, takes_path, id=f"{' '.join(path)}:{param.name}"))
    return cases


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("fuzz")
    for item in (DATA / "bad").iterdir():
        (shutil.copytree if item.is_dir() else shutil.copy)(item, folder / item.name)
    (folder / "folder").mkdir()
    os.mkfifo(folder / "fifo.json")
    (folder / "binary.bin").write_bytes(bytes(range(256)) * 4)
    (folder / "truncated.json").write_text('{"train_batch_size": 8, "zero_optimiz')
    (folder / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (folder / "null.json").write_text("null")
    (folder / "billion.yaml").write_text("a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)))
    (folder / "hostfile").write_text("localhost slots=2\n")
    (folder / "runs").mkdir()
    shutil.copytree(DATA / "bad" / "report_runs" / "nan_loss", folder / "runs" / "nan_loss")
    before = file_digests(folder)
    yield folder  # each test links to these files (a copy each took a third of the file's time, 2026-12-05)
    assert file_digests(folder) == before  # no hostile value made a command write into a file it was given


def _argv(path: tuple[str, ...], command: click.Command, param: click.Parameter, value: str) -> list[str]:
    base = list(BASE.get(path, []))
    if isinstance(param, click.Argument):
        position = [p for p in command.params if isinstance(p, click.Argument)].index(param)
        while len(base) <= position:
            base.append("x")
        base[position] = value
        return [*path, *base]
    return [*path, *base, param.opts[0], value]


@pytest.mark.parametrize("path, param, takes_path", _cases())
def test_hostile_values_end_in_one_line(inputs, monkeypatch, tmp_path, path, param, takes_path):
    work = tmp_path / "work"
    shutil.copytree(inputs, work, symlinks=True, ignore=shutil.ignore_patterns("fifo.json"), copy_function=os.link)
    os.mkfifo(work / "fifo.json")
    monkeypatch.chdir(work)
    monkeypatch.setenv("DSBENCH_TESTBED_DIR", str(tmp_path / "testbed"))

    def no_process(*args, **kwargs):
        raise _WouldStart()

    monkeypatch.setattr(subprocess, "Popen", no_process)
    runner = CliRunner()
    values = VALUES + (FILES if takes_path else [])
    for value in values:
        argv = _argv(path, next(c for p, c in _commands() if p == path), param, value)
        try:
            result = runner.invoke(cli, argv)
        except _WouldStart:
            continue  # every check passed and a process would start now: the inputs were acceptable
        output = result.output
        assert result.exit_code in (0, 1, 2), (argv[:6], result.exit_code, output[-500:], result.exception)
        assert "Traceback" not in output and "internal error" not in output, (argv[:6], output[-800:])
        assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
            argv[:6], repr(result.exception))
    assert not (work / "pwned").exists()


def _worker_flags() -> list[str]:
    from dsbench.trainflags import parser

    return [action.option_strings[0] for action in parser()._actions
            if action.option_strings and action.nargs != 0 and action.dest not in ("help", "local_rank")]


@pytest.mark.parametrize("flag", _worker_flags())
def test_hostile_worker_flags_are_one_line_usage_errors(inputs, monkeypatch, flag):
    """The worker's flags (what `dsbench launch -- ...` passes and a launcher hands every rank), checked by the
    same typed description before any rank imports torch: a UserError (exit 2) or a valid spec, nothing else."""
    from dsbench.errors import UserError
    from dsbench.trainflags import from_argv

    monkeypatch.chdir(inputs)
    for value in VALUES + FILES:
        try:
            from_argv([flag, value])
        except UserError as exc:
            assert "\n" not in str(exc).strip() or flag == "--run-json", (flag, value, str(exc)[:300])
