"""scripts/prebuild_ops.py gives the ops that only the last test needs the cores' spare time, and only its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

AUTOGROUP = Path("/proc/self/autogroup")
# what a builder does before async_io, then what the kernel says of its group and of itself
PROBE = ("import os, sys; sys.path.insert(0, 'scripts'); import prebuild_ops; "
         "prebuild_ops.leave_the_cores_to_the_tests(prebuild_ops.LATE_OPS['AsyncIOBuilder']); "
         "print(open('/proc/self/autogroup').read().split()[-1], os.nice(0))")


def _probe(new_session: bool) -> tuple[int, int]:
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          start_new_session=new_session)
    assert done.returncode == 0, done.stderr
    group, own = done.stdout.split()
    return int(group), int(own)


@pytest.mark.skipif(not AUTOGROUP.exists(), reason="a kernel without autogroup scheduling")
def test_a_builder_in_its_own_session_yields_the_cores_and_one_in_a_shell_session_does_not():
    late = 10  # prebuild_ops.LATE_OPS, read by hand: the docstring's arithmetic is for this value
    # as `make test` and the integration conftest start it (prebuild_ops.start: a session of its own)
    assert _probe(new_session=True) == (late, late)
    # run by hand in a terminal: its session is the terminal's, which it must leave as it was
    group_before, own_before = int(AUTOGROUP.read_text().split()[-1]), os.nice(0)
    assert _probe(new_session=False) == (group_before, own_before)
    assert int(AUTOGROUP.read_text().split()[-1]) == group_before
