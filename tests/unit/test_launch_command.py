"""What `dsbench launch` names its run folder by default (commands/launch.run_label)."""

from __future__ import annotations

import re

import pytest

from dsbench.commands.launch import run_label


@pytest.mark.parametrize("launcher, strategy, flags, elsewhere, label", [
    ("deepspeed", "deepspeed", {"zero": 3, "offload": "cpu"}, False, "deepspeed-zero3_offload"),
    ("deepspeed", "deepspeed", {"zero": 2}, False, "deepspeed-zero2"),
    ("deepspeed", "deepspeed", {"zero": 0}, False, "deepspeed-zero0"),
    ("deepspeed", "deepspeed", {"zero": 1, "pipeline_stages": 2}, False, "deepspeed-pipe2"),
    ("deepspeed", "deepspeed", {"zero": 1, "tp": 2}, False, "deepspeed-zero1_tp2"),
    ("deepspeed", "deepspeed", {"zero": 1, "ulysses": 2}, False, "deepspeed-ulysses2"),
    ("accelerate", "deepspeed", {"zero": 2}, False, "accelerate-zero2"),
    # the stage is the config's, a preset's or a --set's to decide: not named from the flags
    ("deepspeed", "deepspeed", {}, False, "deepspeed-deepspeed"),
    ("deepspeed", "deepspeed", {"zero": 2}, True, "deepspeed-deepspeed"),
    ("torchrun", "fsdp", {"zero": None}, False, "torchrun-fsdp"),
])
def test_the_default_run_folder_says_what_it_trains(launcher, strategy, flags, elsewhere, label):
    assert run_label(launcher, strategy, flags, elsewhere) == label


def test_a_launch_names_its_folder_so(cli_run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = cli_run("launch", "--zero", "3", "--offload", "cpu", "--dry-run")
    assert result.exit_code == 0, result.output
    assert re.search(r"runs/launch-deepspeed-zero3_offload-\d{8}-\d{6}/ds_config\.json", result.output)
