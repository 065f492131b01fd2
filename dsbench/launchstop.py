"""Stopping a multi-node launch: exactly the processes it started, on every node, never by pattern.

Each process a multi-node launch starts on a node records its pid in a node-local folder named after the launch's
id (``/tmp/dsbench-launches/<id>/<pid>``, not the shared run folder, which other nodes may see): the per-node
launcher of an ssh fan-out (its shell records ``$$`` before it ``exec``s the launcher) and every rank (the worker
records itself as it starts, :func:`record_pid`). The id is random hex made by ``dsbench launch``
and reaches each process as ``DSBENCH_LAUNCH_ID``.

A node's stop command sends SIGTERM to each recorded pid whose environment holds that exact
``DSBENCH_LAUNCH_ID=<id>`` (``grep -Fxz``: a fixed string, the whole variable), so a pid the kernel gave to
another process since cannot be hit. ``pkill -f`` read a run folder path as a regular expression: ``x|.``
matched every worker of every run; this matches nothing but the launch's own processes.

Pure: the builders return shell text; :mod:`dsbench.runner` runs it.
"""

from __future__ import annotations

import os
import re
import secrets
import shlex

PID_ROOT = "/tmp/dsbench-launches"
"""Node-local: /tmp is per machine on a cluster (the shared run folder is not)."""
ENV = "DSBENCH_LAUNCH_ID"
_ID = re.compile(r"[0-9a-f]{16}")  # fullmatch: "$" would pass a final newline
SSH = ["ssh", "-o", "BatchMode=yes"]


def new_id() -> str:
    """A launch id: 64 random bits as hex (no character any shell or regex reads specially)."""
    return secrets.token_hex(8)


def valid_id(launch_id: str) -> bool:
    return bool(_ID.fullmatch(launch_id))


def pid_dir(launch_id: str) -> str:
    if not valid_id(launch_id):
        raise ValueError(f"not a launch id: {launch_id!r}")
    return f"{PID_ROOT}/{launch_id}"


def record_self(launch_id: str) -> str:
    """Shell that records the running shell's pid (``$$``, which ``exec`` hands to the launcher) for the stop."""
    folder = shlex.quote(pid_dir(launch_id))
    return f"mkdir -p -m 700 {folder} && : > {folder}/$$"


def node_stop(launch_id: str) -> str:
    """Shell run on one node: SIGTERM to every recorded pid that still belongs to this launch."""
    folder = shlex.quote(pid_dir(launch_id))
    marker = shlex.quote(f"{ENV}={launch_id}")
    # a recorded pid is signalled only while /proc/PID/environ holds the exact variable: a pid reused by another
    # process since never matches (environ is NUL-separated; -z reads it so, -F -x match the whole entry)
    return (f"for f in {folder}/*; do pid=${{f##*/}}; case $pid in ''|*[!0-9]*) continue;; esac; "
            f"grep -qzFx -- {marker} /proc/$pid/environ 2>/dev/null && kill -TERM \"$pid\" 2>/dev/null; done; "
            f"rm -rf -- {folder}; true")  # the launch is over: its records go with it


def stop_script(hosts: list[str], launch_id: str) -> str:
    """Bash that runs :func:`node_stop` on every host over ssh (15 s each at most), all at once."""
    remote = shlex.quote(node_stop(launch_id))
    return f"""#!/usr/bin/env bash
# Written by `dsbench launch`: stops this launch's processes on every node (pids recorded per node, checked
# against the launch id in their environment) and nothing else.
for host in {" ".join(shlex.quote(h) for h in hosts)}; do
  timeout 15 {shlex.join(SSH)} "$host" {remote} >/dev/null 2>&1 &
done
wait
"""


def record_pid(environ: dict[str, str] | None = None, pid: int | None = None) -> str | None:
    """Record this process under its launch's id (a rank of a multi-node launch), so the stop finds it; the path
    written, or None when the process belongs to no multi-node launch (:func:`forget_pid` removes it)."""
    launch_id = (os.environ if environ is None else environ).get(ENV, "")
    if not valid_id(launch_id):
        return None  # unset (a local launch, stopped through its process group) or not one dsbench made
    path = f"{pid_dir(launch_id)}/{os.getpid() if pid is None else pid}"
    try:
        os.makedirs(pid_dir(launch_id), mode=0o700, exist_ok=True)
        with open(path, "w", encoding="utf-8"):
            pass
    except OSError:
        return None  # /tmp not writable: the launcher's own stop still ends the rank
    return path


def forget_pid(path: str | None) -> None:
    """Remove a record made by :func:`record_pid` (the process is ending)."""
    if path is not None:
        try:
            os.unlink(path)
            os.rmdir(os.path.dirname(path))  # the launch's last process on this node removes its folder
        except OSError:
            pass  # gone already, or other processes of the launch still recorded there
