"""Stopping a multi-node launch touches only its own processes (dsbench.launchstop): real processes, a real shell."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsbench.errors import UserError
from dsbench.hostfile import Host
from dsbench.launchers import LaunchSpec, build
from dsbench.launchstop import ENV, forget_pid, new_id, node_stop, pid_dir, record_pid, stop_script, valid_id

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture(autouse=True)
def pid_root(tmp_path, monkeypatch):
    """Records in a folder of the test's own (the real one is /tmp/dsbench-launches, shared by real launches)."""
    from dsbench import launchstop

    monkeypatch.setattr(launchstop, "PID_ROOT", str(tmp_path / "launches"))
    return tmp_path / "launches"


def _alive(proc: subprocess.Popen) -> bool:
    for _ in range(50):
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return True


def test_the_stop_ends_the_launch_s_processes_and_nothing_else(tmp_path, pid_root):
    launch_id, other_id = new_id(), new_id()
    ours = subprocess.Popen(SLEEPER, env={**os.environ, ENV: launch_id})
    theirs = subprocess.Popen(SLEEPER, env={**os.environ, ENV: other_id})  # another launch on the same node
    # a pid recorded under our id that now belongs to a process outside the launch (the kernel reused it)
    reused = subprocess.Popen([*SLEEPER, "x|.", "[run]"], env={k: v for k, v in os.environ.items() if k != ENV})
    records = [record_pid({ENV: launch_id}, pid=p.pid) for p in (ours, reused)] + [
        record_pid({ENV: other_id}, pid=theirs.pid)]
    try:
        subprocess.run(["bash", "-c", node_stop(launch_id)], check=True, timeout=30)
        assert ours.wait(timeout=10) == -15  # SIGTERM
        assert _alive(theirs) and _alive(reused)
    finally:
        for proc in (ours, theirs, reused):
            proc.kill()
            proc.wait()
        for record in records:
            forget_pid(record)
    assert not (pid_root / launch_id).exists()  # the stop removed the launch's records
    assert not (pid_root / other_id).exists()  # the other launch's last record took its folder with it


def test_a_record_is_made_only_for_a_launch_id_dsbench_made():
    assert record_pid({}) is None
    assert record_pid({ENV: "x|.; rm -rf /"}) is None
    assert not valid_id("../../etc") and valid_id(new_id())
    assert not valid_id(new_id() + "\n")  # a trailing newline never names a folder
    with pytest.raises(ValueError):
        pid_dir("*")


@pytest.mark.parametrize("run_dir", ["x|.", "a[b]c", "sp ace/$(touch pwned)", "q'uote\"s;&"])
@pytest.mark.parametrize("launcher, backend", [("torchrun", "pdsh"), ("accelerate", "pdsh"), ("deepspeed", "ssh"),
                                               ("deepspeed", "pdsh"), ("deepspeed", "openmpi")])
def test_no_multi_node_launch_kills_by_pattern(run_dir, launcher, backend):
    hosts = (Host("n1", 1), Host("n2", 1))
    spec = LaunchSpec(launcher=launcher, strategy="ddp" if launcher != "deepspeed" else "deepspeed", hosts=hosts,
                      hostfile="hf", launcher_backend=backend, launch_script=f"{run_dir}/launch_nodes.sh",
                      run_file=f"/abs/{run_dir}/run.json", deepspeed_env_file=f"/abs/{run_dir}/.deepspeed_env",
                      accelerate_config=f"{run_dir}/acc.yaml")
    if launcher == "deepspeed" and backend == "pdsh":
        # DeepSpeed's pdsh runner would hand the path to each node's shell unquoted: refused before anything
        with pytest.raises(UserError, match="DeepSpeed's pdsh runner passes it to each node's shell unquoted"):
            build(spec)
        return
    command = build(spec)
    text = "\n".join(command.files.values())
    assert "pkill" not in text and "killall" not in text
    assert command.stop is not None
    stop_text = "\n".join(command.stop.files.values())
    assert run_dir not in stop_text and spec.launch_id in stop_text
    assert command.env.get(ENV) == spec.launch_id or ENV in text


def test_stop_script_quotes_hosts():
    script = stop_script(["n1", "n-2"], new_id())
    assert "for host in n1 n-2; do" in script
    subprocess.run(["bash", "-n", "-c", script], check=True)


def test_a_single_node_launch_has_no_stop_command(tmp_path: Path):
    command = build(LaunchSpec(launcher="torchrun", strategy="ddp", nproc_per_node=2))
    assert command.stop is None and ENV not in command.env
