"""The commands users type themselves with the files dsbench ships, and failure handling."""

from __future__ import annotations

import json
import socket
import sys

import pytest

from tests.conftest import ROOT
from tests.integration.conftest import bin_path, dsbench, load_run, run_command

pytestmark = pytest.mark.dist
WORKER = ["--steps", "8", "--warmup", "2", "--quiet"]


def test_deepspeed_launcher_with_hostfile_and_shipped_config(tmp_path):
    """deepspeed --hostfile ... --module dsbench.train --deepspeed_config ds_configs/zero2.json ("auto" kept).

    A hostfile makes DeepSpeed ssh to its hosts; without sshd here, --no_ssh --node_rank 0 runs this node's
    part of the same hostfile launch (DeepSpeed's documented mode for clusters without passwordless ssh).
    """
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost slots=2\n")
    out = tmp_path / "run"
    result = run_command([bin_path("deepspeed"), "--hostfile", str(hostfile), "--no_ssh", "--node_rank", "0",
                          "--master_addr", "127.0.0.1", "--master_port", "29731",
                          "--module", "dsbench.train", "--deepspeed_config", "ds_configs/zero2.json",
                          "--out", str(out), *WORKER], cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = load_run(out)
    config = run["header"][0]["ds_config"]
    assert config["train_batch_size"] == 4 and config["zero_optimization"]["stage"] == 2  # "auto" resolved
    assert run["steps"][-1]["loss"] < run["steps"][0]["loss"]


@pytest.mark.parametrize("yaml_name, strategy", [("deepspeed_zero2.yaml", "deepspeed"), ("fsdp.yaml", "fsdp"),
                                                  ("multi_gpu.yaml", "ddp")])
def test_accelerate_launch_with_shipped_config(tmp_path, yaml_name, strategy):
    out = tmp_path / "run"
    result = run_command([bin_path("accelerate"), "launch", "--config_file", f"ds_configs/accelerate/{yaml_name}",
                          "--main_process_port", "29732", "-m", "dsbench.train", "--out", str(out), *WORKER], cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = load_run(out)
    assert run["header"][0]["strategy"] == strategy and run["header"][0]["world_size"] == 2
    assert run["steps"][-1]["loss"] < run["steps"][0]["loss"]


@pytest.mark.parametrize("launcher", ["deepspeed", "torchrun"])
def test_a_failing_rank_fails_the_launch_with_its_error(tmp_path, launcher):
    strategy = ["--strategy", "ddp"] if launcher == "torchrun" else []
    result = dsbench("launch", "--launcher", launcher, *strategy, "--run-dir", str(tmp_path / "r"), "--",
                     "--steps", "6", "--quiet", cwd=ROOT, env={"DSBENCH_FAULT": "1:2"})
    assert result.returncode != 0
    assert "launch failed with exit code" in result.stderr
    expected = f"[rank 1 on {socket.gethostname()}] dsbench.train: error: RuntimeError: injected fault at step 2"
    assert expected in result.stderr


def test_local_checkpoint_tokenizer_and_datasets(tmp_path):
    """A local HF checkpoint (weights + tokenizer) and local text / jsonl / parquet datasets."""
    make = """
import sys
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
from dsbench.paths import data_file
out = sys.argv[1]
tok = PreTrainedTokenizerFast(tokenizer_file=str(data_file("tokenizer.json")), eos_token="<|endoftext|>")
GPT2LMHeadModel(GPT2Config(vocab_size=4096, n_embd=32, n_layer=1, n_head=2, n_positions=64,
                           bos_token_id=0, eos_token_id=0)).save_pretrained(out)
tok.save_pretrained(out)
"""
    ckpt = tmp_path / "ckpt"
    assert run_command([sys.executable, "-c", make, str(ckpt)], cwd=ROOT).returncode == 0
    text = "\n".join(f"line {i}: the quick brown fox jumps over the lazy dog {i * 7}" for i in range(400))
    (tmp_path / "data.txt").write_text(text)
    (tmp_path / "data.jsonl").write_text("".join(json.dumps({"body": line}) + "\n" for line in text.splitlines()))
    import pandas

    pandas.DataFrame({"text": text.splitlines()}).to_parquet(tmp_path / "data.parquet")
    for dataset, field in (("data.txt", "text"), ("data.jsonl", "body"), ("data.parquet", "text")):
        out = tmp_path / f"run-{dataset}"
        result = run_command([sys.executable, "-m", "dsbench.train", "--model", str(ckpt), "--dataset",
                              str(tmp_path / dataset), "--text-field", field, "--seq-len", "32", "--out", str(out),
                              *WORKER], cwd=ROOT)
        assert result.returncode == 0, result.stderr[-3000:]
        run = load_run(out)
        assert run["header"][0]["model"]["source"] == "local" and run["header"][0]["num_params"] > 0
        assert run["header"][0]["dataset"].endswith(dataset)


def test_worker_bad_input_is_one_line(tmp_path):
    result = run_command([sys.executable, "-m", "dsbench.train", "--dataset", str(tmp_path / "nope.txt"),
                          "--out", str(tmp_path / "r")], cwd=ROOT)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "dsbench.train: error: --dataset" in result.stderr
    too_long = run_command([sys.executable, "-m", "dsbench.train", "--seq-len", "4096", "--out", str(tmp_path / "s")],
                           cwd=ROOT)
    assert too_long.returncode == 2 and "exceeds gpt2-tiny's 256 positions" in too_long.stderr
