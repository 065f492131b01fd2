"""dsbench doctor's judgement: facts from each host's probe in, one row per check out, FAIL with a fix."""

from __future__ import annotations

import copy

import pytest

from dsbench.doctor import failed, judge
from dsbench.worker.probe import facts as probe_facts

HERE = {"hostname": "head", "executable": "/venv/bin/python", "gpus": 0, "port_free": True,
        "versions": {"python": "3.11.7", "dsbench": "0.1.0", "torch": "2.13.0+cpu", "deepspeed": "0.19.8",
                     "accelerate": "1.15.0"},
        "interface": {"name": "eth0", "source": "hostname head -> 10.0.0.1", "exists": True,
                      "addresses": ["10.0.0.1"], "loopback": False},
        "jit": {"root": "/root/.cache/torch_extensions/py311_cpu", "unbuilt": [], "stale_locks": []},
        "gpu_stack": {"cuda": None, "cuda_available": False, "device_count": 0, "nccl": None, "env": {},
                      "fabric": {}}}
GPU_NODE = {"gpus": 8, "versions": {"torch": "2.13.0+cu128"},
            "gpu_stack": {"cuda": "12.8", "cuda_available": True, "device_count": 8, "nccl": "2.27.5",
                          "env": {"NCCL_IB_HCA": "mlx5"}, "fabric": {"mlx5_0": "infiniband", "mlx5_1": "infiniband"}}}


def node(**changes):
    facts = copy.deepcopy(HERE)
    for key, value in changes.items():
        facts[key] = {**facts[key], **value} if isinstance(value, dict) else value
    return facts


def rows_for(facts, slots=None, pdsh=True):
    slots = slots or {host: 2 for host in facts}
    return judge(facts, HERE, slots, master=next(iter(slots)), port=29500, pdsh_needed=True, pdsh_found=pdsh)


def status(rows, host, check):
    return next(r for r in rows if r.host == host and r.check == check)


def test_two_healthy_nodes_pass():
    rows = rows_for({"n1": node(), "n2": node()})
    assert not failed(rows)
    assert {r.check for r in rows if r.host == "n1"} == {"ssh", "versions", "port", "interface", "gpus", "cuda/nccl",
                                                          "jit ops"}
    assert "not checked: no GPU" in status(rows, "n1", "cuda/nccl").detail  # it says what it could not check
    assert not [r for r in rows if r.host == "n2" and r.check == "port"]  # the rendezvous port is the master's


@pytest.mark.parametrize(("facts", "check", "words"), [
    ({"versions": {"torch": "2.12.0"}}, "versions", "torch 2.12.0 (here 2.13.0+cpu)"),
    ({"interface": {"loopback": True, "source": "hostname n2 -> 127.0.1.1"}}, "interface", "loopback"),
    ({"interface": {"exists": False, "name": "ib0", "source": "GLOO_SOCKET_IFNAME"}}, "interface", "ib0"),
    ({"gpus": 1}, "gpus", "1 GPU(s) visible for slots=2"),
    ({"jit": {"stale_locks": ["/c/py311_cpu/cpu_adam/lock"]}}, "jit build lock", "cpu_adam/lock"),
])
def test_each_problem_is_a_failure_with_a_fix(facts, check, words):
    rows = rows_for({"n1": node(), "n2": node(**facts)})
    row = status(rows, "n2", check)
    assert row.status == "FAIL" and words in row.detail and row.fix and failed(rows)


def test_unreachable_host_and_missing_pdsh_are_named():
    rows = rows_for({"n1": node(), "n2": "ssh: connect to host n2 port 22: No route to host"}, pdsh=False)
    assert status(rows, "n2", "ssh").detail == "connect to host n2 port 22: No route to host"
    assert status(rows, "n2", "ssh").fix == "check the network path and firewall to n2"
    assert status(rows, "(this host)", "pdsh").fix == "apt-get install pdsh, or --launcher-backend ssh"
    probe_failed = rows_for({"n1": node(), "n2": "python -m dsbench.worker.probe failed: No module named dsbench"})
    assert status(probe_failed, "n2", "probe").status == "FAIL"


def test_busy_port_and_unbuilt_ops():
    rows = rows_for({"n1": node(port_free=False, jit={"unbuilt": ["async_io"]})})
    assert status(rows, "n1", "port").status == "FAIL"
    assert status(rows, "n1", "jit ops").status == "note" and "async_io" in status(rows, "n1", "jit ops").detail


def test_probe_facts_have_what_judge_reads():
    """The real probe on this machine feeds judge without a missing key."""
    facts = probe_facts(port=None)
    rows = judge({"localhost": facts}, facts, {"localhost": 2}, master="localhost", port=29500,
                 pdsh_needed=False, pdsh_found=False)
    assert {r.check for r in rows} >= {"versions", "interface", "gpus", "jit ops"}


def test_launch_refuses_a_node_with_other_versions(monkeypatch):
    """preflight_nodes: after ssh, each remote node's versions (probe --versions) must equal this host's."""
    from dsbench import runner
    from dsbench.envinfo import versions
    from dsbench.errors import UserError
    from dsbench.hostfile import parse_hostfile
    from dsbench.launchers import LaunchSpec

    spec = LaunchSpec(launcher="deepspeed", hostfile="hf", hosts=tuple(parse_hostfile(["n1 slots=1", "n2 slots=1"])),
                      python="/venv/bin/python", cwd="/work")
    other = {**versions(), "torch": "2.12.0"}
    monkeypatch.setattr(runner.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(runner, "ssh_problems", lambda hosts: {})
    monkeypatch.setattr(runner, "probe_host", lambda host, *a: {"versions": other if host == "n2" else versions()})
    with pytest.raises(UserError, match=r"host n2 runs torch 2\.12\.0 \(here .*\): install the same versions"):
        runner.preflight_nodes(spec)
    monkeypatch.setattr(runner, "probe_host", lambda host, *a: "python -m dsbench.worker.probe failed: No module")
    with pytest.raises(UserError, match="host n1: python -m dsbench.worker.probe failed"):
        runner.preflight_nodes(spec)


def gpu_rows(n2_stack=None, n2=None, here_gpu=True, slots=8):
    """Two 8-GPU nodes judged from a GPU head node (``HERE`` with the GPU node's stack)."""
    head = node(**GPU_NODE) if here_gpu else HERE
    first = node(**GPU_NODE)
    second = node(**{**GPU_NODE, **(n2 or {})})
    second["gpu_stack"] = {**second["gpu_stack"], **(n2_stack or {})}
    return judge({"n1": first, "n2": second}, head, {"n1": slots, "n2": slots}, master="n1", port=29500,
                 pdsh_needed=True, pdsh_found=True)


def test_a_healthy_gpu_cluster_shows_cuda_nccl_and_its_fabric():
    rows = gpu_rows()
    assert not failed(rows)
    assert status(rows, "n2", "cuda/nccl").detail == "CUDA 12.8, NCCL 2.27.5, 8 device(s) in torch"
    assert status(rows, "n2", "fabric").detail == "infiniband: mlx5_0, mlx5_1"
    assert status(rows, "n2", "nccl env").detail == "NCCL_*/FI_* NCCL_IB_HCA=mlx5"
    assert status(rows, "n2", "gpus").status == "ok"


@pytest.mark.parametrize(("n2_stack", "n2", "check", "state", "words"), [
    ({"cuda": None}, {}, "cuda/nccl", "FAIL", "is a CPU build"),
    ({"cuda_available": False}, {}, "cuda/nccl", "FAIL", "cannot use the GPUs"),
    ({"nccl": "2.21.5"}, {}, "cuda/nccl", "FAIL", "nccl 2.21.5 (here 2.27.5)"),
    ({"env": {}}, {}, "nccl env", "note", "none set; differs from this host's"),
    ({"fabric": {}}, {}, "fabric", "note", "NCCL goes over TCP sockets between nodes"),
    ({"fabric": {"rdmap0s6": "efa"}}, {}, "fabric", "ok", "efa: rdmap0s6"),
    ({}, {"gpus": 4}, "gpus", "FAIL", "4 GPU(s) visible for slots=8"),
])
def test_what_a_gpu_cluster_needs_is_checked(n2_stack, n2, check, state, words):
    row = status(gpu_rows(n2_stack, n2), "n2", check)
    assert row.status == state and words in row.detail and (row.fix or state == "ok" or check == "fabric")


def test_a_probe_without_the_gpu_checks_is_named():
    old = node(**GPU_NODE)
    del old["gpu_stack"]
    rows = judge({"n1": node(**GPU_NODE), "n2": old}, node(**GPU_NODE), {"n1": 8, "n2": 8}, master="n1",
                 port=29500, pdsh_needed=True, pdsh_found=True)
    assert "not checked" in status(rows, "n2", "cuda/nccl").detail


# what OpenSSH 9.2's client prints (taken from `ssh -o BatchMode=yes HOST true` on this machine), and the fix's start
@pytest.mark.parametrize(("said", "fix"), [
    ("ssh: Could not resolve hostname n2: Name or service not known", "make n2 resolvable: /etc/hosts, DNS"),
    ("ssh: connect to host n2 port 22: Connection refused", "start sshd on n2"),
    ("ssh: connect to host n2 port 22: Connection timed out", "check the network path and firewall to n2"),
    ("Host key verification failed.", "accept n2's host key once: ssh-keyscan n2 >> ~/.ssh/known_hosts"),
    ("root@n2: Permission denied (publickey,password).", "key-only login: ssh-copy-id n2"),
])
def test_an_ssh_failure_gets_the_fix_its_message_calls_for(said, fix):
    """A host that does not resolve or runs no sshd used to get `ssh-copy-id`, which cannot help it."""
    rows = rows_for({"n1": node(), "n2": f"ssh: {said}" if not said.startswith("ssh:") else said}, pdsh=False)
    assert status(rows, "n2", "ssh").fix.startswith(fix)
