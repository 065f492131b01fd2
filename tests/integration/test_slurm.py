"""`dsbench launch --launcher slurm` against a real SLURM controller and daemon that the fixture starts (private
SLURM_CONF, nothing in /etc): a 1-node 2-task job, submitted without --wait, completes on its own and trains like
the same 2 ranks under DeepSpeed's launcher; a failing rank fails the job and is named; nothing is left."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration.conftest import LR_WARMUP, WORKER, ZERO2, dsbench, load_run
from tests.integration.slurm_cluster import SOCKET_PATH_MAX, Cluster, why_not

REASON = why_not()
pytestmark = [pytest.mark.dist, pytest.mark.skipif(REASON is not None, reason=REASON or "")]
AFTER = ["--", *WORKER]  # as the session's single-node runs (with their LR_WARMUP)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    slurm = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        slurm.start()
        yield slurm
    finally:
        pids = slurm.pids()
        slurm.stop()
        assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()], "a SLURM daemon was left running"
        procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        # no job step (and so no rank: ranks are the steps' children) and no daemon of this cluster
        assert "slurmstepd" not in procs and str(slurm.conf) not in procs, procs


def slurm(cluster, *args, timeout=600):
    return dsbench("launch", "--launcher", "slurm", *args, cwd=ROOT, env={"SLURM_CONF": str(cluster.conf)},
                   timeout=timeout)


def test_one_node_two_task_job_submitted_without_waiting_trains_like_deepspeed_launcher(cluster, runs, tmp_path):
    """Submitted without --wait (the 2-node job and the failing one wait): dsbench returns once sbatch has queued
    the job, which then trains on its own, as the deepspeed launcher's 2 ranks do."""
    result = slurm(cluster, "--nodes", "1", "--gpus-per-node", "2", *ZERO2, *LR_WARMUP, "--time", "10",
                   "--run-dir", str(tmp_path / "job"), *AFTER)
    assert result.returncode == 0 and "dsbench: submitted" in result.stdout, result.stdout[-3000:] + result.stderr
    job = re.search(r"Submitted batch job (\d+)", result.stdout).group(1)
    summary = tmp_path / "job" / "summary.json"
    deadline = time.monotonic() + 300
    while not summary.exists() and time.monotonic() < deadline:
        time.sleep(1)
    assert (tmp_path / "job" / f"slurm-{job}.out").exists()
    run = load_run(tmp_path / "job")
    assert run["header"][0]["world_size"] == 2 and run["summary"]["status"] == "ok"
    reference, folder = runs.get("zero2", ZERO2)  # the same 2 ranks under the deepspeed launcher
    assert reference.returncode == 0
    ours = [s["loss"] for s in run["steps"]]
    theirs = [s["loss"] for s in load_run(folder)["steps"]]
    assert max(abs(a - b) / abs(b) for a, b in zip(ours, theirs, strict=True)) < 1e-4


def test_failed_job_is_named_with_its_log(cluster, tmp_path):
    result = slurm(cluster, "--gpus-per-node", "2", *ZERO2, "--wait", "--env", "DSBENCH_FAULT=1:3",
                   "--run-dir", str(tmp_path / "bad"), *AFTER)
    assert result.returncode != 0
    assert re.search(r"SLURM job \d+ failed: \d+: \[rank 1 on [\w.-]+\] dsbench.train: error: RuntimeError: "
                     r"injected fault "
                     r"at step 3 \(DSBENCH_FAULT\); last lines of .*slurm-\d+\.out: ", result.stderr), result.stderr


def test_a_job_slurm_could_not_start_ends_the_wait_in_one_line(tmp_path):
    """A node whose slurmstepd cannot make the job step's socket (its spool path past the 107 bytes a Unix socket
    may have: the test cluster's own failure under pytest-xdist until 2026-12-01): SLURM cannot start the job. Under
    --no-requeue (the script's) it is cancelled rather than requeued and held, where `sbatch --wait` would wait
    for good; sbatch then returns 0, and dsbench, finding no summary.json, says the job never trained."""
    # as long as munged's socket (and its lock file beside it) may be: every step's socket is longer
    long = tmp_path / ("s" * (SOCKET_PATH_MAX - len(str(tmp_path)) - len("//munge.sock.lock")))
    long.mkdir()
    broken = Cluster(tmp_path / "cluster", sockets=long)
    try:
        broken.start()
        result = slurm(broken, "--gpus-per-node", "2", *ZERO2, "--wait", "--run-dir", str(tmp_path / "job"), *AFTER,
                       timeout=120)
    finally:
        broken.stop()
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert re.search(r"^dsbench: error: SLURM job \d+ ended without training \(no rank wrote .*summary\.json\): "
                     r"SLURM did not start it on its node", result.stderr, re.M), result.stderr
    assert "Traceback" not in result.stderr
    assert "step" in next(tmp_path.glob("cluster/slurmd-*.log")).read_text()  # the node's log names the socket


def test_two_node_job_on_the_test_bed(runs, tmp_path):
    """slurmd in each test-bed namespace: one task per node, each on its own host, losses as on one node."""
    from tests.integration.test_multinode import REASON as NO_TESTBED
    from tests.integration.test_multinode import assert_nothing_left

    if NO_TESTBED:
        pytest.skip(NO_TESTBED)
    up = dsbench("testbed", "up", "--nodes", "2", "--slots", "1", cwd=ROOT, timeout=120)
    assert up.returncode == 0, up.stderr
    two = None
    try:
        state = json.loads(Path("/run/dsbench-testbed/state.json").read_text())
        two = Cluster(tmp_path / "cluster", testbed=state)
        two.start()
        result = slurm(two, "--nodes", "2", "--gpus-per-node", "1", *ZERO2, *LR_WARMUP, "--wait",
                       "--run-dir", str(tmp_path / "job"), *AFTER)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        # waited on: the launch says the figures (the job's ranks write to its slurm-<id>.out, not this terminal)
        assert result.stdout.strip().splitlines()[-1].startswith(f"dsbench: finished {tmp_path / 'job'}: ")
    finally:
        if two:
            two.stop()
        down = dsbench("testbed", "down", cwd=ROOT, timeout=120)
    assert down.returncode == 0, down.stderr
    assert_nothing_left()
    run = load_run(tmp_path / "job")
    assert run["header"][0]["hostnames"] == ["dsb-n1", "dsb-n2"]
    reference, folder = runs.get("zero2", ZERO2)
    theirs = [s["loss"] for s in load_run(folder)["steps"]]
    ours = [s["loss"] for s in run["steps"]]
    assert max(abs(a - b) / abs(b) for a, b in zip(ours, theirs, strict=True)) < 1e-4
