"""A private SLURM cluster for the tests: munged, slurmctld and slurmd from Debian's packages, every file under
one folder and a private SLURM_CONF (nothing in /etc is read or changed). One node (this host, 127.0.0.1), or
one slurmd per node of a `dsbench testbed`: started in the node's network namespace (``nsenter --net``; ``ip
netns exec`` remounts /sys) with the node's hostname, /etc/hosts and resolv.conf, as the test bed's sshd.

Recipe from ../shared/FINDINGS.md (SLURM 22.05 on this machine): munged with its own key and socket
(slurm.conf AuthInfo=socket=...), proctrack/linuxproc and task/none (no cgroups needed), free ports.

The sockets (munged's, and the job steps' that slurmstepd makes in the spool folder) live in a short folder of
their own under /tmp (:func:`socket_folder`): a Unix socket's path holds at most 107 bytes, and under pytest-xdist
a test's folder (``/tmp/pytest-of-root/pytest-N/popen-gw1/test_two_node_job_on_the_test_0/cluster``) left the
step's socket 114 long. slurmstepd then failed, SLURM held the job ("launch failed requeued held") and ``sbatch
--wait`` waited until the test's 600 s ran out (found 2026-12-01; the "SLURM job stalls under load" of
docs/testing.md's run of 2026-11-26 was this, not the load).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from dsbench.envinfo import free_port  # the daemons' ports, outside the range outgoing connections take

DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch")


def why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (slurmd starts jobs as any user)"
    for path in DAEMONS:
        if not Path(path).exists():
            return f"{path} is not installed (scripts/ensure_system_deps.sh installs slurmctld, slurmd, munge)"
    return None


SOCKET_PATH_MAX = 107
"""The longest path a Unix socket can bind (sockaddr_un's sun_path is 108 bytes, with the terminating zero)."""


def socket_folder() -> Path:
    """A new folder under /tmp for the cluster's sockets, short whatever folder the test runs in."""
    return Path(tempfile.mkdtemp(prefix="dsb-slurm-", dir="/tmp"))


def slurm_conf(root: Path, sockets: Path, host: str, cpus: int, ctld_port: int, slurmd_port: int,
               nodes: dict[str, str] | None = None, controller: str = "127.0.0.1") -> str:
    """``sockets``: the folder of munged's socket and the nodes' spool folders (:func:`socket_folder`);
    ``nodes``: name -> address of the compute nodes (default: this host); ``controller``: the address the nodes
    reach slurmctld at."""
    nodes = nodes or {host: "127.0.0.1"}
    return "\n".join([
        "ClusterName=dsbench", f"SlurmctldHost={host}({controller})", "AuthType=auth/munge",
        f"AuthInfo=socket={sockets / 'munge.sock'}", "CredType=cred/munge", "SlurmUser=root", "SlurmdUser=root",
        f"SlurmctldPort={ctld_port}", f"SlurmdPort={slurmd_port}", f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={sockets / 'spool' / '%n'}", f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd-%n.pid'}", f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd-%n.log'}", "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "SwitchType=switch/none", "MpiDefault=none", "ReturnToService=2", "SchedulerType=sched/builtin",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "JobCompType=jobcomp/none",
        "AccountingStorageType=accounting_storage/none", "JobAcctGatherType=jobacct_gather/none",
        f"PlugStackConfig={root / 'plugstack.conf'}",
        *[f"NodeName={name} NodeAddr={address} CPUs={cpus} State=UNKNOWN" for name, address in nodes.items()],
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES", ""])


class Cluster:
    """Start the daemons (``start``), wait for the node to be idle; ``stop`` ends them all."""

    def __init__(self, root: Path, testbed: dict | None = None, sockets: Path | None = None) -> None:
        """``testbed``: the state of `dsbench testbed up` (its state.json) to run one slurmd per node;
        ``sockets``: a folder of the test's for the sockets, taken as it is (a path too long for a job step's
        socket makes every job's start fail), else a short one of the cluster's own."""
        self.root = root
        self.testbed = testbed
        self.conf = root / "slurm.conf"
        self.sockets = sockets or socket_folder()
        self.check_sockets = sockets is None
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self) -> None:
        root = self.root
        (root / "state").mkdir(parents=True, exist_ok=True)
        (self.sockets / "spool").mkdir()
        root.chmod(0o700)  # munged refuses a key in a folder others can write
        key = root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        (root / "plugstack.conf").write_text("")
        nodes = self.testbed["addresses"] if self.testbed else None
        controller = "10.213.0.254" if self.testbed else "127.0.0.1"  # the test bed's bridge (layout.HOST_ADDRESS)
        names = self.testbed["names"] if self.testbed else [socket.gethostname()]
        # a job step's socket: SPOOL/NODE/NODE_JOB.STEP, the step id up to 10 digits (the batch step's 4294967291)
        longest = max(len(str(self.sockets / "spool" / name / f"{name}_{'9' * 9}.4294967291")) for name in names)
        assert longest <= SOCKET_PATH_MAX or not self.check_sockets, f"a job step's socket would be {longest} long"
        self.conf.write_text(slurm_conf(root, self.sockets, socket.gethostname(), os.cpu_count() or 2,
                                        *two_free_ports(), nodes, controller))
        subprocess.run(["/usr/sbin/munged", f"--key-file={key}", f"--socket={self.sockets / 'munge.sock'}",
                        f"--pid-file={root / 'munged.pid'}", f"--log-file={root / 'munged.log'}",
                        f"--seed-file={root / 'munged.seed'}", "--force"], check=True, timeout=30)
        subprocess.run(["/usr/sbin/slurmctld", "-f", str(self.conf)], env=self.env, check=True, timeout=30)
        for argv in self.slurmd_commands():
            subprocess.run(argv, env=self.env, check=True, timeout=30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True)
            if state.stdout.split() == ["idle"]:
                return
            time.sleep(0.5)
        raise RuntimeError(f"the SLURM node never became idle: {state.stdout} {state.stderr}")

    def slurmd_commands(self) -> list[list[str]]:
        if not self.testbed:
            return [["/usr/sbin/slurmd", "-f", str(self.conf)]]
        files = Path(self.testbed["root"])
        return [["nsenter", f"--net=/run/netns/{name}", "unshare", "--mount", "--uts", "--propagation", "private",
                 "sh", "-c", f"mount --bind {files / 'hosts'} /etc/hosts && mount --bind {files / 'resolv.conf'} "
                 f"/etc/resolv.conf && hostname {name} && exec /usr/sbin/slurmd -f {self.conf} -N {name}"]
                for name in self.testbed["names"]]

    def pids(self) -> list[int]:
        out = []
        names = [f"slurmd-{n}.pid" for n in (self.testbed["names"] if self.testbed else [socket.gethostname()])]
        for name in (*names, "slurmctld.pid", "munged.pid"):
            path = self.root / name
            if path.exists() and path.read_text().strip().isdigit():
                out.append(int(path.read_text().strip()))
        return out

    def stop(self) -> None:
        """Cancel what is left, then TERM the daemons (slurmd first) and wait for them to go."""
        subprocess.run(["scancel", "--full", "-u", "root"], env=self.env, capture_output=True, timeout=30)
        pids = self.pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids):
            time.sleep(0.2)
        for pid in pids:
            if Path(f"/proc/{pid}").exists():
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.sockets, ignore_errors=True)


def two_free_ports() -> tuple[int, int]:
    """Two distinct free ports (slurmctld's, slurmd's). Two calls of free_port can pick one port, each free only
    until used: in the clean clone of e6968df1 (2026-12-05 05:28) both daemons got 22431, slurmctld logged "talking
    with itself", slurmd could not bind, and the node never became idle."""
    first = free_port()
    second = free_port()
    while second == first:
        second = free_port()
    return first, second
