"""A child process stopped the way a user stops one, when a test's bound on it runs out.

``subprocess.run(timeout=...)`` SIGKILLs the child: no handler runs, so a child building one of DeepSpeed's JIT
ops leaves torch's build lock in the extension cache every venv on the machine shares, and every later build of
that op waits on it (a clean clone of 2026-12-04 failed so: a unit test's child killed mid-build, then `dsbench
doctor` rightly reported the lock). Here the child first gets SIGTERM, on which a dsbench rank, or a script that
guards torch's baton with dsbench.worker.jitbaton, removes the locks it holds; SIGKILL only after a grace period.
"""

from __future__ import annotations

import os
import signal
import subprocess


def communicate_bounded(proc: subprocess.Popen, timeout: float, grace: float = 60) -> tuple[str, str, bool]:
    """The child's stdout and stderr, and whether it ran past ``timeout`` (then it, or the process group it leads,
    got SIGTERM, and SIGKILL ``grace`` seconds later)."""
    try:
        out, err = proc.communicate(timeout=timeout)
        return out, err, False
    except subprocess.TimeoutExpired:
        _signal(proc, signal.SIGTERM)  # its whole group where it leads one: dsbench forwards it to the launcher's
        try:
            out, err = proc.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL)
            out, err = proc.communicate()
        return out, err, True


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except ProcessLookupError:  # it ended meanwhile
        pass


GUARDED_BATON = """
import os, signal
from dsbench.worker import jitbaton
jitbaton.guard()  # the JIT build locks this script takes are removed when a test's bound stops it (tests/bounded.py)
signal.signal(signal.SIGTERM, lambda *_: (jitbaton.drop_held(), os._exit(143)))
"""
"""The preamble of a test's own script that may build a DeepSpeed op."""
