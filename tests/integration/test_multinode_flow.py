"""The issue's multi-node flow as a user types it, with a test bed of its own: `testbed up`, a launch with the
printed hostfile, a node made unreachable (launch refused, doctor names it), `testbed down`, nothing left.

A module of its own so that it runs after test_multinode.py's test bed is down (pytest ends a module's
fixtures before the next module starts).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration.conftest import dsbench
from tests.integration.test_multinode import REASON, assert_nothing_left, needs_testbed

pytestmark = [pytest.mark.dist, pytest.mark.multinode]


def test_status_when_no_test_bed_is_up():
    if REASON is None and dsbench("testbed", "status", cwd=ROOT).returncode == 0:
        pytest.skip("a test bed is up (this test runs where none is)")
    result = dsbench("testbed", "status", cwd=ROOT)
    assert result.returncode == 1 and "no test bed is up" in result.stdout


@needs_testbed
def test_the_issue_flow_as_typed(tmp_path):
    """testbed up --nodes 2 --slots 1; launch with the printed hostfile; testbed down: two hostnames."""
    assert dsbench("testbed", "status", cwd=tmp_path).returncode == 1  # the module's test bed is down by now
    up = dsbench("testbed", "up", "--nodes", "2", "--slots", "1", cwd=tmp_path, timeout=120)
    try:
        assert up.returncode == 0, up.stderr
        printed = up.stdout.strip().splitlines()[-1].removeprefix("hostfile: ")
        again = dsbench("testbed", "up", "--nodes", "2", cwd=tmp_path)
        assert again.returncode == 2 and "a test bed is already up" in again.stderr
        result = dsbench("launch", "--hostfile", printed, "--zero", "2", "--model", "gpt2-tiny", "--run-dir", "D",
                         "--", "--steps", "10", cwd=tmp_path, timeout=600)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        header = json.loads((tmp_path / "D" / "metrics.jsonl").read_text().splitlines()[0])
        assert sorted(set(header["hostnames"])) == ["dsb-n1", "dsb-n2"]
        # a node that cannot be reached is refused before anything starts, naming it
        os.kill(int(Path("/run/dsbench-testbed/dsb-n2/sshd.pid").read_text()), 9)
        refused = dsbench("launch", "--hostfile", printed, "--zero", "2", "--run-dir", "E", "--", "--steps", "3",
                          cwd=tmp_path, timeout=120)
        assert refused.returncode == 2 and "host dsb-n2 is not reachable by ssh without a password" in refused.stderr
        doctor = dsbench("doctor", "--hostfile", printed, "--json", cwd=tmp_path, timeout=120)
        assert doctor.returncode == 1, doctor.stdout
        [ssh] = [r for r in json.loads(doctor.stdout) if r["host"] == "dsb-n2" and r["check"] == "ssh"]
        assert ssh["status"] == "FAIL" and "ssh-copy-id dsb-n2" in ssh["fix"]
    finally:
        down = dsbench("testbed", "down", cwd=tmp_path, timeout=120)
    assert down.returncode == 0, down.stderr
    assert_nothing_left()
    assert dsbench("testbed", "down", cwd=tmp_path).returncode == 2  # nothing to take down
