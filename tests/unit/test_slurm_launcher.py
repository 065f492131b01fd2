"""--launcher slurm: the sbatch script (pure), the world size it asks for, and the failed-job line."""

from __future__ import annotations

import re
import subprocess

import pytest

from dsbench.errors import UserError
from dsbench.launch_log import slurm_failure
from dsbench.launchers import LaunchSpec, SlurmJob, build


def spec(cpu=True, **job):
    return LaunchSpec(launcher="slurm", strategy="deepspeed", nproc_per_node=4, cpu=cpu, master_port=29511,
                      python="/venv/bin/python", cwd="/work/project", run_file="/runs/a b/run.json",
                      slurm=SlurmJob(script="/runs/a b/job.sbatch", output="/runs/a b/slurm-%j.out", **job))


def test_script_asks_for_nodes_times_ranks_and_runs_one_srun():
    s = spec(nodes=2, partition="gpu", time="02:00:00", account="ml", wait=True)
    command = build(s)
    assert s.world_size() == 8 and s.nodes() == 2
    assert command.argv == ["sbatch", "--output=/runs/a b/slurm-%j.out", "--chdir=/work/project", "--wait",
                            "/runs/a b/job.sbatch"]  # arguments, not #SBATCH lines: sbatch splits those at spaces
    text = command.files["/runs/a b/job.sbatch"]
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --partition=gpu",
                 "#SBATCH --time=02:00:00", "#SBATCH --account=ml", "#SBATCH --no-requeue",
                 "export DS_ACCELERATOR=cpu", "export MASTER_ADDR MASTER_PORT=29511",
                 "srun --kill-on-bad-exit=1 --label /venv/bin/python -m dsbench.train --run-json '/runs/a b/run.json'"):
        assert line in text.splitlines(), line
    assert "--gpus-per-node" not in text  # CPU ranks ask for no GPUs
    assert "#SBATCH --gpus-per-node=4" in build(spec(cpu=False)).files["/runs/a b/job.sbatch"]
    assert "DS_ACCELERATOR" not in build(spec(cpu=False)).files["/runs/a b/job.sbatch"]


def test_script_is_valid_bash():
    text = build(spec(nodes=3)).files["/runs/a b/job.sbatch"]
    assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


@pytest.mark.parametrize(("job", "needle"), [
    ({"nodes": 0}, "--nodes must be >= 1"), ({"time": "soon"}, "--time 'soon'"),
    ({"partition": "a b"}, "--partition 'a b'"), ({"account": "$(id)"}, "--account '$(id)'"),
    ({"partition": "gpu\n"}, "--partition 'gpu\\n'"), ({"time": "\u0661\u0662"}, "--time"),
    ({"time": "30\n"}, "--time '30\\n'"), ({"partition": "gpu,"}, "--partition 'gpu,'"),
])
def test_bad_job_settings_are_one_line_errors(job, needle):
    with pytest.raises(UserError, match=re.escape(needle)):
        SlurmJob(**job)


@pytest.mark.parametrize("time", ["30", "30:00", "02:00:00", "1-00", "1-12:00:00"])
def test_time_limits_sbatch_reads(time):
    assert SlurmJob(time=time).time == time


def test_a_partition_list_is_valid():
    assert SlurmJob(partition="gpu,debug").partition == "gpu,debug"


@pytest.mark.parametrize("folder, pattern", [("/runs/my runs", "/runs/my runs/slurm-%j.out"),
                                             ("/runs/100%u", "/runs/100%%u/slurm-%j.out")])
def test_run_folders_with_spaces_and_percent_reach_sbatch_whole(folder, pattern):
    """sbatch expands %u in --output and splits #SBATCH lines at spaces: the output lands where dsbench reads it."""
    job = SlurmJob(script=f"{folder}/job.sbatch", output=f"{folder}/slurm-%j.out")
    command = build(LaunchSpec(launcher="slurm", strategy="ddp", cwd=folder, slurm=job))
    assert command.argv[1:3] == [f"--output={pattern}", f"--chdir={folder}"]
    assert "--output" not in command.files[job.script] and "--chdir" not in command.files[job.script]


def test_failed_job_line_names_the_rank_and_the_log_tail(tmp_path):
    (tmp_path / "launch.log").write_text("sbatch --wait job.sbatch\nSubmitted batch job 42\n")
    (tmp_path / "slurm-42.out").write_text("0: step 1/4\n"
                                           "1: [rank 1 on dsb-n2] dsbench.train: error: RuntimeError: boom\n"
                                           "srun: error: vm: task 1: Exited with exit code 1\n")
    line = slurm_failure(tmp_path / "launch.log", str(tmp_path / "slurm-%j.out"))
    assert line.startswith("SLURM job 42 failed: 1: [rank 1 on dsb-n2] dsbench.train: error: RuntimeError: boom; "
                           "last lines of")
    assert line.endswith("srun: error: vm: task 1: Exited with exit code 1") and "\n" not in line
    (tmp_path / "launch.log").write_text("sbatch: error: Batch job submission failed: Invalid partition name\n")
    assert slurm_failure(tmp_path / "launch.log", str(tmp_path / "slurm-%j.out")) is None  # never submitted


def test_a_waited_job_that_wrote_no_summary_did_not_train(tmp_path):
    """``sbatch --wait`` returns 0 for a job SLURM cancelled when its start failed on the node (SLURM 22.05, with
    --no-requeue; tests/integration/test_slurm.py makes one): the run's summary.json is what says it trained."""
    from dsbench.launch_log import slurm_never_trained

    log = tmp_path / "launch.log"
    log.write_text("sbatch --wait ...\nSubmitted batch job 42\n")
    said = slurm_never_trained(log, tmp_path)
    assert said is not None and said.startswith("SLURM job 42 ended without training (no rank wrote ")
    (tmp_path / "summary.json").write_text("{}")
    assert slurm_never_trained(log, tmp_path) is None
    assert slurm_never_trained(tmp_path / "missing.log", tmp_path / "nowhere").startswith("the SLURM job ended")
