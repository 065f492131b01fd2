"""Runs every row of docs/errors.md: the documented exit code and message are what users get."""

import re
import shlex
import shutil

import pytest

from tests.conftest import DATA, ROOT


def catalogue():
    text = (ROOT / "docs" / "errors.md").read_text()
    body = text.split("<!-- catalogue:start -->")[1].split("<!-- catalogue:end -->")[0]
    rows = []
    for line in body.strip().splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        case, command, code, message = cells
        rows.append(pytest.param(command.strip("`"), int(code), message.strip("`"), id=case))
    return rows


@pytest.mark.parametrize("command, code, message", catalogue())
def test_documented_error(cli_run, tmp_path, command, code, message):
    for item in (DATA / "bad").iterdir():
        shutil.copy(item, tmp_path / item.name)
    args = shlex.split(command)
    assert args[0] == "dsbench"
    result = cli_run(*args[1:])
    assert result.exit_code == code, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_catalogue_is_not_empty():
    assert len(catalogue()) >= 20
    assert all(re.match(r"^dsbench ", p.values[0]) for p in catalogue())
