"""The paths a launch's ranks read or write on this machine: an NVMe offload folder that does not exist is said
before the ranks create it (found 2026-12-04: a cluster config's /local_nvme launched here made /local_nvme/
zero_stage_3 on the root disk, DeepSpeed's swappers calling os.makedirs on it), whether a DeepSpeed config or an
accelerate YAML names it; one at or under a file, where that makedirs fails on every rank, is refused."""

from __future__ import annotations

import inspect
import json

import pytest
import yaml

from dsbench.configs import accelerate
from dsbench.errors import UserError
from dsbench.launch_request import check_paths_here, nvme_folders


def _nvme(path: str, section: str = "offload_optimizer", device: str = "nvme") -> list[tuple[str, str]]:
    return nvme_folders({"zero_optimization": {"stage": 3, section: {"device": device, "nvme_path": path}}})


def test_deepspeed_s_swappers_create_the_folder_they_are_given():
    """The oracle for the note: DeepSpeed 0.19.8's optimizer and parameter swappers make their folder, whatever
    exists, rather than refuse a missing one."""
    from deepspeed.runtime.swap_tensor import optimizer_utils, partitioned_param_swapper

    for module in (optimizer_utils, partitioned_param_swapper):
        assert "os.makedirs(self.swap_folder, exist_ok=True)" in inspect.getsource(module)


def test_a_missing_nvme_folder_is_said_with_the_disk_that_will_hold_it(tmp_path):
    missing = tmp_path / "local_nvme" / "swap"
    notes = check_paths_here(None, _nvme(str(missing)), str(tmp_path), local=True)
    assert notes == [f"zero_optimization.offload_optimizer.nvme_path {missing} does not exist on this machine: the "
                     f"ranks will create it and swap on the disk that holds {tmp_path}"]
    relative = check_paths_here(None, _nvme("nvme", "offload_param"), str(tmp_path), local=True)
    assert len(relative) == 1 and relative[0].startswith("zero_optimization.offload_param.nvme_path nvme ")
    (tmp_path / "nvme").mkdir()
    assert check_paths_here(None, _nvme("nvme"), str(tmp_path), local=True) == []  # relative to the launch's cwd
    assert check_paths_here(None, _nvme(str(missing)), str(tmp_path), local=False) == []  # the nodes' path
    assert check_paths_here(None, _nvme(str(missing), device="cpu"), str(tmp_path), local=True) == []
    assert check_paths_here(None, nvme_folders(None), str(tmp_path), local=True) == []


def test_deepspeed_s_makedirs_fails_at_or_under_a_file(tmp_path):
    """The oracle for the refusal: what DeepSpeed's swappers call, on a path at and under a file."""
    import os

    (tmp_path / "disk").write_text("not a folder")
    for path in ("disk", "disk/swap"):
        with pytest.raises(OSError):
            os.makedirs(tmp_path / path / "zero_stage_3", exist_ok=True)
        with pytest.raises(UserError, match=f"nvme_path {path}: disk is a file, not a folder"):
            check_paths_here(None, _nvme(path, "offload_param"), str(tmp_path), local=True)
    assert check_paths_here(None, _nvme("disk/swap"), str(tmp_path), local=False) == []  # the nodes' own disks
    with pytest.raises(OSError):
        os.makedirs("/dev/null/swap/zero_stage_3", exist_ok=True)
    with pytest.raises(UserError, match="nvme_path /dev/null/swap: /dev/null is a device or FIFO, not a folder"):
        check_paths_here(None, _nvme("/dev/null/swap"), str(tmp_path), local=True)


def test_the_folder_is_named_by_the_key_that_names_it_in_the_users_file():
    assert nvme_folders(_config("/nvme"), "ds.json: ") == [("ds.json: zero_optimization.offload_param.nvme_path",
                                                              "/nvme")]
    yaml = {"distributed_type": "DEEPSPEED", "deepspeed_config": {
        "zero_stage": 3, "offload_optimizer_device": "nvme", "offload_optimizer_nvme_path": "/a",
        "offload_param_device": "cpu", "offload_param_nvme_path": "/b"}}
    assert accelerate.nvme_folders(yaml) == [("deepspeed_config.offload_optimizer_nvme_path", "/a")]
    yaml["deepspeed_config"] |= {"offload_param_device": "nvme", "offload_param_nvme_path": None}  # accelerate's
    assert len(accelerate.nvme_folders(yaml)) == 1  # placeholder for "none given": validate's to refuse


def test_a_launch_of_a_users_yaml_says_its_own_missing_folder(cli_run, tmp_path):
    """`dsbench launch --accelerate-config` as typed, with the folder inline and in the DeepSpeed file it names."""
    inline = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "DEEPSPEED", "mixed_precision": "no",
              "num_machines": 1, "num_processes": 2, "deepspeed_config": {
                  "zero_stage": 3, "offload_param_device": "nvme", "offload_param_nvme_path": str(tmp_path / "n"),
                  "offload_optimizer_device": "none", "zero3_init_flag": False}}
    (tmp_path / "inline.yaml").write_text(yaml.safe_dump(inline))
    result = cli_run("launch", "--accelerate-config", "inline.yaml", "--run-dir", "r1", "--dry-run")
    assert result.exit_code == 0, result.output
    assert f"note: deepspeed_config.offload_param_nvme_path {tmp_path / 'n'} does not exist" in result.output
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", **_config("n/swap")}))
    named = {**{k: v for k, v in inline.items() if k != "mixed_precision"},  # the DeepSpeed file's to say
             "deepspeed_config": {"deepspeed_config_file": "ds.json"}}
    (tmp_path / "named.yaml").write_text(yaml.safe_dump(named))
    result = cli_run("launch", "--accelerate-config", "named.yaml", "--run-dir", "r2", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "note: ds.json: zero_optimization.offload_param.nvme_path n/swap does not exist" in result.output
    (tmp_path / "n").write_text("a file")
    result = cli_run("launch", "--accelerate-config", "named.yaml", "--run-dir", "r3", "--dry-run")
    assert result.exit_code == 2 and "n/swap: n is a file, not a folder" in result.output, result.output


def _config(path: str) -> dict:
    return {"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": path}}}


def test_a_dataset_no_rank_here_could_read_is_still_refused(tmp_path):
    with pytest.raises(UserError):
        check_paths_here(str(tmp_path / "absent"), [], str(tmp_path), local=True)
    assert check_paths_here(str(tmp_path / "absent"), [], str(tmp_path), local=False) == []


def test_a_path_no_system_can_hold_is_refused_by_its_key(tmp_path):
    with pytest.raises(UserError, match=r"offload_param.nvme_path: 'a\\x00b' holds a NUL byte"):
        check_paths_here(None, _nvme("a\0b", "offload_param"), str(tmp_path), local=True)
    with pytest.raises(UserError, match=r"offload_optimizer.nvme_path x{60}\.\.\.: File name too long"):
        check_paths_here(None, _nvme("x" * 5000), str(tmp_path), local=True)


def test_a_refused_launch_leaves_nothing_that_blocks_its_folder(cli_run, tmp_path):
    """Found 2026-12-04: a launch refused after its config was rendered (a --dataset not there) had written
    ds_config.json into --run-dir, so the corrected command was refused as a folder holding a file no launch
    wrote. The config is now written once every check has passed."""
    refused = cli_run("launch", "--run-dir", "r", "--dry-run", "--", "--dataset", "nowhere.txt")
    assert refused.exit_code == 2 and "--dataset nowhere.txt" in refused.output
    assert not (tmp_path / "r").exists()
    (tmp_path / "nv.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, **_config("nv.json/swap")}))
    refused = cli_run("launch", "--config", "nv.json", "--run-dir", "r", "--dry-run")
    assert refused.exit_code == 2 and "nv.json is a file, not a folder" in refused.output
    assert not (tmp_path / "r").exists()
    result = cli_run("launch", "--run-dir", "r", "--dry-run")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "r" / "ds_config.json").read_text())["zero_optimization"]["stage"] == 2


def test_a_folder_the_launch_rendered_is_named_by_the_flag_that_gave_it(cli_run, tmp_path):
    """`dsbench launch --nvme-path` names the flag typed, once for both offloads, not the rendered config's keys."""
    both = cli_run("launch", "--zero", "3", "--offload", "nvme", "--offload-param", "nvme", "--nvme-path",
                   str(tmp_path / "swap"), "--run-dir", "r1", "--dry-run")
    assert both.exit_code == 0, both.output
    notes = [line for line in both.output.splitlines() if "nvme" in line.lower() and line.startswith("note:")]
    assert notes == [f"note: --nvme-path {tmp_path / 'swap'} does not exist on this machine: the ranks will create "
                     f"it and swap on the disk that holds {tmp_path}"]
    (tmp_path / "f").write_text("a file")
    refused = cli_run("launch", "--zero", "3", "--offload-param", "nvme", "--nvme-path", "f", "--run-dir", "r2",
                      "--dry-run")
    assert refused.exit_code == 2 and "--nvme-path f: f is a file, not a folder" in refused.output
