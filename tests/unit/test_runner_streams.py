"""runner.run's streams: a launch's stderr merged into its stdout and log, in order; with ``errors`` (dsbench
export) the command's stderr kept apart, so its one error line reaches the user's stderr as every command's does
(until 2026-12-04 `dsbench export nothing out 2>/dev/null` still printed its error)."""

from __future__ import annotations

import io
import subprocess
import sys

from dsbench.launchers import LaunchCommand
from dsbench.runner import run

SCRIPT = ("import sys\nfor i in range(3000):\n    print('out', i, flush=True)\n    print('err', i, file=sys.stderr, "
          "flush=True)\nsys.exit(3)")


def test_merged_by_default_and_apart_with_errors(tmp_path):
    out, log = io.StringIO(), tmp_path / "launch.log"
    assert run(LaunchCommand(argv=[sys.executable, "-c", SCRIPT]), log_path=log, echo=out) == 3
    assert out.getvalue() == log.read_text() and out.getvalue().count("err ") == 3000
    # 3000 lines each way, more than a pipe holds: the two are read side by side, neither blocks the other
    out, err = io.StringIO(), io.StringIO()
    assert run(LaunchCommand(argv=[sys.executable, "-c", SCRIPT]), echo=out, errors=err) == 3
    assert out.getvalue() == "".join(f"out {i}\n" for i in range(3000))
    assert err.getvalue() == "".join(f"err {i}\n" for i in range(3000))


def test_export_s_error_line_is_on_stderr_alone(tmp_path):
    done = subprocess.run([sys.executable, "-m", "dsbench", "export", "nothing", "out"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("dsbench export: error: nothing: no such folder")
