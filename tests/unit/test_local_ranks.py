"""The ranks a launch starts on this machine, checked against it (dsbench/local_ranks.py): one per GPU on a GPU
node, on a CPU machine no more than its available memory holds at the measured floor per rank."""

import shutil
from pathlib import Path

import pytest

from dsbench.errors import UserError
from dsbench.local_ranks import CPU_RANK_FLOOR_BYTES, check_local_ranks

BAD = Path(__file__).resolve().parents[1] / "data" / "bad"


def test_a_gpu_node_starts_one_rank_per_gpu():
    check_local_ranks(8, "--num-gpus", gpus=8, memory_available=1)  # memory is the GPUs' concern there
    with pytest.raises(UserError, match=r"--num-gpus 9: this node has 8 GPU\(s\) .* give at most 8"):
        check_local_ranks(9, "--num-gpus", gpus=8, memory_available=None)


def test_a_cpu_machine_starts_what_its_memory_holds():
    check_local_ranks(4, "--num-gpus", gpus=0, memory_available=4 * CPU_RANK_FLOOR_BYTES)
    with pytest.raises(UserError, match=r"--num-gpus 5: 5 CPU ranks need at least 2 GiB .* give at most 4$"):
        check_local_ranks(5, "--num-gpus", gpus=0, memory_available=4 * CPU_RANK_FLOOR_BYTES)
    check_local_ranks(10**6, "--num-gpus", gpus=0, memory_available=None)  # unknown memory: nothing refused


def test_memory_available_reads_the_kernels_line(tmp_path):
    from dsbench.envinfo import memory_available

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24684100 kB\nMemFree: 1 kB\nMemAvailable:   22553492 kB\n")
    assert memory_available(str(meminfo)) == 22553492 * 1024
    meminfo.write_text("MemTotal:       24684100 kB\n")  # a kernel before 3.14 has no such line
    assert memory_available(str(meminfo)) is None
    assert memory_available(str(tmp_path / "none")) is None


@pytest.fixture
def two_ranks_of_memory(monkeypatch):
    """This machine as one without GPUs whose memory holds two CPU ranks."""
    import dsbench.envinfo

    monkeypatch.setattr(dsbench.envinfo, "memory_available", lambda: 2 * CPU_RANK_FLOOR_BYTES + 1)
    monkeypatch.setattr(dsbench.envinfo, "local_gpu_count", lambda: 0)


def test_launch_refuses_ranks_beyond_this_machine_before_anything_starts(cli_run, two_ranks_of_memory, tmp_path):
    assert cli_run("launch", "--num-gpus", "2", "--dry-run", "--run-dir", "a").exit_code == 0
    result = cli_run("launch", "--num-gpus", "3", "--dry-run", "--run-dir", "b")
    assert result.exit_code == 2 and "--num-gpus 3: 3 CPU ranks need at least 1 GiB" in result.output
    assert "give at most 2" in result.output and not (tmp_path / "b").exists()
    shutil.copy(BAD / "two_nodes", tmp_path)  # ranks on other hosts: theirs to hold, not this machine's
    assert cli_run("launch", "--hostfile", "two_nodes", "--dry-run", "--run-dir", "c").exit_code == 0


def test_an_accelerate_yaml_on_one_machine_is_checked_too(cli_run, two_ranks_of_memory, tmp_path):
    shutil.copy(BAD / "accelerate" / "thousand_processes.yaml", tmp_path)
    result = cli_run("launch", "--accelerate-config", "thousand_processes.yaml", "--dry-run", "--run-dir", "a")
    assert result.exit_code == 2 and "thousand_processes.yaml: num_processes 1,000: 1,000 CPU ranks" in result.output
    result = cli_run("launch", "--accelerate-config", "thousand_processes.yaml", "--num-processes", "3",
                     "--dry-run", "--run-dir", "b")
    assert result.exit_code == 2 and "--num-processes 3: 3 CPU ranks" in result.output
    ok = cli_run("launch", "--accelerate-config", "thousand_processes.yaml", "--num-processes", "2", "--dry-run",
                 "--run-dir", "c")
    assert ok.exit_code == 0, ok.output


def test_compare_tune_and_calibrate_check_the_ranks_they_would_start_here(cli_run, two_ranks_of_memory):
    for args in (("compare", "--strategies", "ddp", "--world-sizes", "1,3", "--out", "c"),
                 ("tune", "--num-gpus", "3", "--out", "t"), ("calibrate", "--num-gpus", "3", "--dry-run")):
        result = cli_run(*args)
        flag = "--world-sizes" if args[0] == "compare" else "--num-gpus"
        assert result.exit_code == 2 and f"{flag} 3: 3 CPU ranks need" in result.output, (args, result.output)
