"""The interface is frozen: every command's flags and arguments, as click defines them, against a stored list
(tests/data/cli_flags.json), as torchtitan freezes its config. Removing or renaming a flag fails; a new flag is
added to the list (`python -m tests.unit.test_cli_flags` rewrites it)."""

from __future__ import annotations

import json
import sys

import click

from dsbench.cli import cli
from tests.conftest import DATA

FROZEN = DATA / "cli_flags.json"


def current() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}

    def walk(group: click.Group, prefix: tuple[str, ...]) -> None:
        found[" ".join(prefix) or "dsbench"] = sorted(o for p in group.params for o in p.opts)
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                walk(command, (*prefix, name))
            else:
                found[" ".join((*prefix, name))] = sorted(
                    o for p in command.params for o in ([p.human_readable_name] if isinstance(p, click.Argument)
                                                         else [*p.opts, *p.secondary_opts]))

    walk(cli, ())
    from dsbench.trainflags import parser  # the worker's flags: what `dsbench launch -- ...` and launchers pass

    found["python -m dsbench.train"] = sorted(o for a in parser()._actions for o in a.option_strings)
    return dict(sorted(found.items()))


def test_no_flag_was_removed_or_renamed():
    frozen = json.loads(FROZEN.read_text())
    now = current()
    gone = {command: sorted(set(flags) - set(now.get(command, []))) for command, flags in frozen.items()}
    assert {c: f for c, f in gone.items() if f} == {}, "a flag users type was removed or renamed"
    new = {command: sorted(set(flags) - set(frozen.get(command, []))) for command, flags in now.items()}
    assert {c: f for c, f in new.items() if f} == {}, "new flags: add them with `python -m tests.unit.test_cli_flags`"


if __name__ == "__main__":
    FROZEN.write_text(json.dumps(current(), indent=1) + "\n")
    sys.exit(0)
