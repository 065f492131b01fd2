"""The paths a launch's ranks read or write on this machine: an NVMe offload folder that does not exist is said
before the ranks create it (found 2026-12-04: a cluster config's /local_nvme launched here made /local_nvme/
zero_stage_3 on the root disk, DeepSpeed's swappers calling os.makedirs on it)."""

from __future__ import annotations

import inspect

import pytest

from dsbench.errors import UserError
from dsbench.launch_request import check_paths_here


def _nvme(path: str, section: str = "offload_optimizer", device: str = "nvme") -> dict:
    return {"zero_optimization": {"stage": 3, section: {"device": device, "nvme_path": path}}}


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
    assert check_paths_here(None, None, str(tmp_path), local=True) == []


def test_a_dataset_no_rank_here_could_read_is_still_refused(tmp_path):
    with pytest.raises(UserError):
        check_paths_here(str(tmp_path / "absent"), None, str(tmp_path), local=True)
    assert check_paths_here(str(tmp_path / "absent"), None, str(tmp_path), local=False) == []
