"""Shell syntax in hostnames, paths, --set values and --env values never executes anywhere.

Every way dsbench hands a command to a shell is executed here for real with hostile values: the printed
copy-pasteable line (``bash -c``), the sbatch script (``bash``, with ``srun`` and ``scontrol`` stubbed), and the
multi-node ssh script (``bash``, with ``ssh HOST CMD`` stubbed as the remote login shell running CMD). The program
at the end is a recorder that writes its argv and environment: the values must arrive verbatim, and the canary
file that each payload would create must never appear. Hostnames with shell syntax are refused outright.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from dsbench.errors import UserError
from dsbench.hostfile import HostfileError, parse_hostfile
from dsbench.launchers import LaunchCommand, LaunchSpec, SlurmJob, build

PAYLOADS = ["$(touch {c})", "`touch {c}`", "x; touch {c}", "x\ntouch {c}", "x' ; touch {c}; echo '", "x && touch {c}"]


def _stub(path: Path, body: str) -> Path:
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.fixture
def bed(tmp_path):
    """A recorder program, stubs for srun/scontrol/ssh, and the canary path."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    records = tmp_path / "records"
    records.mkdir()
    recorder = _stub(bin_dir / "recorder", f"""#!{sys.executable}
import json, os, sys
with open(os.path.join({str(records)!r}, str(os.getpid())), "w") as f:
    json.dump({{"argv": sys.argv[1:], "env": dict(os.environ)}}, f)
""")
    _stub(bin_dir / "srun", f'#!/bin/sh\nexec {recorder} "$@"\n')
    _stub(bin_dir / "scontrol", "#!/bin/sh\necho node1\n")
    # ssh [options] HOST CMD: the remote login shell runs CMD
    _stub(bin_dir / "ssh", '#!/bin/bash\nfor last; do :; done\nexec bash -c "$last"\n')
    return {"bin": bin_dir, "records": records, "recorder": str(recorder), "canary": tmp_path / "CANARY",
            "tmp": tmp_path}


def _recorded(bed) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(bed["records"].iterdir())]


def _run(bed, argv: list[str]) -> None:
    env = {**os.environ, "PATH": f"{bed['bin']}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_NODELIST": "node1"}
    done = subprocess.run(argv, env=env, cwd=bed["tmp"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


def _hostile(bed, payload: str) -> str:
    return payload.format(c=bed["canary"])


@pytest.mark.parametrize("launcher", ["deepspeed", "torchrun", "accelerate"])
@pytest.mark.parametrize("payload", PAYLOADS)
def test_the_printed_command_line_runs_hostile_values_as_data(bed, launcher, payload):
    value = _hostile(bed, payload)
    spec = LaunchSpec(launcher=launcher, strategy="deepspeed" if launcher != "torchrun" else "ddp",
                      ds_config=f"run{value}/ds_config.json", accelerate_config=f"run{value}/acc.yaml",
                      nproc_per_node=2, master_port=29501, extra_env=(("TAG", value),),
                      script_args=("--out", f"runs/{value}", "--dataset", value))
    command = build(spec)
    line = LaunchCommand(argv=[bed["recorder"], *command.argv[1:]], env=command.env).shell_line()
    _run(bed, ["bash", "-c", line])
    [record] = _recorded(bed)
    assert record["argv"] == command.argv[1:]
    assert record["env"]["TAG"] == value
    assert not bed["canary"].exists()


@pytest.mark.parametrize("payload", PAYLOADS)
def test_the_sbatch_script_runs_hostile_values_as_data(bed, payload):
    value = _hostile(bed, payload)
    folder = bed["tmp"] / "job"
    folder.mkdir()
    spec = LaunchSpec(launcher="slurm", strategy="deepspeed", nproc_per_node=2, cpu=True, master_port=29511,
                      python=sys.executable, cwd=str(bed["tmp"]), run_file=f"/runs/{value}/run.json",
                      extra_env=(("TAG", value),), script_args=("--dataset", value),
                      slurm=SlurmJob(script=str(folder / "job.sbatch"), output=str(folder / "slurm-%j.out")))
    command = build(spec)
    script = folder / "job.sbatch"
    script.write_text(command.files[str(script)])
    _run(bed, ["bash", str(script)])
    [record] = _recorded(bed)
    assert record["argv"][-2:] == ["--run-json", f"/runs/{value}/run.json"]
    assert record["env"]["TAG"] == value
    assert not bed["canary"].exists()


def test_a_line_break_in_an_sbatch_path_is_refused(bed):
    spec = LaunchSpec(launcher="slurm", strategy="deepspeed", nproc_per_node=2, cpu=True, master_port=29511,
                      python=sys.executable, cwd="/tmp/a\ntouch /tmp/x",
                      slurm=SlurmJob(script="/tmp/job.sbatch", output="/tmp/slurm-%j.out"))
    with pytest.raises(UserError, match="line break"):
        build(spec)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_the_multinode_ssh_script_runs_hostile_values_as_data(bed, payload):
    """torchrun across two nodes: the script ssh'es one command per node; the stub runs it as a login shell
    would. The launch folder itself has the hostile name (cd'ed into on every node)."""
    value = _hostile(bed, payload)
    cwd = bed["tmp"] / f"work{payload.format(c='CANARY')}"  # a folder name: the canary relative, no '/'
    cwd.mkdir()
    hosts = tuple(parse_hostfile(["node1 slots=1", "node2 slots=1"]))
    script = bed["tmp"] / "launch_nodes.sh"
    spec = LaunchSpec(launcher="torchrun", strategy="ddp", hostfile="hf", hosts=hosts, nproc_per_node=1,
                      master_port=29501, python=bed["recorder"], cwd=str(cwd), launch_script=str(script),
                      extra_env=(("TAG", value),), script_args=("--dataset", value))
    command = build(spec)
    script.write_text(command.files[str(script)])
    _run(bed, ["bash", str(script)])
    records = _recorded(bed)
    assert sorted(json.dumps(r["argv"]) for r in records) == sorted(json.dumps(argv[1:])
                                                                    for argv in command.remote.values())
    assert all(r["env"]["TAG"] == value for r in records) and len(records) == 2
    assert not bed["canary"].exists() and not list(bed["tmp"].rglob("CANARY"))


@pytest.mark.parametrize("name", ["$(reboot)", "`id`", "a;b", "a\nb", "-oProxyCommand=x", "a b", "a&&b"])
def test_hostnames_with_shell_syntax_are_refused(name):
    with pytest.raises(HostfileError):
        parse_hostfile([f"{name} slots=1"])


def test_set_values_reach_the_config_as_strings(bed):
    """A --set value is JSON-typed or a plain string: never evaluated, never run."""
    from dsbench.configs.overrides import apply_overrides

    value = _hostile(bed, PAYLOADS[0])
    config = apply_overrides({}, [f"csv_monitor.job_name={value}"])
    assert config == {"csv_monitor": {"job_name": value}}
    assert not bed["canary"].exists()
