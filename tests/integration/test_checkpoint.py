"""Checkpoints on 2 CPU ranks (12 steps straight vs 6 + resume 6 give the same losses and learning rates: every
engine's, DeepSpeed's included since 2026-12-02 (night), on the engines' own ranks,
tests/integration/engine_resume.py); the saves of ZeRO-2, ZeRO-3 and DeepSpeed's pipeline engine recorded; the
checkpoints of DDP, FSDP2, torch's pipelining, DTensor TP on 4 ranks and
torch_3d on 8 refused, resumed elsewhere and exported; a resume on another world size (DCP resharding, across
engines too; DeepSpeed's universal checkpoint);
`dsbench export` against DeepSpeed's and torch's own consolidation, and against the training run's own loss.

The straight runs are the session's cells (conftest SAVED: the runs test_launch_strategies.py, the accelerate YAMLs,
SLURM and the test bed are checked against), which save at step 6 and at the end; their LR still ramps at step 6
(LR_WARMUP: 8 steps), so the schedule must resume too.

Oracles: the uninterrupted run (the straight run also saves, which reads the state and changes nothing: its parity
with one process, test_launch_strategies.py, checks that);
DeepSpeed's get_fp32_state_dict_from_zero_checkpoint and torch's dcp_to_torch_save for the exported weights;
the loss the training run recorded at step 6 (weights after 6 steps) for the exported model's forward.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration import conftest as session
from tests.integration.conftest import LR_WARMUP, SAVE_AT, STEPS, WORKER, dsbench, load_run

pytestmark = pytest.mark.dist

STRATEGIES = {"zero2": session.ZERO2, "zero3": session.ZERO3, "ddp": session.DDP, "fsdp": session.FSDP,
              "pipe": session.PIPE,  # the pipeline engine writes one file per layer
              # DTensor TP since 2026-12-01: tp 2 x dp 2 on llama-tiny, its DCP files hold each rank's shards
              "torch_tp": [*session.TORCH_TP, *session.LLAMA],
              # torch's pipelining since 2026-12-01: each rank's stages under the model's names (worker/dcp_state.py);
              # GPipe on gpt2-tiny (the tied embedding on both stages), and tp 2 x pp 2 x FSDP over 2 replicas on a
              # tied Qwen3, interleaved (8 ranks)
              "torch_pp": session.TORCH_PP, "torch_3d": [*session.TORCH_3D, *session.LLAMA]}
SAVED = f"global_step{SAVE_AT}"


def launch(args: list[str], folder: Path, *worker: str):
    """``dsbench launch ARGS`` as the session's runs are made (their LR warm-up and worker flags), plus ``worker``."""
    return dsbench("launch", *args, *LR_WARMUP, "--run-dir", str(folder), "--", *WORKER, *worker, cwd=ROOT,
                   timeout=600)


class Trained:
    """Per strategy: the session's run, which saves at SAVE_AT and at STEPS."""

    def __init__(self, runs) -> None:
        self.runs = runs

    def get(self, name: str) -> tuple[Path, dict]:
        """The session run's checkpoint folder and its metrics."""
        result, folder = self.runs.get(name, STRATEGIES[name])
        assert result.returncode == 0, result.stderr[-3000:]
        return folder / "checkpoints", load_run(folder)


@pytest.fixture(scope="module")
def trained(runs) -> Trained:
    return Trained(runs)


DEEPSPEED_SAVES = ("zero2", "zero3", "pipe")
"""DeepSpeed's session runs that save (ZeRO-2, ZeRO-3 and the pipeline engine's layer files). Each engine's resume
(12 steps straight against 6, a save, and 6 more after a load) runs on the engines' own ranks: the torch engines'
since 2026-12-02 (DDP, FSDP2, HSDP, DTensor TP, GPipe and torch_3d two ways), DeepSpeed's since 2026-12-02 (night)
(tests/integration/engine_resume.py, on 4 ranks, exactly but for DDP's 1 ulp); until then this file launched a resume
of each of these three, and of 5 torch engines' runs before. The worker's own ``--resume`` stays launched below:
torch_3d's DCP checkpoint under FSDP2 on one rank, and ZeRO-2's and ZeRO-3's on one rank through DeepSpeed's
universal checkpoint (whose resumed header and summary are checked there)."""


@pytest.mark.parametrize("name", DEEPSPEED_SAVES)
def test_a_saving_run_records_each_checkpoint_and_names_the_last(trained, name):
    checkpoints, straight = trained.get(name)
    saved = [json.loads(line) for line in (checkpoints.parent / "metrics.jsonl").read_text()
             .splitlines() if '"checkpoint"' in line]
    assert [c["step"] for c in saved] == [SAVE_AT, STEPS] and all(c["seconds"] > 0 and c["bytes"] > 0 for c in saved)
    assert (checkpoints / "latest").read_text() == f"global_step{STEPS}"
    manifest = json.loads((checkpoints / SAVED / "dsbench_checkpoint.json").read_text())
    assert (manifest["step"], manifest["storage"], manifest["zero_stage"]) == (
        SAVE_AT, "deepspeed", straight["header"][0]["ds_config"]["zero_optimization"]["stage"])
    ramp = [s["lr"] for s in straight["steps"] if s["step"] >= SAVE_AT]
    assert ramp[0] < ramp[-1], ramp  # saved mid-warm-up: a resume must bring the schedule's own step back too


def test_a_torch_3d_checkpoint_resumes_on_one_rank_under_fsdp(trained, tmp_path):
    """DCP reshards, across engines: the checkpoint of 8 torch_3d ranks (TP slices, FSDP2 shards, 2 pipeline stages in
    4 chunks) continues under FSDP2 on 1 rank with the same global batch (micro 2 x 2). Until 2026-12-01 this test
    resumed the 2-rank FSDP2 checkpoint, whose shards these include."""
    checkpoints, straight = trained.get("torch_3d")
    folder = tmp_path / "one-rank"
    result = launch(["--strategy", "fsdp", "--launcher", "torchrun", "--num-gpus", "1", "--model",
                     str(session.QWEN3_TIED), "--micro-batch", "2", *session.LLAMA], folder, "--grad-accum", "2",
                    "--resume", str(checkpoints / SAVED))
    assert result.returncode == 0, result.stderr[-3000:]
    again = [s["loss"] for s in load_run(folder)["steps"]]
    after = [s["loss"] for s in straight["steps"] if s["step"] >= SAVE_AT]
    worst = max(abs(a - b) / abs(b) for a, b in zip(again, after, strict=True))
    assert worst < 1e-5, worst  # the same sums in another order


@pytest.mark.parametrize("name", ["zero2", "zero3"])
def test_zero_checkpoint_resumes_on_one_rank_through_a_universal_checkpoint(trained, tmp_path, name):
    """DeepSpeed's ZeRO partitions of 2 ranks, converted by its ds_to_universal, continue on 1 rank with the
    same global batch (micro 2 x accumulation 2): the losses of the uninterrupted 2-rank run."""
    checkpoints, straight = trained.get(name)
    folder = tmp_path / "one-rank"
    result = launch([*STRATEGIES[name], "--grad-accum", "2", "--num-gpus", "1"], folder, "--resume",
                    str(checkpoints / SAVED))
    assert result.returncode == 0, result.stderr[-3000:]
    run = load_run(folder)
    assert run["header"][0]["world_size"] == 1
    again = [(s["step"], s["loss"]) for s in run["steps"]]
    after = [(s["step"], s["loss"]) for s in straight["steps"] if s["step"] >= SAVE_AT]
    assert [s for s, _ in again] == [s for s, _ in after]
    worst = max(abs(a - b) / abs(b) for (_, a), (_, b) in zip(again, after, strict=True))
    assert worst < 1e-5, worst  # the same sums in another order
    # a resumed run says so, and measures its own steps after its own warm-up
    assert run["header"][0]["resumed_from"]["step"] == SAVE_AT
    assert run["summary"]["status"] == "ok" and run["summary"]["measured_steps"] == STEPS - SAVE_AT - 2
    universal = checkpoints / f"{SAVED}_universal"
    assert (universal / "dsbench_universal.json").is_file() and (universal / "zero").is_dir()
    assert (checkpoints / "latest").read_text() == f"global_step{STEPS}"  # the user's checkpoint folder is untouched


def test_zero_checkpoint_on_another_model_parallel_layout_is_refused(trained, tmp_path):
    """A ZeRO-2 checkpoint of 2 data-parallel ranks resumed as 2 pipeline stages (the same global batch): refused in
    one line before any rank starts (the launch reads the manifest: checkpoints.check_before_launch; each rank would
    refuse it too). (--tp on this GPT-2 model is refused as early: AutoTP cannot split it.)"""
    checkpoints, _ = trained.get("zero2")
    result = launch(["--zero", "1", "--pipeline-stages", "2", "--grad-accum", "2"], tmp_path / "r", "--resume",
                    str(checkpoints / SAVED))
    assert result.returncode == 2, result.stderr[-2000:]  # the launch refuses it: no rank starts
    assert "resume with the same --tp and pipeline stages" in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr.split("dsbench: error:")[-1]


def test_resuming_past_the_last_step_is_refused(trained, tmp_path):
    checkpoints, _ = trained.get("zero2")  # latest: the last step's
    result = launch(STRATEGIES["zero2"], tmp_path / "r", "--resume", str(checkpoints))
    assert result.returncode == 2
    assert (f"was saved after {STEPS} steps: --steps {STEPS} with --warmup 2 leaves no step to measure"
            in result.stderr), result.stderr[-2000:]


def test_a_resume_with_another_global_batch_is_refused(trained, tmp_path):
    checkpoints, _ = trained.get("ddp")
    result = launch(["--strategy", "ddp", "--launcher", "torchrun", "--micro-batch", "4"], tmp_path / "r",
                    "--resume", str(checkpoints / SAVED))
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


@pytest.mark.parametrize("name", ["zero2", "zero3", "fsdp", "pipe", "torch_tp", "torch_pp", "torch_3d"])
def test_export_gives_the_training_models_weights_and_logits(trained, tmp_path, name):
    import torch
    from safetensors.torch import load_file

    checkpoints, straight = trained.get(name)
    out = tmp_path / "hf"
    result = dsbench("export", str(checkpoints / SAVED), str(out), "--max-shard-size", "400kB",
                     cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    index = json.loads((out / "model.safetensors.index.json").read_text())  # 400 kB shards: several files
    exported = {}
    for shard in sorted(set(index["weight_map"].values())):
        exported.update(load_file(out / shard))
    if name == "pipe":  # no consolidation tool reads DeepSpeed's layer files: the same training under ZeRO-2
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        oracle = get_fp32_state_dict_from_zero_checkpoint(str(trained.get("zero2")[0]), tag=SAVED)
        assert set(exported) == set(oracle) - {"lm_head.weight"}
        # the two trainings drift apart slowly (seen: losses 1e-4 apart by step 10, weights 1.3% apart in norm at
        # worst, a LayerNorm bias), while a weight exported under another layer's name is ~100% off; the exact
        # check is the loss below
        worst = max(float((exported[k] - oracle[k]).norm() / oracle[k].norm()) for k in exported)
        assert worst < 0.05, worst
    elif name.startswith(("fsdp", "torch_")):  # DCP: FSDP2's shards, TP's slices, the stages, consolidated by torch
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        dcp_to_torch_save(checkpoints / SAVED, tmp_path / "oracle.pt")
        oracle = torch.load(tmp_path / "oracle.pt")["model"]  # the state as saved: {"model": ..., "optim": ...}
    else:
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        oracle = get_fp32_state_dict_from_zero_checkpoint(str(checkpoints), tag=SAVED)
    if name != "pipe":
        tied = json.loads((out / "config.json").read_text()).get("tie_word_embeddings", True)  # GPT-2 ties
        # a tied head (GPT-2's, to transformer.wte.weight) is written once; llama-tiny's is its own
        assert set(exported) == set(oracle) - ({"lm_head.weight"} if tied else set())
        assert all(torch.equal(exported[k], oracle[k]) for k in exported)
    recorded = next(s["loss"] for s in straight["steps"] if s["step"] == SAVE_AT)  # forward with the saved weights
    assert _loss_at(out, straight["header"][0], SAVE_AT) == pytest.approx(recorded, rel=1e-5)


def test_export_never_replaces_a_folder(trained, tmp_path):
    checkpoints, _ = trained.get("zero2")
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


def _plant(tag: Path, name: str, marker: Path, *, listed: bool = True) -> Path:
    """A copy of a real checkpoint tag folder whose file ``name`` also holds the payload; ``listed``: its manifest's
    file list rewritten to the planted size, as the author of a hostile checkpoint would (since 2026-12-04 a file
    of another size than the save wrote is refused before any is read, below)."""
    import pickle
    import shutil

    import torch

    from dsbench.checkpoint_files import files_of

    copy = tag.parent.parent / f"planted-{tag.parent.name}-{name.strip('.')}" / tag.name
    shutil.rmtree(copy.parent, ignore_errors=True)
    shutil.copytree(tag, copy)
    target = copy / name
    if name == ".metadata":  # DCP: a plain pickle
        target.write_bytes(pickle.dumps(_Payload(marker)))
    else:
        torch.save({"real": torch.load(target, weights_only=False), "extra": _Payload(marker)}, target)
    manifest = json.loads((copy / "dsbench_checkpoint.json").read_text())
    assert manifest["files"] == {**files_of(copy), name: manifest["files"][name]}  # the save listed every file
    if listed:
        (copy / "dsbench_checkpoint.json").write_text(json.dumps({**manifest, "files": files_of(copy)}))
    return copy


PLANTED = [("zero2", "zero_pp_rank_0_mp_rank_00_optim_states.pt"), ("zero2", "mp_rank_00_model_states.pt"),
           ("zero2", "dsbench_rank1.pt"), ("pipe", "layer_01-model_states.pt"), ("ddp", ".metadata")]
RESUMED = {PLANTED[0]}
"""The planted file resumed by a real launch (DeepSpeed's ZeRO optimizer states, under DeepSpeed's launcher). A rank
checks every pickle of the folder (``checkpoint_manifest.resolve``, in ``worker/run._resumed_checkpoint``) before it
joins the process group or builds an engine, whatever the strategy, so every other file's resume is that same call,
made here in this process for each format (DeepSpeed's ZeRO and model files, its pipeline engine's layer files,
dsbench's rank file, DCP's metadata). Until 2026-12-01 the pipeline layer and DCP files were resumed by launches of
their own too, which ran that same call first (2 launches)."""


@pytest.mark.parametrize("name, file", PLANTED)
def test_a_planted_checkpoint_file_runs_nothing_in_export_or_resume(trained, tmp_path, name, file):
    from dsbench.errors import UserError
    from dsbench.worker import checkpoint_manifest

    checkpoints, _ = trained.get(name)
    marker = tmp_path / "pwned"
    planted = _plant(checkpoints / SAVED, file, marker)
    result = dsbench("export", str(planted), str(tmp_path / "hf"), cwd=ROOT, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 2 and f"{file}: holds posix.system" in output and "Traceback" not in output, output
    with pytest.raises(UserError, match=f"{file}: holds posix.system"):
        checkpoint_manifest.resolve(planted)  # what each rank calls first on --resume (worker/run.py prepare)
    if (name, file) in RESUMED:
        result = launch(STRATEGIES[name], tmp_path / "resumed", "--resume", str(planted))
        output = result.stdout + result.stderr
        assert result.returncode != 0 and f"{file}: holds posix.system" in output, output[-3000:]
    assert not marker.exists() and not (tmp_path / "hf").exists()
    # replaced without the list rewritten: refused by its size before any file is read
    replaced = _plant(checkpoints / SAVED, file, marker, listed=False)
    with pytest.raises(UserError, match=f"{file}: [0-9,]+ bytes, where the save wrote [0-9,]+: the file was "
                                        "truncated or replaced"):
        checkpoint_manifest.resolve(replaced)
    assert not marker.exists()


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
