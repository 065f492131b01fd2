"""After an interrupted launch, dsbench waits for the ranks left in the launcher's process group (runner.group_alive
reads /proc; a fake /proc here, and this test's own group in the real one)."""

from __future__ import annotations

import os

from dsbench.runner import group_alive


def _stat(proc, pid: int, comm: str, state: str, pgrp: int) -> None:
    (proc / str(pid)).mkdir()
    (proc / str(pid) / "stat").write_text(f"{pid} ({comm}) {state} 1 {pgrp} {pgrp} 0 -1 4194560 0 0\n")


def test_a_group_is_alive_while_a_member_runs_and_not_once_only_zombies_are_left(tmp_path):
    """runner.group_alive reads /proc/PID/stat (state and process group after the command's name, which may hold
    spaces and parentheses): after an interrupted launcher exits, dsbench waits while its ranks finish their stop
    hooks, and an exited orphan (a zombie until reaped) does not hold it up."""
    _stat(tmp_path, 101, "python3", "S", 777)
    _stat(tmp_path, 102, "deepspeed (launch) x", "Z", 777)
    _stat(tmp_path, 103, "bash", "R", 555)
    (tmp_path / "self").mkdir()  # /proc's other entries are skipped
    (tmp_path / "104").mkdir()  # a process gone between the listing and the read
    assert group_alive(777, tmp_path) and group_alive(555, tmp_path)
    (tmp_path / "101" / "stat").write_text("101 (python3) Z 1 777 777 0 -1 4194560 0 0\n")
    assert not group_alive(777, tmp_path) and not group_alive(999, tmp_path)
    assert group_alive(os.getpgid(0))  # this test's own group, in the real /proc
