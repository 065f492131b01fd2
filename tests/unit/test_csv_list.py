"""The comma lists of compare, tune and whatif (commands/options.csv_list): an empty item among others is refused,
not dropped (``ddp,,zero2`` ran ddp and zero2 until 2026-12-02); spaces around an item are not part of it."""

from __future__ import annotations

import click
import pytest

from dsbench.commands.options import csv_list


def _parse(kind, value):
    return csv_list(kind)(None, None, value)


@pytest.mark.parametrize(("kind", "value", "expected"), [
    (str, "ddp,zero2", ["ddp", "zero2"]),
    (str, " ddp , zero2 ", ["ddp", "zero2"]),
    (int, "2,4", [2, 4]),
    (str, None, None),
    (str, ",", []),  # empty altogether: Command.parse_args refuses it as it refuses any empty value
    (str, "", []),
])
def test_a_comma_list_is_its_items(kind, value, expected):
    assert _parse(kind, value) == expected


@pytest.mark.parametrize(("kind", "value", "says"), [
    (str, "ddp,,zero2", "'ddp,,zero2' has an empty item: remove the extra comma"),
    (str, "ddp,", "'ddp,' has an empty item"),
    (int, ",2", "',2' has an empty item"),
    (int, "2,x", "expected a comma-separated list, got '2,x'"),
])
def test_an_item_that_is_empty_or_not_of_its_kind_is_refused(kind, value, says):
    with pytest.raises(click.BadParameter, match=says.replace("(", r"\(")):
        _parse(kind, value)


def test_compare_refuses_an_empty_item_before_it_runs_anything(tmp_path):
    from click.testing import CliRunner

    from dsbench.cli import cli

    result = CliRunner().invoke(cli, ["compare", "--strategies", "ddp,,zero2", "--out", str(tmp_path / "c")])
    assert result.exit_code == 2 and "has an empty item" in result.output
    assert not (tmp_path / "c").exists()
