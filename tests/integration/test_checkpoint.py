"""Checkpoints on 2 CPU ranks: 20 steps straight vs 10 + resume 10 give the same losses and learning rates
(ZeRO-2, ZeRO-3, DDP, FSDP2); a resume on another world size (DCP resharding, DeepSpeed's universal checkpoint);
`dsbench export` against DeepSpeed's and torch's own consolidation, and against the training run's own loss.

Oracles: the uninterrupted run (the straight run also saves, which reads the state and changes nothing);
DeepSpeed's get_fp32_state_dict_from_zero_checkpoint and torch's dcp_to_torch_save for the exported weights;
the loss the training run recorded at step 10 (weights after 10 steps) for the exported model's forward.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration.conftest import dsbench, load_run

pytestmark = pytest.mark.dist

STRATEGIES = {
    "zero2": ["--zero", "2"],
    "zero3": ["--zero", "3"],
    "ddp": ["--strategy", "ddp", "--launcher", "torchrun"],
    "fsdp": ["--strategy", "fsdp", "--launcher", "torchrun"],
    # DeepSpeed's pipeline engine: one layer file per layer; 2 stages x 2 micro-batches, the same global batch
    "pipe": ["--zero", "0", "--pipeline-stages", "2", "--grad-accum", "2"],
}
# an LR still ramping at the resume point (DeepSpeed's WarmupLR / the native LambdaLR): the schedule must resume too
WORKER = ["--warmup", "2", "--lr-warmup-steps", "15", "--micro-batch", "2", "--quiet"]


class Trained:
    """Per strategy, once per module: a 20-step run saving at 10 and 20, and a run resumed from step 10."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.cache: dict[str, tuple[Path, dict, dict]] = {}

    def launch(self, name: str, args: list[str], worker: list[str]) -> tuple[Path, object]:
        folder = self.base / name
        result = dsbench("launch", *args, "--run-dir", str(folder), "--", *WORKER, *worker, cwd=ROOT, timeout=600)
        return folder, result

    def get(self, name: str) -> tuple[Path, dict, dict]:
        if name not in self.cache:
            checkpoints = self.base / f"{name}-ckpt"
            folder, result = self.launch(f"{name}-straight", STRATEGIES[name],
                                         ["--steps", "20", "--checkpoint-dir", str(checkpoints), "--save-every", "10"])
            assert result.returncode == 0, result.stderr[-3000:]
            resumed, result = self.launch(f"{name}-resumed", STRATEGIES[name],
                                          ["--steps", "20", "--resume", str(checkpoints / "global_step10")])
            assert result.returncode == 0, result.stderr[-3000:]
            self.cache[name] = (checkpoints, load_run(folder), load_run(resumed))
        return self.cache[name]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Trained:
    return Trained(tmp_path_factory.mktemp("ckpt"))


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_resume_reproduces_the_uninterrupted_run(trained, name):
    checkpoints, straight, resumed = trained.get(name)
    after = [(s["step"], s["loss"], s["lr"]) for s in straight["steps"] if s["step"] >= 10]
    again = [(s["step"], s["loss"], s["lr"]) for s in resumed["steps"]]
    assert [s for s, _, _ in again] == list(range(10, 20))
    assert again == after  # exactly: same data, weights, optimizer moments, LR step and RNG on CPU fp32
    assert resumed["header"][0]["resumed_from"]["step"] == 10
    assert resumed["summary"]["status"] == "ok" and resumed["summary"]["measured_steps"] == 8
    saved = [json.loads(line) for line in (checkpoints.parent / f"{name}-straight" / "metrics.jsonl").read_text()
             .splitlines() if '"checkpoint"' in line]
    assert [c["step"] for c in saved] == [10, 20] and all(c["seconds"] > 0 and c["bytes"] > 0 for c in saved)
    assert (checkpoints / "latest").read_text() == "global_step20"


def test_fsdp_checkpoint_resumes_on_one_rank(trained, tmp_path):
    """DCP reshards: the 2-rank FSDP2 checkpoint continues on 1 rank with the same global batch (2 x 2)."""
    checkpoints, straight, _ = trained.get("fsdp")
    folder = tmp_path / "one-rank"
    result = dsbench("launch", *STRATEGIES["fsdp"], "--num-gpus", "1", "--run-dir", str(folder), "--", *WORKER,
                     "--grad-accum", "2", "--steps", "20", "--resume", str(checkpoints / "global_step10"),
                     cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    again = [s["loss"] for s in load_run(folder)["steps"]]
    after = [s["loss"] for s in straight["steps"] if s["step"] >= 10]
    worst = max(abs(a - b) / abs(b) for a, b in zip(again, after, strict=True))
    assert worst < 1e-5, worst  # the same sums in another order


@pytest.mark.parametrize("name", ["zero2", "zero3"])
def test_zero_checkpoint_resumes_on_one_rank_through_a_universal_checkpoint(trained, tmp_path, name):
    """DeepSpeed's ZeRO partitions of 2 ranks, converted by its ds_to_universal, continue on 1 rank with the
    same global batch (micro 2 x accumulation 2): the losses of the uninterrupted 2-rank run."""
    checkpoints, straight, _ = trained.get(name)
    folder = tmp_path / "one-rank"
    result = dsbench("launch", *STRATEGIES[name], "--grad-accum", "2", "--num-gpus", "1", "--run-dir",
                     str(folder), "--", *WORKER, "--steps", "20", "--resume", str(checkpoints / "global_step10"),
                     cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    run = load_run(folder)
    assert run["header"][0]["world_size"] == 1
    again = [(s["step"], s["loss"]) for s in run["steps"]]
    after = [(s["step"], s["loss"]) for s in straight["steps"] if s["step"] >= 10]
    assert [s for s, _ in again] == [s for s, _ in after]
    worst = max(abs(a - b) / abs(b) for (_, a), (_, b) in zip(again, after, strict=True))
    assert worst < 1e-5, worst  # the same sums in another order
    universal = checkpoints / "global_step10_universal"
    assert (universal / "dsbench_universal.json").is_file() and (universal / "zero").is_dir()
    assert (checkpoints / "latest").read_text() == "global_step20"  # the user's checkpoint folder is untouched


def test_zero_checkpoint_on_another_model_parallel_layout_is_refused(trained, tmp_path):
    """A ZeRO-2 checkpoint of 2 data-parallel ranks resumed as 2 pipeline stages (the same global batch): refused in
    one line before any rank starts (the launch reads the manifest: checkpoints.check_before_launch; each rank would
    refuse it too). (--tp on this GPT-2 model is refused as early: AutoTP cannot split it.)"""
    checkpoints, _, _ = trained.get("zero2")
    result = dsbench("launch", "--zero", "1", "--pipeline-stages", "2", "--grad-accum", "2", "--run-dir",
                     str(tmp_path / "r"), "--", *WORKER, "--steps", "20", "--resume",
                     str(checkpoints / "global_step10"), cwd=ROOT, timeout=600)
    assert result.returncode == 2, result.stderr[-2000:]  # the launch refuses it: no rank starts
    assert "resume with the same --tp and pipeline stages" in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr.split("dsbench: error:")[-1]


def test_resuming_past_the_last_step_is_refused(trained, tmp_path):
    checkpoints, _, _ = trained.get("zero2")  # latest: global_step20
    result = dsbench("launch", *STRATEGIES["zero2"], "--run-dir", str(tmp_path / "r"), "--", *WORKER,
                     "--steps", "20", "--resume", str(checkpoints), cwd=ROOT, timeout=600)
    assert result.returncode == 2
    assert "was saved after 20 steps: --steps 20 with --warmup 2 leaves no step to measure" in result.stderr


def test_a_resume_with_another_global_batch_is_refused(trained, tmp_path):
    checkpoints, _, _ = trained.get("ddp")
    result = dsbench("launch", *STRATEGIES["ddp"], "--run-dir", str(tmp_path / "r"), "--", *WORKER,
                     "--steps", "20", "--micro-batch", "4", "--resume", str(checkpoints / "global_step10"),
                     cwd=ROOT, timeout=600)
    assert result.returncode == 2  # refused by the launch, before torchrun starts a rank
    assert "the checkpoint has global_batch 4, this run 8: resume with the same global_batch" in result.stderr


def _loss_at(export: Path, header: dict, step: int) -> float:
    """The exported model's loss on the global batch of ``step``, averaged as the run averages it (mean over
    data-parallel ranks of each rank's micro-batch loss)."""
    import torch
    from transformers import AutoModelForCausalLM

    from dsbench.worker.data import build_plan, load_tokenizer, token_ids

    model = AutoModelForCausalLM.from_pretrained(export).eval()
    plan = build_plan(token_ids(load_tokenizer(None), None), header["seq_len"], header["seed"],
                      header["micro_batch"], header["grad_accum"], header["dp_size"])
    losses = []
    with torch.no_grad():
        for rank in range(header["dp_size"]):
            for micro in range(header["grad_accum"]):
                batch = plan.micro_batch_for(step, micro, rank)
                losses.append(model(input_ids=batch, labels=batch).loss.item())
    return sum(losses) / len(losses)


@pytest.mark.parametrize("name", ["zero2", "zero3", "fsdp", "pipe"])
def test_export_gives_the_training_models_weights_and_logits(trained, tmp_path, name):
    import torch
    from safetensors.torch import load_file

    checkpoints, straight, _ = trained.get(name)
    out = tmp_path / "hf"
    result = dsbench("export", str(checkpoints / "global_step10"), str(out), "--max-shard-size", "400kB",
                     cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    index = json.loads((out / "model.safetensors.index.json").read_text())  # 400 kB shards: several files
    exported = {}
    for shard in sorted(set(index["weight_map"].values())):
        exported.update(load_file(out / shard))
    if name == "pipe":  # no consolidation tool reads DeepSpeed's layer files: the same training under ZeRO-2
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        oracle = get_fp32_state_dict_from_zero_checkpoint(str(trained.get("zero2")[0]), tag="global_step10")
        assert set(exported) == set(oracle) - {"lm_head.weight"}
        # the two trainings drift apart slowly (seen: losses 1e-4 apart by step 10, weights 1.3% apart in norm at
        # worst, a LayerNorm bias), while a weight exported under another layer's name is ~100% off; the exact
        # check is the loss below
        worst = max(float((exported[k] - oracle[k]).norm() / oracle[k].norm()) for k in exported)
        assert worst < 0.05, worst
    elif name == "fsdp":
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        dcp_to_torch_save(checkpoints / "global_step10", tmp_path / "oracle.pt")
        oracle = torch.load(tmp_path / "oracle.pt")["model"]  # the state as saved: {"model": ..., "optim": ...}
    else:
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        oracle = get_fp32_state_dict_from_zero_checkpoint(str(checkpoints), tag="global_step10")
    if name != "pipe":
        assert set(exported) == set(oracle) - {"lm_head.weight"}  # tied to transformer.wte.weight, written once
        assert all(torch.equal(exported[k], oracle[k]) for k in exported)
    recorded = next(s["loss"] for s in straight["steps"] if s["step"] == 10)  # forward with the step-10 weights
    assert _loss_at(out, straight["header"][0], 10) == pytest.approx(recorded, rel=1e-5)


def test_export_never_replaces_a_folder(trained, tmp_path):
    checkpoints, _, _ = trained.get("zero2")
    (tmp_path / "taken").mkdir()
    result = dsbench("export", str(checkpoints), str(tmp_path / "taken"), cwd=ROOT, timeout=300)
    assert result.returncode == 2
    assert "exists: export writes a new folder and never replaces one" in result.stdout + result.stderr


class _Payload:
    """Unpickling it would run a shell command (what a hostile checkpoint file holds)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def _plant(tag: Path, name: str, marker: Path) -> Path:
    """A copy of a real checkpoint tag folder whose file ``name`` also holds the payload."""
    import pickle
    import shutil

    import torch

    copy = tag.parent.parent / f"planted-{tag.parent.name}-{name.strip('.')}" / tag.name
    shutil.rmtree(copy.parent, ignore_errors=True)
    shutil.copytree(tag, copy)
    target = copy / name
    if name == ".metadata":  # DCP: a plain pickle
        target.write_bytes(pickle.dumps(_Payload(marker)))
    else:
        torch.save({"real": torch.load(target, weights_only=False), "extra": _Payload(marker)}, target)
    return copy


PLANTED = [("zero2", "zero_pp_rank_0_mp_rank_00_optim_states.pt"), ("zero2", "mp_rank_00_model_states.pt"),
           ("zero2", "dsbench_rank1.pt"), ("pipe", "layer_01-model_states.pt"), ("ddp", ".metadata")]
RESUMED = {PLANTED[0], PLANTED[3], PLANTED[4]}
"""Planted files resumed by a real launch: one per way a rank loads a checkpoint (DeepSpeed's ZeRO files, its pipeline
engine's layer files, DCP). A rank checks every pickle of the folder (``checkpoint_manifest.resolve``) before it loads
any, so the other files' resumes are that same call, made here in this process."""


@pytest.mark.parametrize("name, file", PLANTED)
def test_a_planted_checkpoint_file_runs_nothing_in_export_or_resume(trained, tmp_path, name, file):
    from dsbench.errors import UserError
    from dsbench.worker import checkpoint_manifest

    checkpoints, _, _ = trained.get(name)
    marker = tmp_path / "pwned"
    planted = _plant(checkpoints / "global_step10", file, marker)
    result = dsbench("export", str(planted), str(tmp_path / "hf"), cwd=ROOT, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 2 and f"{file}: holds posix.system" in output and "Traceback" not in output, output
    with pytest.raises(UserError, match=f"{file}: holds posix.system"):
        checkpoint_manifest.resolve(planted)  # what each rank calls first on --resume (worker/run.py prepare)
    if (name, file) in RESUMED:
        result = dsbench("launch", *STRATEGIES[name], "--run-dir", str(tmp_path / "resumed"), "--", *WORKER,
                         "--steps", "20", "--resume", str(planted), cwd=ROOT, timeout=300)
        output = result.stdout + result.stderr
        assert result.returncode != 0 and f"{file}: holds posix.system" in output, output[-3000:]
    assert not marker.exists() and not (tmp_path / "hf").exists()


def test_every_global_in_real_checkpoints_is_on_the_allow_list(trained):
    """The allow-list (safe_load.CHECKPOINT_GLOBALS) against the files each strategy writes today: the script that
    made it finds nothing missing."""
    import subprocess
    import sys

    folders = [str(trained.get(name)[0]) for name in STRATEGIES]
    done = subprocess.run([sys.executable, "scripts/checkpoint_globals.py", *folders], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "deepspeed.runtime.zero.config.ZeroStageEnum" in done.stdout
