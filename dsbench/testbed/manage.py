"""Bring the test bed up, down, or report it: runs what :mod:`dsbench.testbed.layout` describes.

Needs root (network namespaces, bridges, mounts) and Debian's openssh-server and pdsh. ``up`` refuses when a
test bed (or what is left of one) exists; any failure part-way tears down what was made. ``down`` removes
everything dsbench made, found by name even when the state file is gone (an interrupted ``up``): every
process in the nodes' namespaces, the namespaces, the bridge, the ``Include`` line in ~/.ssh/config and the
folder. The launching host reaches the nodes by name through that ``Include`` (DeepSpeed's pre-check and
pdsh call plain ``ssh``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from dsbench.errors import UserError
from dsbench.io import atomic_write_text
from dsbench.runner import check
from dsbench.testbed.layout import BRIDGE, PREFIX, Testbed, veth_of

STATE = "state.json"
INCLUDE_MARK = "# added by dsbench testbed"


def testbed_dir() -> Path:
    """Where the test bed keeps its files (``DSBENCH_TESTBED_DIR``, default /run/dsbench-testbed)."""
    return Path(os.environ.get("DSBENCH_TESTBED_DIR", "/run/dsbench-testbed"))


def preflight() -> None:
    """One line naming what is missing: root, iproute2's netns, sshd, pdsh."""
    if os.geteuid() != 0:
        raise UserError("dsbench testbed needs root (it makes network namespaces and a bridge); run it as root")
    for tool, package in (("ip", "iproute2"), ("/usr/sbin/sshd", "openssh-server"), ("ssh-keygen", "openssh-client"),
                          ("pdsh", "pdsh"), ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            raise UserError(f"{tool} is missing: apt-get install {package} (make test installs it as root)")
    try:
        check(["ip", "netns", "list"], "network namespaces are not available")
    except UserError as exc:
        raise UserError(f"{exc} (a container without CAP_SYS_ADMIN cannot make them)") from None


def leftovers() -> dict[str, Any]:
    """What exists of a test bed, found by name: namespaces, the bridge, the state file."""
    names = [line.split()[0] for line in check(["ip", "netns", "list"], "ip netns list").stdout.splitlines()
             if line.startswith(f"{PREFIX}-n")]
    bridge = check(["ip", "-o", "link", "show"], "ip link show").stdout.count(f": {BRIDGE}:") > 0
    return {"namespaces": sorted(names), "bridge": bridge, "state": (testbed_dir() / STATE).exists()}


def up(testbed: Testbed) -> Testbed:
    """Make the nodes; on any failure, remove what was made and re-raise."""
    preflight()
    found = leftovers()
    if found["namespaces"] or found["bridge"] or found["state"]:
        raise UserError(f"a test bed is already up ({', '.join(found['namespaces']) or BRIDGE}): "
                        "`dsbench testbed down` first")
    try:
        _write_files(testbed)
        for argv in testbed.network_commands():
            check(argv, _what(argv))
        for name in testbed.names():
            check(testbed.sshd_command(name), f"testbed up: sshd on {name}")
        _include_ssh_config(testbed.ssh_config)
        _wait_for_ssh(testbed)
    except BaseException:
        down(quiet=True)
        raise
    atomic_write_text(testbed.root / STATE, json.dumps({**testbed.to_dict(), "created": time.time()}, indent=2))
    return testbed


def _what(argv: list[str]) -> str:
    """How a failing network command is named: the flag it serves for shaping, else the command."""
    if "netem" in argv:
        return "testbed up: --latency needs tc's netem qdisc (kernel CONFIG_NET_SCH_NETEM)"
    if "tbf" in argv:
        return "testbed up: --bandwidth needs tc's tbf qdisc (kernel CONFIG_NET_SCH_TBF)"
    return f"testbed up: {' '.join(argv[:4])}"


def _write_files(testbed: Testbed) -> None:
    root = testbed.root
    root.mkdir(parents=True, exist_ok=True)
    (root / "partial").write_text("up in progress\n")  # so that `down` cleans up after an interrupted `up`
    check(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "dsbench-testbed", "-f", str(testbed.key)],
          "testbed up: ssh-keygen")
    shutil.copy(f"{testbed.key}.pub", root / "authorized_keys")
    atomic_write_text(root / "hosts", testbed.hosts_text())
    atomic_write_text(root / "resolv.conf", "")
    atomic_write_text(testbed.ssh_config, testbed.ssh_config_text())
    atomic_write_text(testbed.hostfile, testbed.hostfile_text())
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation folder
    for name in testbed.names():
        node = testbed.node_dir(name)
        node.mkdir(exist_ok=True)
        check(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(node / "ssh_host_ed25519_key")],
              f"testbed up: host key of {name}")
        atomic_write_text(node / "sshd_config", testbed.sshd_config_text(name))


def _wait_for_ssh(testbed: Testbed, timeout: float = 20) -> None:
    """Every node answers ``ssh NAME hostname`` with its own name."""
    deadline = time.monotonic() + timeout
    for name in testbed.names():
        while True:
            try:
                answer = check(["ssh", name, "hostname"], f"testbed up: ssh {name}", timeout=10).stdout.strip()
            except UserError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
                continue
            if answer != name:
                raise UserError(f"testbed up: {name} answered as {answer!r}")
            break


def _user_ssh_config() -> Path:
    return Path.home() / ".ssh" / "config"


def _include_ssh_config(config: Path) -> None:
    """Put ``Include CONFIG`` first in ~/.ssh/config (Include must precede Host blocks to apply to all)."""
    path = _user_ssh_config()
    path.parent.mkdir(mode=0o700, exist_ok=True)
    old = path.read_text() if path.exists() else ""
    atomic_write_text(path, f"Include {config} {INCLUDE_MARK}\n" + old)


def _remove_include() -> None:
    path = _user_ssh_config()
    if path.exists():
        lines = path.read_text().splitlines(keepends=True)
        kept = [line for line in lines if not line.rstrip().endswith(INCLUDE_MARK)]
        if len(kept) != len(lines):
            atomic_write_text(path, "".join(kept))


def _kill_namespace_processes(name: str) -> None:
    """TERM, then KILL after 3 s, every process in the node's network namespace (sshd, ranks)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = [int(p) for p in check(["ip", "netns", "pids", name], f"ip netns pids {name}").stdout.split()]
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 3
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if Path(f"/proc/{p}").exists()]
            time.sleep(0.1)
        if not pids:
            return


def down(quiet: bool = False) -> list[str]:
    """Remove the test bed; returns what was removed. Nothing to remove is an error unless ``quiet``."""
    found = leftovers()
    root = testbed_dir()
    if not (found["namespaces"] or found["bridge"] or root.exists()):
        if quiet:
            return []
        raise UserError("no test bed is up (`dsbench testbed up --nodes N` makes one)")
    removed = []
    links = check(["ip", "-o", "link", "show"], "ip link show").stdout
    for name in found["namespaces"]:
        _kill_namespace_processes(name)
        veth = veth_of(name)
        if f": {veth}@" in links:  # deleting one end removes the pair now; a namespace's own go later, async
            check(["ip", "link", "del", veth], f"testbed down: ip link del {veth}")
        check(["ip", "netns", "del", name], f"testbed down: ip netns del {name}")
        removed.append(f"namespace {name}")
    if found["bridge"]:
        check(["ip", "link", "del", BRIDGE], f"testbed down: ip link del {BRIDGE}")
        removed.append(f"bridge {BRIDGE}")
    _remove_include()
    if root.exists():
        shutil.rmtree(root)
        removed.append(f"folder {root}")
    return removed


def status() -> dict[str, Any]:
    """The test bed's state and, per node, whether its namespace exists and its sshd answers."""
    found = leftovers() if os.geteuid() == 0 else {"namespaces": [], "bridge": False, "state": False}
    path = testbed_dir() / STATE
    state = json.loads(path.read_text()) if path.exists() else None
    nodes = []
    for name in (state or {}).get("names", found["namespaces"]):
        pid_file = testbed_dir() / name / "sshd.pid"
        alive = pid_file.exists() and Path(f"/proc/{pid_file.read_text().strip()}").exists()
        nodes.append({"name": name, "address": (state or {}).get("addresses", {}).get(name),
                      "namespace": name in found["namespaces"], "sshd": alive})
    return {"up": state is not None, "partial": state is None and bool(found["namespaces"] or found["bridge"]),
            "state": state, "nodes": nodes, "bridge": found["bridge"]}
