"""``dsbench doctor``: will a launch on these hosts work? One row per host and check, with a fix for each failure.

:func:`judge` is pure (facts in, rows out); :func:`diagnose` gathers the facts: ``python -m
dsbench.worker.probe`` on this host and, over ssh, on every host of the hostfile (:mod:`dsbench.runner` runs
them). A FAIL row is something that would make a launch fail; a note is worth knowing (a JIT build to wait for).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Any

from dsbench.envinfo import MATCHED, version_differences
from dsbench.launchers import LOCAL_HOSTS
from dsbench.ssh_fix import ssh_fix


@dataclass(frozen=True, slots=True)
class Row:
    host: str
    check: str
    status: str
    """``ok``, ``FAIL`` or ``note``."""
    detail: str
    fix: str = ""


def _versions(host: str, facts: dict[str, Any], here: dict[str, Any]) -> Row:
    theirs = facts["versions"]
    differ = version_differences(here["versions"], theirs)
    if differ:
        return Row(host, "versions", "FAIL", "; ".join(differ),
                   "install the launching host's versions there (pip install -c constraints.txt -e '.[train]')")
    return Row(host, "versions", "ok", " ".join(f"{n} {theirs.get(n)}" for n in MATCHED))


def _interface(host: str, facts: dict[str, Any], multinode: bool) -> Row:
    net = facts["interface"]
    if not net["exists"]:
        return Row(host, "interface", "FAIL", f"{net['name']} ({net['source']}) does not exist",
                   "set GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME to an interface `ip addr` lists")
    if multinode and net.get("loopback"):
        return Row(host, "interface", "FAIL", f"gloo would listen on loopback ({net['source']}): other nodes "
                   "cannot reach this rank", "map the hostname to the node's address in /etc/hosts, or set "
                   "GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME to the nodes' network interface")
    return Row(host, "interface", "ok", f"{net['name']} {', '.join(net['addresses'])} ({net['source']})")


def _gpus(host: str, facts: dict[str, Any], slots: int) -> Row:
    gpus = facts["gpus"]
    if gpus == 0:
        return Row(host, "gpus", "note", f"no GPU: {slots} CPU rank(s) (DS_ACCELERATOR=cpu, gloo)")
    if gpus < slots:
        return Row(host, "gpus", "FAIL", f"{gpus} GPU(s) visible for slots={slots}",
                   f"slots={gpus} for {host} in the hostfile (or fix CUDA_VISIBLE_DEVICES)")
    return Row(host, "gpus", "ok", f"{gpus} GPU(s) for slots={slots}")


def _gpu_stack(host: str, facts: dict[str, Any], here: dict[str, Any], multinode: bool) -> list[Row]:
    """CUDA and NCCL as torch sees them, the NCCL_*/FI_* variables, InfiniBand/EFA; what a CPU host cannot check is
    named as not checked. A probe from before these checks (no ``gpu_stack``) says so."""
    stack, ours = facts.get("gpu_stack"), here.get("gpu_stack") or {}
    if stack is None:
        return [Row(host, "cuda/nccl", "note", "not checked: this host's dsbench predates the check")]
    env = ", ".join(f"{k}={v}" for k, v in stack["env"].items()) or "none set"
    if not facts["gpus"]:
        return [Row(host, "cuda/nccl", "note", "not checked: no GPU (CUDA, NCCL, InfiniBand/EFA apply to GPU "
                    f"hosts); NCCL_*/FI_* {env}")]
    rows = []
    if not stack["cuda"]:
        rows.append(Row(host, "cuda/nccl", "FAIL", f"{facts['gpus']} GPU(s) but torch {facts['versions'].get('torch')}"
                        " is a CPU build", "install a CUDA build of torch in this environment"))
    elif not stack["cuda_available"]:
        rows.append(Row(host, "cuda/nccl", "FAIL", f"torch built for CUDA {stack['cuda']} cannot use the GPUs",
                        "check the NVIDIA driver (nvidia-smi) against the CUDA version torch was built for"))
    else:
        differ = [f"{k} {stack[k]} (here {ours.get(k)})" for k in ("cuda", "nccl") if ours and stack[k] != ours.get(k)]
        rows.append(Row(host, "cuda/nccl", "FAIL" if differ else "ok",
                        "; ".join(differ) if differ else f"CUDA {stack['cuda']}, NCCL {stack['nccl']}, "
                        f"{stack['device_count']} device(s) in torch",
                        "the same torch build on every node" if differ else ""))
    differ_env = bool(ours) and stack["env"] != ours.get("env")
    rows.append(Row(host, "nccl env", "note" if differ_env else "ok", f"NCCL_*/FI_* {env}"
                    + ("; differs from this host's" if differ_env else ""),
                    "export the same NCCL_*/FI_* on every node (DeepSpeed's .deepspeed_env)" if differ_env else ""))
    fabric = stack["fabric"]
    if fabric:
        kinds = sorted(set(fabric.values()))
        rows.append(Row(host, "fabric", "ok", f"{'/'.join(kinds)}: {', '.join(fabric)}"))
    else:
        rows.append(Row(host, "fabric", "note" if multinode else "ok",
                        "no InfiniBand or EFA device: NCCL goes over TCP sockets between nodes" if multinode else
                        "no InfiniBand or EFA device (one node: NVLink/PCIe only)"))
    return rows


def _jit(host: str, facts: dict[str, Any]) -> list[Row]:
    jit = facts["jit"]
    rows = [Row(host, "jit build lock", "FAIL", f"{lock}: left by an interrupted build; a DeepSpeed run that "
                "loads this op would wait on it forever", f"rm {lock} (if no build is running)")
            for lock in jit["stale_locks"]]
    if jit["unbuilt"]:
        rows.append(Row(host, "jit ops", "note", f"will build on first use: {', '.join(jit['unbuilt'])} "
                        f"(in {jit['root']}; ~40 s to ~5 min each on 2 cores)"))
    else:
        rows.append(Row(host, "jit ops", "ok", f"built ({jit['root']})"))
    return rows


def judge(facts: dict[str, dict[str, Any] | str], here: dict[str, Any], slots: dict[str, int], master: str,
          port: int, pdsh_needed: bool, pdsh_found: bool) -> list[Row]:
    """Rows for every host: ``facts`` maps a host to its probe's facts, or to why none came back."""
    rows = []
    multinode = len(slots) > 1 or next(iter(slots)) not in LOCAL_HOSTS
    if pdsh_needed:
        rows.append(Row("(this host)", "pdsh", "ok" if pdsh_found else "FAIL",
                        "found" if pdsh_found else "not installed (DeepSpeed's default multi-node launcher)",
                        "" if pdsh_found else "apt-get install pdsh, or --launcher-backend ssh"))
    for host, found in facts.items():
        remote = host not in LOCAL_HOSTS
        if isinstance(found, str):
            if found.startswith("ssh:"):
                rows.append(Row(host, "ssh", "FAIL", found.removeprefix("ssh:").strip(), ssh_fix(host, found)))
            else:
                rows.append(Row(host, "probe", "FAIL", found, f"install the project at the same path on {host}, "
                                f"with the same Python ({here['executable']})"))
            continue
        if remote:
            rows.append(Row(host, "ssh", "ok", f"key-only login works (hostname {found['hostname']})"))
        rows.append(_versions(host, found, here))
        if host == master:
            free = found["port_free"]
            rows.append(Row(host, "port", "ok" if free else "FAIL", f"{port} {'free' if free else 'in use'}",
                            "" if free else "--master-port with a free port"))
        rows.append(_interface(host, found, multinode))
        rows.append(_gpus(host, found, slots[host]))
        rows.extend(_gpu_stack(host, found, here, multinode))
        rows.extend(_jit(host, found))
    return rows


def failed(rows: list[Row]) -> bool:
    return any(row.status == "FAIL" for row in rows)


def diagnose(hostfile: str | None, python: str, cwd: str, port: int, default_slots: int) -> list[Row]:
    """Probe this host and every host of ``hostfile`` (in parallel), then judge."""
    from dsbench.hostfile import read_hostfile
    from dsbench.runner import probe_host, probe_hosts

    slots = {h.name: h.slots for h in read_hostfile(hostfile)} if hostfile else {"localhost": default_slots}
    here = probe_host(None, python, cwd, port)
    if isinstance(here, str):
        return [Row("(this host)", "probe", "FAIL", here, "reinstall dsbench in this environment (make venv)")]
    remote = probe_hosts([h for h in slots if h not in LOCAL_HOSTS], python, cwd, port)
    facts = {h: remote.get(h, here) for h in slots}
    return judge(facts, here, slots, master=next(iter(slots)), port=port, pdsh_needed=bool(remote),
                 pdsh_found=shutil.which("pdsh") is not None)
