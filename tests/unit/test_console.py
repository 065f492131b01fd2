"""The terminal size variables rich reads (COLUMNS, LINES): one it cannot read is dropped, not a crash."""

import sys

import pytest

from dsbench.console import DEFAULT_WIDTH, drop_unreadable_sizes, table_console, terminal_size


@pytest.mark.parametrize(("text", "size"), [("80", 80), ("1", 1), ("²", None), ("٣", None), ("0", None),
                                            ("abc", None), ("", None), ("9" * 5000, None), (" 80", None)])
def test_a_size_is_ascii_digits_within_reason(text, size):
    assert terminal_size(text) == size


def test_unreadable_sizes_are_dropped_and_readable_ones_kept():
    environ = {"COLUMNS": "²", "LINES": "40", "JUPYTER_COLUMNS": "x", "PATH": "/bin"}
    drop_unreadable_sizes(environ)
    assert environ == {"LINES": "40", "PATH": "/bin"}


def test_a_command_runs_under_a_columns_rich_would_stop_at(monkeypatch, capsys):
    """COLUMNS=² (str.isdigit is true of it, int refuses it) stopped every command in rich's Console() with an
    internal error; the entry point drops it and the table takes the default width."""
    from dsbench.cli import main

    monkeypatch.setenv("COLUMNS", "²")
    monkeypatch.setattr(sys, "argv", ["dsbench", "plan", "--model", "gpt2", "--gpus", "8", "--top", "1"])
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == 0 and "recommended:" in capsys.readouterr().out
    assert table_console().width == DEFAULT_WIDTH


@pytest.mark.parametrize(("text", "digits", "count"), [("0", 15, 0), ("42", 2, 42), ("421", 2, None), ("²", 15, None),
                                                       ("٣", 15, None), ("-1", 15, None), ("1e3", 15, None),
                                                       ("9" * 5000, 15, None)])
def test_read_count_reads_ascii_digits_only(text, digits, count):
    """The one reader of counts written as text (a CSV cell, a profile's key, COLUMNS): never int()'s ValueError."""
    from dsbench.io import read_count

    assert read_count(text, digits) == count
