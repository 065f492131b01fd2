"""Runs every row of docs/errors.md: the documented exit code and message are what users get."""

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from tests.conftest import DATA, ROOT, file_digests


def catalogue():
    text = (ROOT / "docs" / "errors.md").read_text()
    body = text.split("<!-- catalogue:start -->")[1].split("<!-- catalogue:end -->")[0]
    rows = []
    for line in body.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        case, command, code, message = cells
        rows.append(pytest.param(command.strip("`"), int(code), message.strip("`"), id=case))
    return rows


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    """tests/data/bad copied once (on the file system of the tests' folders), for each row to link to: a copy per
    row took a third of the file's time (0.05 s of about 0.13 s a row, 2026-12-05). A command that wrote into a
    given file in place would change it for the rows after; dsbench writes a new file and renames it over the old
    one (io.atomic_write_*), which leaves a link's other names as they were."""
    template = tmp_path_factory.mktemp("bad")
    shutil.copytree(DATA / "bad", template, dirs_exist_ok=True)
    before = file_digests(template)
    yield template
    assert file_digests(template) == before  # no row wrote into a file it was given


@pytest.mark.parametrize("command, code, message", catalogue())
def test_documented_error(cli_run, tmp_path, bad_files, command, code, message):
    shutil.copytree(bad_files, tmp_path, dirs_exist_ok=True, copy_function=os.link)
    os.mkfifo(tmp_path / "fifo.json")  # a FIFO, which no file of the repository can be: reading it must not hang
    args = shlex.split(command)
    if args[0] == "python":  # the worker, started as a launcher starts it
        done = subprocess.run([sys.executable, *args[1:]], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        exit_code, output = done.returncode, done.stdout + done.stderr
    else:
        assert args[0] == "dsbench"
        result = cli_run(*args[1:])
        exit_code, output = result.exit_code, result.output
    assert exit_code == code, output
    assert message in output
    assert "Traceback" not in output


def test_catalogue_is_not_empty():
    assert len(catalogue()) >= 375  # 110 rows added by the audit of the newer commands (issue 24)
    assert all(re.match(r"^(dsbench|python -m dsbench\.train) ", p.values[0]) for p in catalogue())
