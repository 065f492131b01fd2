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
    assert up.returncode == 0, up.stderr  # before the try: a test bed it did not bring up is not its to take down
    try:
        printed = up.stdout.strip().splitlines()[-1].removeprefix("hostfile: ")
        again = dsbench("testbed", "up", "--nodes", "2", cwd=tmp_path)
        assert again.returncode == 2 and "a test bed is already up" in again.stderr
        result = dsbench("launch", "--hostfile", printed, "--zero", "2", "--model", "gpt2-tiny", "--run-dir", "D",
                         "--", "--steps", "10", cwd=tmp_path, timeout=600)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        header = json.loads((tmp_path / "D" / "metrics.jsonl").read_text().splitlines()[0])
        assert sorted(set(header["hostnames"])) == ["dsb-n1", "dsb-n2"]
        # the figures once: rank 0's run: line, forwarded from its node (whose disk need not be this one); the
        # launch's last line points to it (LaunchSpec.rank_prints_summary; the test bed's nodes share this disk)
        assert len([line for line in (result.stdout + result.stderr).splitlines() if "by the wall clock" in line]) == 1
        assert result.stdout.strip().splitlines()[-1] == ("dsbench: finished D (its figures: rank 0's run: line "
                                                          "above); tables and plots: dsbench report D")
        # a node that cannot be reached is refused before anything starts, naming it
        os.kill(int(Path("/run/dsbench-testbed/dsb-n2/sshd.pid").read_text()), 9)
        refused = dsbench("launch", "--hostfile", printed, "--zero", "2", "--run-dir", "E", "--", "--steps", "3",
                          cwd=tmp_path, timeout=120)
        # sshd is gone: ssh's "Connection refused" calls for sshd, not a key (until 2026-12-03: ssh-copy-id)
        assert refused.returncode == 2 and "host dsb-n2 is not reachable by ssh (" in refused.stderr
        assert "start sshd on dsb-n2" in refused.stderr, refused.stderr
        doctor = dsbench("doctor", "--hostfile", printed, "--json", cwd=tmp_path, timeout=120)
        assert doctor.returncode == 1, doctor.stdout
        [ssh] = [r for r in json.loads(doctor.stdout) if r["host"] == "dsb-n2" and r["check"] == "ssh"]
        assert ssh["status"] == "FAIL" and ssh["fix"].startswith("start sshd on dsb-n2"), ssh
    finally:
        down = dsbench("testbed", "down", cwd=tmp_path, timeout=120)
    assert down.returncode == 0, down.stderr
    assert_nothing_left()
    assert dsbench("testbed", "down", cwd=tmp_path).returncode == 2  # nothing to take down


TRANSFER = """
import socket, sys, time
mode, addr, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "serve":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((addr, 5199)); s.listen(1)
    print("ready", flush=True)
    c, _ = s.accept(); got = 0
    while got < nbytes:
        got += len(c.recv(1 << 16))
    c.sendall(b"k")
else:
    c = socket.create_connection((addr, 5199)); t = time.perf_counter(); c.sendall(bytes(nbytes)); c.recv(1)
    print(time.perf_counter() - t)
"""


def _transfer_seconds(sender: str, receiver: str, address: str, nbytes: int) -> float:
    """Seconds to send ``nbytes`` over TCP from node ``sender`` to ``address`` on node ``receiver``."""
    import subprocess
    import sys

    server = subprocess.Popen(["ip", "netns", "exec", receiver, sys.executable, "-c", TRANSFER, "serve", address,
                               str(nbytes)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        sent = subprocess.run(["ip", "netns", "exec", sender, sys.executable, "-c", TRANSFER, "send", address,
                               str(nbytes)], capture_output=True, text=True, timeout=60, check=True)
        return float(sent.stdout)
    finally:
        server.wait(timeout=30)


@needs_testbed
def test_bandwidth_shapes_both_directions(tmp_path):
    """--bandwidth 20mbit: 2.5 MB take at least the 1.0 s the rate allows, each way (a lower bound: a shaped link
    cannot be faster); unshaped, the same transfer is far quicker."""
    up = dsbench("testbed", "up", "--nodes", "2", "--bandwidth", "20mbit", cwd=tmp_path, timeout=120)
    assert up.returncode == 0, up.stderr  # before the try: a test bed it did not bring up is not its to take down
    try:
        assert "links: 20mbit" in dsbench("testbed", "status", cwd=tmp_path).stdout
        nbytes = 2_500_000
        expected = nbytes * 8 / 20e6
        forth = _transfer_seconds("dsb-n1", "dsb-n2", "10.213.0.2", nbytes)
        back = _transfer_seconds("dsb-n2", "dsb-n1", "10.213.0.1", nbytes)
        assert 0.9 * expected < forth < 3 * expected and 0.9 * expected < back < 3 * expected, (forth, back)
    finally:
        dsbench("testbed", "down", cwd=tmp_path, timeout=120)
    assert dsbench("testbed", "up", "--nodes", "2", cwd=tmp_path, timeout=120).returncode == 0
    try:
        assert _transfer_seconds("dsb-n1", "dsb-n2", "10.213.0.2", 2_500_000) < 0.3 * expected
    finally:
        assert dsbench("testbed", "down", cwd=tmp_path, timeout=120).returncode == 0
    assert_nothing_left()


@needs_testbed
def test_latency_needs_netem_and_says_so(tmp_path):
    """This machine's kernel has tbf but not netem: --latency fails in one line naming the qdisc, and leaves
    nothing; where netem exists the test bed comes up with the delay."""
    up = dsbench("testbed", "up", "--nodes", "2", "--latency", "5", cwd=tmp_path, timeout=120)
    if up.returncode == 0:
        assert "5 ms" in up.stdout
        assert dsbench("testbed", "down", cwd=tmp_path, timeout=120).returncode == 0
    else:
        assert up.returncode == 2 and "--latency needs tc's netem qdisc" in up.stderr, up.stderr
        assert len(up.stderr.strip().splitlines()) == 1
    assert_nothing_left()


@needs_testbed
def test_whatif_measures_a_slow_link_beside_the_planner(tmp_path):
    """Two strategies on 2 nodes, unshaped and at 20 Mbit/s: the slow link costs each at least half the
    planner's communication time per step (the bytes cannot cross faster than the rate; overlap with compute
    can hide a little), and the test bed is gone afterwards."""
    out = tmp_path / "whatif"
    result = dsbench("whatif", "--links", "unshaped,20mbit", "--strategies", "ddp,zero2", "--steps", "4",
                     "--warmup", "1", "--out", str(out), "--quiet", cwd=tmp_path, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = {(r["link"], r["strategy"]): r for r in json.loads((out / "whatif.json").read_text())["rows"]}
    for strategy in ("ddp", "zero2"):
        slow, fast = rows["20mbit", strategy], rows["unshaped", strategy]
        assert slow["tokens_per_s"] < fast["tokens_per_s"]
        assert 0.5 * slow["predicted_comm_s"] < slow["extra_step_s"] < 5 * slow["predicted_comm_s"], slow
    assert (out / "whatif.png").stat().st_size > 0 and "| 20mbit | ddp |" in (out / "whatif.md").read_text()
    assert_nothing_left()
