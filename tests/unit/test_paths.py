"""What the modules dsbench starts with ``python -m`` leave of ``sys.path`` (dsbench/paths.py)."""

from __future__ import annotations

import subprocess
import sys

from dsbench.paths import without_working_folder

ENTRIES = ("dsbench/train.py", "dsbench/worker/calibrate.py", "dsbench/worker/export.py", "dsbench/worker/probe.py")


def test_the_working_folder_leaves_the_path_and_nothing_else_does():
    path = ["/work/here", "/usr/lib/python3.11", "", "/venv/site-packages", "/work/here/sub"]
    assert without_working_folder(path, "/work/here") == ["/usr/lib/python3.11", "/venv/site-packages",
                                                          "/work/here/sub"]


def test_a_module_started_with_python_m_finds_no_folder_of_its_working_directory(tmp_path):
    """A folder ``z3`` beside the command (a run folder), and a later ``import z3``: without the call it is that
    folder, with it the import fails as it does where z3 is not installed."""
    (tmp_path / "z3").mkdir()
    code = ("import sys; from dsbench.paths import leave_working_folder_off_path; "
            "sys.path.insert(0, {cwd!r}); {call}"
            "import importlib.util; print(importlib.util.find_spec('z3') is None)")
    for call, expected in (("", "False"), ("leave_working_folder_off_path(); ", "True")):
        done = subprocess.run([sys.executable, "-c", code.format(cwd=str(tmp_path), call=call)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        assert done.stdout.strip() == expected, done.stderr


def test_every_module_dsbench_starts_with_python_m_calls_it_first():
    from tests.conftest import ROOT

    for entry in ENTRIES:
        main = (ROOT / entry).read_text().split('if __name__ == "__main__":', 1)[1]
        assert main.index("leave_working_folder_off_path()") < main.index("main()" if "guarded" not in main
                                                                          else "guarded()"), entry
