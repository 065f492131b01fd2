"""Multi-node launches for real, across "nodes" that `dsbench testbed` makes on this machine (network namespaces,
one sshd each): DeepSpeed over pdsh and over ssh (its --no_ssh per-node mode), torchrun with c10d rendezvous
and accelerate with machine ranks, a failing rank named by its node, an unreachable node refused before launch.

Oracle for losses: the single-node run of the same world size (same model, data, seed and global batch).
Needs root, network namespaces, sshd and pdsh (make test installs them as root); skipped otherwise, with the
reason. After each test bed comes down, nothing of it may be left (namespaces, bridge, processes, ssh config).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration.conftest import FSDP, LLAMA, MB, STEPS, ZERO2, ZERO3, dsbench, load_run, note_launch

pytestmark = [pytest.mark.dist, pytest.mark.multinode]


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("ip", "/usr/sbin/sshd", "pdsh", "ssh", "mpirun"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/ensure_system_deps.sh installs it as root)"
    if subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
        return "network namespaces are not available here"
    return None


REASON = _why_not()
needs_testbed = pytest.mark.skipif(REASON is not None, reason=REASON or "")
WORKER = ["--", "--steps", str(STEPS), "--warmup", "2", "--quiet"]  # as the session's single-node runs


def assert_nothing_left() -> None:
    """No namespace, bridge, sshd of the test bed, rank, or ssh Include line remains."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "dsb-n" not in netns and "dsb-br0" not in links
    assert "/run/dsbench-testbed" not in procs, procs
    # a rank or daemon left on a node would still live in that node's (now nameless) network namespace
    ours = os.readlink("/proc/self/ns/net")
    elsewhere = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and os.readlink(proc / "ns" / "net") != ours:
                elsewhere.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue  # gone meanwhile, or a kernel thread
    assert not [args for args in elsewhere if args.strip()], elsewhere
    config = Path.home() / ".ssh" / "config"
    assert not config.exists() or "dsbench testbed" not in config.read_text()


@pytest.fixture(scope="module")
def hostfile() -> Path:
    """A test bed of 2 nodes x 2 slots for the module; torn down (and checked empty) at its end."""
    up = dsbench("testbed", "up", "--nodes", "2", "--slots", "2", cwd=ROOT, timeout=120)
    assert up.returncode == 0, up.stdout + up.stderr
    path = Path(up.stdout.strip().splitlines()[-1].split("hostfile: ")[1])
    yield path
    down = dsbench("testbed", "down", cwd=ROOT, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert_nothing_left()


def launched(runs, name: str, args: list[str]) -> tuple[dict, Path]:
    """`dsbench launch ARGS` once per session (the session's run cache, as the single-node references): the
    loaded run and its folder."""
    result, folder = runs.get(name, args)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return load_run(folder), folder


def losses(run: dict) -> list[float]:
    return [s["loss"] for s in run["steps"]]


ONE_PER_NODE = ["--include", "dsb-n1:0@dsb-n2:0"]
# the same slots left by --exclude, with an --env every rank gets (test_include_and_exclude_... reads this run)
ONE_PER_NODE_EXCLUDED = ["--exclude", "dsb-n1:1@dsb-n2:1", "--env", "DSBENCH_TAG=checked"]
# torch_3d as test_model_parallel.py launches it on one node (its run shared through the session's cache), the
# attention core recomputed (since 2026-12-01: that run carries the launched check of --recompute selective)
TORCH_3D = ["--strategy", "torch_3d", "--tp", "2", "--pipeline-stages", "2", "--launcher", "torchrun", "--model",
            "llama-tiny", *MB, "--grad-accum", "2", "--recompute", "selective"]
# every slot of both nodes at micro-batch 1: the global batch of the session's 2-rank ZeRO-2 run (4), its reference
ZERO2_EVERY_SLOT = ["--zero", "2", "--micro-batch", "1"]
MULTI = {  # name -> (multi-node launch args, single-node reference (a session run's name and args), hostnames)
    "zero2_2x1": ([*ZERO2, *ONE_PER_NODE_EXCLUDED], ("zero2", ZERO2), ["dsb-n1", "dsb-n2"]),
    "zero2_2x2": (ZERO2_EVERY_SLOT, ("zero2", ZERO2), ["dsb-n1", "dsb-n1", "dsb-n2", "dsb-n2"]),
    # ZeRO-3 across the nodes under DeepSpeed's ssh runner (until 2026-12-01 also under pdsh, zero3_2x1: the stage
    # does not change how a runner starts the ranks, and pdsh starts zero2_2x1's and zero2_2x2's)
    "zero3_ssh_2x1": ([*ZERO3, "--launcher-backend", "ssh", *ONE_PER_NODE], ("zero3", ZERO3), ["dsb-n1", "dsb-n2"]),
    "zero2_openmpi_2x2": ([*ZERO2_EVERY_SLOT, "--launcher-backend", "openmpi"], ("zero2", ZERO2),
                          ["dsb-n1", "dsb-n1", "dsb-n2", "dsb-n2"]),
    # HSDP (since 2026-12-01 in place of DDP on one slot a node, which the torchrun fault below still trains across
    # the nodes): each node's 2 ranks shard one copy, the copies all-reduce across the nodes; every slot at
    # micro-batch 1 against the session's 2-rank FSDP run at 2
    "torchrun_hsdp_2x2": ([*FSDP, "--dp-shard", "2", "--micro-batch", "1"], ("fsdp", FSDP),
                          ["dsb-n1", "dsb-n1", "dsb-n2", "dsb-n2"]),
    # tp 2 x pp 2 over 2 nodes: each TP group (ranks 0-1, 2-3) inside a node, the pipeline's sends across them
    "torch_3d_2x2": ([*TORCH_3D, *LLAMA], ("torch_3d_tp2_pp2_llama", [*TORCH_3D, "--num-gpus", "4", *LLAMA]),
                     ["dsb-n1", "dsb-n1", "dsb-n2", "dsb-n2"]),
    # a user's single-node accelerate YAML (trl's ZeRO-2, bf16) spread over the hostfile's machines in fp32: accelerate
    # launch once a node with its --machine_rank (until 2026-12-01 also with dsbench's own YAML from --launcher
    # accelerate --zero 2, accelerate_zero2_2x1: the same fan-out, whose argv tests/unit/test_launchers.py builds for
    # both; the YAML dsbench writes trains on one node in test_launch_strategies.py)
    "accelerate_yaml_2x1": (["--accelerate-config", str(ROOT / "tests" / "data" / "corpus" / "accelerate" /
                                                     "huggingface__trl__examples_accelerate_configs_deepspeed_zero2.yaml"),
                             "--precision", "fp32", *MB, *ONE_PER_NODE], ("zero2", ZERO2), ["dsb-n1", "dsb-n2"]),
}


@needs_testbed
@pytest.mark.parametrize("name", list(MULTI))
def test_two_nodes_train_like_one(hostfile, runs, name):
    args, (reference, reference_args), hosts = MULTI[name]
    run, _ = launched(runs, name, ["--hostfile", str(hostfile), *args])
    # the figures once, as the launch's last line: the session's ranks are --quiet (rank 0's own line, which a launch
    # across nodes leaves on: test_multinode_flow.py)
    said, _ = runs.get(name, ["--hostfile", str(hostfile), *args])  # the launch above, its output
    assert [line for line in (said.stdout + said.stderr).splitlines() if "by the wall clock" in line] == [
        said.stdout.strip().splitlines()[-1]]
    result, folder = runs.get(reference, reference_args)  # the single-node run (shared with other modules)
    assert result.returncode == 0, result.stderr[-2000:]
    header = run["header"][0]
    assert header["hostnames"] == hosts and header["world_size"] == len(hosts)
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses(run), losses(load_run(folder)), strict=True))
    assert worst < 1e-4, (name, worst)
    if name == "torchrun_hsdp_2x2":  # a shard group is 2 consecutive ranks (one node), a replica group 2 nodes
        assert header["dp_shard"] == 2
        assert run["summary"]["replicas"] == {"groups": 2, "ranks_per_group": 2, "agree": True,
                                              "differing_ranks": []}
    if name.startswith("torch_3d"):  # a TP group is 2 consecutive ranks: both on one node by the hosts above
        assert (header["tp"], header["pp"]) == (2, 2)
        norms = [[s["grad_norm"] for s in r["steps"]] for r in (run, load_run(folder))]
        assert max(abs(a - b) / b for a, b in zip(*norms, strict=True)) < 1e-4, norms


FAULTS = {  # launch args -> the rank to fail (on dsb-n2 in each layout)
    "deepspeed-pdsh": (["--zero", "2", *ONE_PER_NODE], 1),
    "deepspeed-openmpi": (["--zero", "2", "--launcher-backend", "openmpi"], 2),  # every slot: ranks 2, 3 on dsb-n2
    "torchrun": (["--strategy", "ddp", "--launcher", "torchrun", *ONE_PER_NODE], 1),
}


@needs_testbed
@pytest.mark.parametrize("name", list(FAULTS))
def test_a_failing_rank_ends_the_launch_and_names_its_node(hostfile, tmp_path, name):
    args, rank = FAULTS[name]
    result = dsbench("launch", *args, "--hostfile", str(hostfile), "--env", f"DSBENCH_FAULT={rank}:3",
                     "--run-dir", str(tmp_path / "fault"), *WORKER, cwd=ROOT)
    assert result.returncode != 0
    assert f"[rank {rank} on dsb-n2] dsbench.train: error: RuntimeError: injected fault at step 3" in result.stderr


@needs_testbed
def test_include_and_exclude_select_slots_as_deepspeed_documents(hostfile, runs):
    """--exclude dsb-n1:1@dsb-n2:1 leaves one slot a node, the slots the other 2x1 runs --include (zero2_2x1's run,
    whose losses test_two_nodes_train_like_one checks); the environment reaches every rank through
    .deepspeed_env. Every filter's slots, against DeepSpeed's own parser: tests/unit/test_hostfile.py."""
    run, folder = launched(runs, "zero2_2x1", ["--hostfile", str(hostfile), *MULTI["zero2_2x1"][0]])
    assert run["header"][0]["hostnames"] == ["dsb-n1", "dsb-n2"]
    env_file = (folder / ".deepspeed_env").read_text()
    assert "DSBENCH_TAG=checked" in env_file and "DS_ACCELERATOR=cpu" in env_file


@needs_testbed
def test_doctor_checks_every_node(hostfile):
    result = dsbench("doctor", "--hostfile", str(hostfile), "--json", cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    rows = json.loads(result.stdout)
    for name, address in (("dsb-n1", "10.213.0.1"), ("dsb-n2", "10.213.0.2")):
        checks = {r["check"]: r for r in rows if r["host"] == name}
        assert checks["ssh"]["status"] == checks["versions"]["status"] == "ok"
        assert checks["interface"]["detail"].startswith(f"eth0 {address}")  # gloo listens on the node's own link
    assert {r["check"]: r["status"] for r in rows if r["host"] == "dsb-n1"}["port"] == "ok"


@needs_testbed
def test_calibrate_measures_within_and_across_nodes(hostfile, tmp_path):
    profile_path = tmp_path / "profile.json"
    # --repeats 3: this test asserts what is measured and where, not how steadily (a quarter of the calibration's
    # time; the 2-rank calibration in test_calibrate.py keeps the default). --timeout 840: 4 ranks on 2 cores took
    # 280 s on a slow machine and over 300 in CI (2026-12-02), against calibrate's own 600 s default; below the
    # test's 900 s guard, so a slower machine still ends in calibrate's own one-line error
    result = dsbench("calibrate", "--hostfile", str(hostfile), "--model", "gpt2-tiny", "--repeats", "3", "--timeout",
                     "840", "--run-dir", str(tmp_path / "cal"), "-o", str(profile_path), cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    profile = json.loads(profile_path.read_text())
    assert profile["nodes"] == 2 and profile["world_size"] == 4 and profile["repeats"] == 3
    assert profile["hostnames"] == ["dsb-n1", "dsb-n1", "dsb-n2", "dsb-n2"]
    groups = profile["collectives"]
    assert groups["intra"]["ranks"] == [0, 1] and groups["inter"]["ranks"] == [0, 2]
    for group in ("world", "intra", "inter"):
        assert groups[group]["all-reduce"]["bandwidth_gbs"] > 0, group
    assert "zero3_tensor_s" in profile["rates"] and "fsdp_unit_s_per_micro_step" in profile["rates"]
    assert profile["deepspeed"]["zero3_step"]["samples"] == profile["fsdp"]["sharded_step"]["samples"] == 3
    # the sequence split within a node's ranks: GPT-2's layers under Ulysses (since 2026-12-01), and split by
    # DTensor's Megatron layout, with and without sequence parallelism (since 2026-12-01 too: its Conv1D layers,
    # engines/conv1d_parallel.py), not by AutoTP (calibrate_layers.split_kinds)
    assert profile["tensor_parallel"]["tp"] == 2 and "ulysses_layer_s" in profile["rates"]
    assert {"torch_forward_backward", "sp_forward_backward"} <= set(profile["tensor_parallel"])
    assert "autotp_forward_backward" not in profile["tensor_parallel"] and "torch_tp_layer_s" in profile["rates"]
    # the pipeline engines over every rank, one stage a rank, their sends crossing the link between the nodes
    pipeline = profile["pipeline"]
    assert pipeline["stages"] == 4 and set(pipeline["schedules"]) == {"1f1b", "interleaved", "interleaved-zb",
                                                                      "deepspeed"}
    assert "deepspeed_pipe_pass_s" in profile["rates"] and "torch_pp_1f1b_pass_s" in profile["rates"]


STOPS = {"deepspeed-pdsh": ["--zero", "2", *ONE_PER_NODE],
         "torchrun-ssh": ["--strategy", "ddp", "--launcher", "torchrun", *ONE_PER_NODE]}


@needs_testbed
@pytest.mark.parametrize("name", list(STOPS))
def test_stopping_a_multi_node_launch_ends_its_ranks_and_nothing_else(hostfile, tmp_path, name):
    """SIGTERM to `dsbench launch` across nodes: every rank of the launch ends, on every node; a process that only
    looks like a DeepSpeed launch (what DeepSpeed's pdsh runner would `pkill -f`) and lives on is untouched. The
    run folder's name is a regular expression that matches everything (`x.+`: pdsh takes no shell syntax)."""
    import signal
    import sys
    import time

    python = str(Path(sys.executable))
    decoy = subprocess.Popen(["bash", "-c", f"exec -a '{python} -u -m deepspeed.launcher.launch --decoy' sleep 600"])
    folder = tmp_path / "x.+"
    note_launch()
    launch = subprocess.Popen([sys.executable, "-m", "dsbench", "launch", *STOPS[name], "--hostfile", str(hostfile),
                               "--run-dir", str(folder), "--", "--steps", "100000", "--warmup", "1", "--quiet"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        started: list[str] = []
        seen = ""
        deadline = time.monotonic() + 240
        assert launch.stdout is not None
        while len(started) < 2 and time.monotonic() < deadline:
            line = launch.stdout.readline()
            seen += line
            if "dsbench.train: started" in line:
                started.append(line)
        assert len(started) == 2, "the ranks did not start"
        launch.send_signal(signal.SIGTERM)
        rest, _ = launch.communicate(timeout=120)
        assert launch.returncode == 128 + signal.SIGTERM, rest[-2000:]
        procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert str(folder) not in procs, procs  # no rank, per-node launcher or ssh of this launch is left
        assert decoy.poll() is None  # the look-alike survives: nothing was stopped by pattern
        import re

        launch_id = re.search(r"DSBENCH_LAUNCH_ID=([0-9a-f]{16})", seen).group(1)  # in the printed command
        assert not (Path("/tmp/dsbench-launches") / launch_id).exists()  # its pid records went with it
    finally:
        decoy.kill()
        if launch.poll() is None:
            launch.kill()
