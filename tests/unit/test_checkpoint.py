"""Checkpoint bookkeeping: what resume accepts and refuses, and that a crash mid-save never moves `latest`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from dsbench import checkpoints as manifests
from dsbench.errors import UserError
from dsbench.io import WriteError, parse_size
from dsbench.worker import checkpoint, checkpoint_manifest
from dsbench.worker.loop import LoopSettings, saves_after

DEFINITION = {"model": {"name": "gpt2-tiny"}, "seq_len": 128, "seed": 1, "global_batch": 4, "precision": "fp32"}


def manifest(**kw):
    base = dict(format=1, step=10, tag="global_step10", strategy="deepspeed", storage="deepspeed", world_size=2,
                dp=2, tp=1, pp=1, zero_stage=2, definition=DEFINITION, written_at="now")
    return manifests.Manifest(**{**base, **kw})


def write_checkpoint(folder, step=10, **kw):
    tag = folder / manifests.tag_for(step)
    tag.mkdir(parents=True)
    (tag / manifests.MANIFEST).write_text(json.dumps(manifest(step=step, tag=tag.name, **kw).to_dict()))
    (folder / manifests.LATEST).write_text(tag.name)
    return tag


def test_saves_every_n_steps_and_after_the_last():
    settings = LoopSettings(steps=20, warmup=2, seq_len=8, dims=None, save_every=6, save_last=True)
    assert [s + 1 for s in range(20) if saves_after(s, settings)] == [6, 12, 18, 20]
    assert not any(saves_after(s, LoopSettings(steps=5, warmup=1, seq_len=8, dims=None)) for s in range(5))


def test_resolve_reads_latest_or_a_tag_folder(tmp_path):
    tag = write_checkpoint(tmp_path)
    assert checkpoint_manifest.resolve(tmp_path)[0] == tag == checkpoint_manifest.resolve(tag)[0]
    assert checkpoint_manifest.resolve(tmp_path)[1].step == 10


@pytest.mark.parametrize("breakage, needle", [
    (lambda d: (d / "latest").write_text("../../etc"), "not a checkpoint tag"),
    (lambda d: (d / "global_step10" / manifests.MANIFEST).unlink(), "not a complete dsbench checkpoint"),
    (lambda d: (d / "global_step10" / manifests.MANIFEST).write_text("{"),
     "dsbench_checkpoint.json:1:2: malformed JSON"),
    (lambda d: (d / "global_step10" / manifests.MANIFEST).write_text('{"step": 1}'), "not a dsbench checkpoint"),
    (lambda d: (d / "latest").unlink(), "neither a checkpoint"),
    # a latest naming a save that is gone: named as such, with the saves there (was "D/global_step9: no
    # dsbench_checkpoint.json", a folder that does not exist)
    (lambda d: (d / "latest").write_text("global_step9"),
     r"latest names 'global_step9', which is not a folder in .* \(it holds global_step10: give one of them\)"),
])
def test_resolve_refuses_what_is_not_a_complete_checkpoint(tmp_path, breakage, needle):
    write_checkpoint(tmp_path)
    breakage(tmp_path)
    with pytest.raises(UserError, match=needle):
        checkpoint_manifest.resolve(tmp_path)


@pytest.mark.parametrize("strategy, definition, world, needle", [
    ("ddp", DEFINITION, 2, "written by --strategy deepspeed; resume it with the same strategy"),
    ("deepspeed", {**DEFINITION, "global_batch": 8}, 2, "global_batch 4, this run 8"),
    ("deepspeed", {**DEFINITION, "seed": 2}, 2, "seed 1, this run 2"),
])
def test_resume_refuses_what_would_not_continue_the_run(strategy, definition, world, needle):
    with pytest.raises(UserError, match=needle):
        manifests.check_resumable(manifest(), strategy, definition, world)


@pytest.mark.parametrize("tp, pp", [(2, 1), (1, 2)])
def test_deepspeed_checkpoints_keep_their_model_parallel_layout(tp, pp):
    with pytest.raises(UserError, match=f"tp 1 x pp 1 on 2 ranks, this run has tp {tp} x pp {pp} on 2"):
        manifests.check_resumable(manifest(), "deepspeed", DEFINITION, 2, tp=tp, pp=pp)


def test_which_resumes_need_a_universal_checkpoint():
    # DCP reshards itself; ZeRO partitions on another data-parallel size go through ds_to_universal; without ZeRO
    # (stage 0) DeepSpeed's files hold whole tensors
    assert manifests.check_resumable(manifest(strategy="fsdp", storage="dcp"), "fsdp", DEFINITION, 1) is False
    assert manifests.check_resumable(manifest(), "deepspeed", DEFINITION, 2) is False
    assert manifests.check_resumable(manifest(), "deepspeed", DEFINITION, 4) is True
    assert manifests.check_resumable(manifest(zero_stage=0), "deepspeed", DEFINITION, 1) is False


def test_a_half_written_universal_folder_is_never_trusted_or_replaced(tmp_path):
    target = tmp_path / "global_step10"
    target.mkdir()
    (tmp_path / "global_step10_universal").mkdir()
    with pytest.raises(UserError, match="exists but is not a complete universal checkpoint written by dsbench"):
        checkpoint.to_universal(target)


def test_checkpoint_dir_of_another_run_is_refused_and_its_own_accepted(tmp_path):
    tag = write_checkpoint(tmp_path / "ck")
    with pytest.raises(UserError, match="holds another run's checkpoint"):
        manifests.prepare_dir(tmp_path / "ck", None)
    manifests.prepare_dir(tmp_path / "ck", manifests.read_manifest(tag))  # resuming it: later tags are this run's
    manifests.prepare_dir(tmp_path / "new", None)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="not a folder"):
        manifests.prepare_dir(tmp_path / "file", None)
    with pytest.raises(UserError, match="file, so no folder can be made under it"):
        manifests.prepare_dir(tmp_path / "file" / "ck", None)
    with pytest.raises(UserError, match="would save there again"):
        manifests.check_free(tmp_path / "ck", [5, 10])


def test_ownership_comes_from_the_manifests_not_latest(tmp_path):
    """Another run's complete checkpoint in the folder, with `latest` gone: refused, whichever run resumes there."""
    ours = write_checkpoint(tmp_path / "ck", step=10, run_id="a" * 16)
    theirs = write_checkpoint(tmp_path / "ck", step=20, run_id="b" * 16)
    (tmp_path / "ck" / manifests.LATEST).unlink()
    with pytest.raises(UserError, match=f"holds another run's checkpoint \\(global_step20, run {'b' * 16}\\)"):
        manifests.prepare_dir(tmp_path / "ck", manifests.read_manifest(ours))
    with pytest.raises(UserError, match="holds another run's checkpoint"):
        manifests.prepare_dir(tmp_path / "ck", None)
    # the other run's own resume accepts only its checkpoints: ours is not its
    with pytest.raises(UserError, match="global_step10"):
        manifests.prepare_dir(tmp_path / "ck", manifests.read_manifest(theirs))


def test_manifests_without_a_run_id_are_judged_by_their_definition(tmp_path):
    old = write_checkpoint(tmp_path / "ck", step=10)  # written before run ids
    resumed = manifests.read_manifest(old)
    write_checkpoint(tmp_path / "ck", step=20, run_id="c" * 16)  # its resume, with an id
    manifests.prepare_dir(tmp_path / "ck", resumed)
    other = {**DEFINITION, "seed": 2}
    write_checkpoint(tmp_path / "ck", step=30, definition=other)
    with pytest.raises(UserError, match="global_step30, written before run ids"):
        manifests.prepare_dir(tmp_path / "ck", resumed)


@pytest.mark.parametrize("change, needle", [
    ({"step": "3"}, 'step must be an integer >= 0, got "3"'),
    ({"step": True}, "step must be an integer >= 0, got true"),
    ({"world_size": 0}, "world_size must be an integer >= 1"),
    ({"zero_stage": 7}, "zero_stage must be null or 0..3"),
    ({"strategy": "torch_tp"}, 'strategy "torch_tp" with storage "deepspeed" is not a checkpoint dsbench writes'),
    ({"definition": []}, "definition must be an object"),
    ({"run_id": "x|."}, "run_id must be 16 hex digits"),
    ({"tag": "global_step99"}, "is not the folder's name"),
    ({"extra": 1}, "unknown key 'extra'"),
])
def test_a_manifest_is_typed_field_by_field(tmp_path, change, needle):
    tag = write_checkpoint(tmp_path)
    path = tag / manifests.MANIFEST
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(UserError, match=re.escape(needle)):
        checkpoint_manifest.resolve(tmp_path)


@pytest.mark.parametrize("content, needle", [
    (b"\xff\xfe", "latest file /"),
    ("[" * 100_000, "nested deeper than 64"),
])
def test_damaged_latest_and_deep_manifests_are_one_line(tmp_path, content, needle):
    tag = write_checkpoint(tmp_path)
    if isinstance(content, bytes):
        (tmp_path / manifests.LATEST).write_bytes(content)
    else:
        (tag / manifests.MANIFEST).write_text(content)
    with pytest.raises(UserError, match=needle):
        checkpoint_manifest.resolve(tmp_path)


@pytest.mark.parametrize("text, size", [("2GB", 2 * 10**9), ("500MB", 5 * 10**8), ("1.5GiB", 3 * 2**29),
                                        ("400kB", 400_000), ("123456", 123456)])
def test_shard_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["huge", "0", "-5GB", "nan", "inf", "1e400"])
def test_bad_shard_sizes(text):
    with pytest.raises(UserError, match="--max-shard-size"):
        parse_size(text)


class _Comm:
    def barrier(self) -> None:
        """One process: nothing to wait for."""


def test_a_crash_mid_save_leaves_latest_on_the_previous_checkpoint(tmp_path, monkeypatch):
    import torch

    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters())
    from dsbench.worker.engines.loss_scale import LossScale

    engine = SimpleNamespace(model=model, optimizer=optimizer, loss_scale=LossScale("fp32", None), stage_names=None,
                             scheduler=torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0))
    info = SimpleNamespace(rank=0, world_size=1, is_main=True)
    fields = {"world_size": 1, "dp": 1, "tp": 1, "pp": 1, "zero_stage": None, "definition": DEFINITION}

    def save(step):
        return checkpoint.save(engine, "single", tmp_path, step, info, fields, _Comm(), lambda folder: folder.mkdir())

    save(1)

    def crash(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, "_save_rank_file", crash)
    with pytest.raises(WriteError, match=r"global_step2: No space left on device \(files written before it"):
        save(2)  # one line, exit 1
    assert (tmp_path / "latest").read_text() == "global_step1"
    assert checkpoint_manifest.resolve(tmp_path)[1].step == 1
    with pytest.raises(UserError, match="not a complete dsbench checkpoint"):
        checkpoint_manifest.resolve(tmp_path / "global_step2")
    monkeypatch.undo()
    save(2)  # the partial folder is moved aside, never deleted
    assert (tmp_path / "latest").read_text() == "global_step2"
    assert len(list(tmp_path.glob("global_step2.incomplete-*"))) == 1
    with pytest.raises(UserError, match="complete checkpoint already"):
        save(2)


def _saved_by(folder, step=10, written=None, **definition):
    """A checkpoint as `dsbench launch --zero 2` of gpt2-tiny on 2 ranks writes it (global batch 2 x 2, fp32), or
    with the manifest's ``written`` fields."""
    from dsbench.model_config import resolve_model

    run = {**DEFINITION, "model": resolve_model("gpt2-tiny").to_dict(), "seed": 1234, **definition}
    return write_checkpoint(folder, step=step, definition=run, **(written or {}))


@pytest.mark.parametrize("launch, worker, needle", [
    # the same run on: nothing to refuse (dry run)
    (["--zero", "2"], [], None),
    # saved after step 10 of --steps 10: no step left to measure
    (["--zero", "2"], ["--steps", "10"], "was saved after 10 steps: --steps 10 with --warmup 2 leaves no step"),
    (["--strategy", "ddp", "--launcher", "torchrun"], [], "written by --strategy deepspeed; resume it with the same"),
    (["--zero", "2", "--micro-batch", "4"], [], "the checkpoint has global_batch 4, this run 8"),
    (["--zero", "2", "--precision", "bf16"], [], 'the checkpoint has precision "fp32", this run "bf16"'),
    (["--zero", "2"], ["--seed", "7"], "the checkpoint has seed 1234, this run 7"),
    (["--zero", "1", "--pipeline-stages", "2", "--grad-accum", "2"], [],
     "written with tp 1 x pp 1 on 2 ranks, this run has tp 1 x pp 2 on 2: resume with the same --tp"),
])
def test_a_launch_refuses_a_resume_that_cannot_continue_before_any_rank_starts(cli_run, tmp_path, launch, worker,
                                                                                needle):
    """`dsbench launch ... -- --resume D` reads the checkpoint's manifest and refuses in one line, exit 2, what the
    ranks would refuse after starting (checkpoints.check_before_launch; the ranks check again)."""
    saved = _saved_by(tmp_path / "ckpt")
    result = cli_run("launch", *launch, "--run-dir", str(tmp_path / "run"), "--dry-run", "--", "--steps", "20",
                     "--warmup", "2", *worker, "--resume", str(saved))
    if needle is None:
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code == 2 and needle in result.output, result.output
        assert "Traceback" not in result.output and "deepspeed --num_gpus" not in result.output


def test_what_only_the_ranks_know_is_left_to_them(cli_run, tmp_path):
    """A native run given no --precision (a rank may read accelerate's ACCELERATE_MIXED_PRECISION), a checkpoint on
    a path this host does not have (a node's own disk): the launch goes ahead and each rank decides."""
    saved = _saved_by(tmp_path / "ckpt", precision="bf16",
                      written={"strategy": "ddp", "storage": "dcp", "zero_stage": None})
    ddp = ["--strategy", "ddp", "--launcher", "torchrun", "--micro-batch", "2"]
    unsaid = cli_run("launch", *ddp, "--run-dir", str(tmp_path / "run"), "--dry-run", "--", "--resume", str(saved))
    assert unsaid.exit_code == 0, unsaid.output
    said = cli_run("launch", *ddp, "--precision", "fp32", "--run-dir", str(tmp_path / "run1"), "--dry-run", "--",
                   "--resume", str(saved))
    assert said.exit_code == 2 and 'the checkpoint has precision "bf16", this run "fp32"' in said.output
    elsewhere = cli_run("launch", "--zero", "2", "--run-dir", str(tmp_path / "run2"), "--dry-run", "--", "--resume",
                        str(tmp_path / "on-the-nodes" / "global_step10"))
    assert elsewhere.exit_code == 0, elsewhere.output


def test_a_resume_path_too_long_for_the_system_is_one_line_with_its_reason(cli_run, tmp_path):
    """The system refuses the name (ENAMETOOLONG): one line, exit 2, its ends and the reason, never cut before it."""
    result = cli_run("launch", "--zero", "2", "--run-dir", str(tmp_path / "run"), "--dry-run", "--", "--resume",
                     "a" * 5000)
    line = result.output.strip()
    assert result.exit_code == 2 and "\n" not in line and line.endswith("File name too long"), line[-200:]
    assert len(line) < 400 and "Traceback" not in line


GPT2 = {**DEFINITION, "model": {"name": "gpt2-tiny", "arch": "gpt2"}}


@pytest.mark.parametrize("arch, held", [("gpt2", "GPT-2's c_attn (q, k and v)"),
                                        ("phi3", "Phi-3's qkv_proj and gate_up_proj")])
@pytest.mark.parametrize("saved_tp, tp, refused", [(2, 1, "apart"), (1, 2, "whole"), (2, 4, None), (1, 1, None)])
def test_a_fused_checkpoint_resumes_on_its_side_of_tensor_parallelism(arch, held, saved_tp, tp, refused):
    """Megatron-style TP holds GPT-2's c_attn as q, k and v apart ((in, 3, out / 3)) and Phi-3's qkv_proj by
    key/value head and gate_up_proj as (2, ff, in), every other engine whole; DCP loads a tensor into one of its saved
    shape, so a resume across that line is refused in one line, before any rank starts (measured 2026-12-01:
    unrefused, FSDP's ranks stopped with "the checkpoint cannot be read")."""
    definition = {**GPT2, "model": {**GPT2["model"], "arch": arch}}
    saved = manifest(strategy="torch_tp", storage="dcp", tp=saved_tp, dp=2 // saved_tp, zero_stage=None,
                     definition=definition)
    strategy = "torch_tp" if tp > 1 else "fsdp"
    if refused is None:
        assert manifests.check_resumable(saved, strategy, definition, 4, tp=tp) is False
        return
    with pytest.raises(UserError, match=rf"holds {re.escape(held)} with their blocks {refused} .*`dsbench export`"):
        manifests.check_resumable(saved, strategy, definition, 2, tp=tp)
    llama = {**DEFINITION, "model": {"name": "llama-tiny", "arch": "llama"}}  # any other family reshards freely
    other = manifest(strategy="torch_tp", storage="dcp", tp=saved_tp, dp=2 // saved_tp, zero_stage=None,
                     definition=llama)
    assert manifests.check_resumable(other, strategy, llama, 2, tp=tp) is False


def test_export_gives_gpt2_s_c_attn_the_shape_transformers_holds():
    """The blocks apart, flattened back: the same numbers in the same order (q's columns, then k's, then v's)."""
    torch = pytest.importorskip("torch")
    from dsbench.worker.export import as_transformers_holds

    whole = torch.arange(4 * 12.0).view(4, 12)  # (in, out): q = columns 0-3, k 4-7, v 8-11
    apart = whole.view(4, 3, 4)
    assert torch.equal(apart[:, 1, :], whole[:, 4:8])  # the k block
    assert torch.equal(as_transformers_holds("transformer.h.0.attn.c_attn.weight", apart), whole)
    assert torch.equal(as_transformers_holds("transformer.h.0.attn.c_attn.bias", torch.arange(12.0).view(3, 4)),
                       torch.arange(12.0))
    kept = torch.zeros(4, 1, 12)  # any other name, or c_attn already whole: untouched
    assert as_transformers_holds("transformer.h.0.mlp.c_fc.weight", kept) is kept
    assert as_transformers_holds("transformer.h.0.attn.c_attn.weight", whole) is whole


def test_phi3_s_fused_projections_are_held_by_key_value_head_and_exported_as_transformers_holds_them():
    """qkv_proj held as (kv_heads, G + 2, head_dim, in) (worker/engines/fused_parallel.py): each key/value head with
    the query heads that read it (oracle: transformers' own repeat_kv, which gives query head h its key/value head),
    so a split over the first dimension hands a rank whole groups; export puts the rows back, gate_up_proj too."""
    torch = pytest.importorskip("torch")
    from transformers.models.llama.modeling_llama import repeat_kv

    from dsbench.worker.engines.fused_parallel import held_qkv
    from dsbench.worker.export import as_transformers_holds

    heads, kv, head_dim, inputs = 8, 2, 3, 5
    rows = [*(h for h in range(heads) for _ in range(head_dim)), *(100 + g for g in range(kv) for _ in range(head_dim)),
            *(200 + g for g in range(kv) for _ in range(head_dim))]  # each row labelled by its head
    whole = torch.tensor(rows, dtype=torch.float32)[:, None].expand(-1, inputs).contiguous()
    held = held_qkv(whole, kv, head_dim)
    assert held.shape == (kv, heads // kv + 2, head_dim, inputs)
    reads = repeat_kv(torch.arange(kv, dtype=torch.float32).view(1, kv, 1, 1), heads // kv).flatten()  # h -> its kv
    for group in range(kv):
        assert sorted({int(x) for x in held[group, :-2, :, 0].flatten()}) == [
            h for h in range(heads) if reads[h] == group]
        assert {int(x) for x in held[group, -2].flatten()} == {100 + group}
        assert {int(x) for x in held[group, -1].flatten()} == {200 + group}
    assert torch.equal(as_transformers_holds("model.layers.0.self_attn.qkv_proj.weight", held), whole)
    gate_up = torch.arange(2 * 6 * 5.0).view(12, 5)
    assert torch.equal(as_transformers_holds("model.layers.0.mlp.gate_up_proj.weight", gate_up.view(2, 6, 5)), gate_up)
    assert as_transformers_holds("model.layers.0.self_attn.qkv_proj.weight", whole) is whole  # whole: untouched
    odd = torch.zeros(2, 2, 3, 5)  # no room for a query group beside k and v (a planted file): left as it is
    assert as_transformers_holds("model.layers.0.self_attn.qkv_proj.weight", odd) is odd


@pytest.mark.parametrize("flags, needle", [
    (["--resume", "good.json"], "good.json: not a folder"),
    (["--checkpoint-dir", "good.json"], "--checkpoint-dir good.json: exists and is not a folder"),
    (["--dataset", "empty.json"], "--dataset empty.json: empty (no text to train on)"),
    (["--dataset", "nowhere.txt"], "--dataset nowhere.txt: no .txt/.json/.jsonl/.parquet/.csv files found"),
])
def test_a_rank_refuses_a_bad_checkpoint_or_dataset_path_before_it_imports_torch(tmp_path, flags, needle):
    """The checkpoint paths and the dataset's files are read from disk alone: a rank started by hand with a mistyped
    path says so in a fraction of a second, not after importing torch (seconds), and the refusal is the same one
    line."""
    (tmp_path / "good.json").write_text("{}")
    (tmp_path / "empty.json").write_text("")
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "dsbench.train", *flags, "--steps", "2"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and needle in done.stderr, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")}
    assert "dsbench.worker.run" in imported and "torch" not in imported


def test_a_file_missing_from_the_checkpoint_is_a_damaged_checkpoint_not_an_io_error(tmp_path):
    """DeepSpeed's consolidation raises FileNotFoundError("can't find *_model_states.pt files in directory ...")
    with no filename for a tag folder missing its model states: `dsbench export` reported it as an I/O error
    (exit 1) of OUT. A file missing inside the checkpoint is now its refusal (exit 2); one outside stays an OSError."""
    from dsbench.worker.checkpoint import damaged

    with pytest.raises(UserError, match=r"the checkpoint is incomplete \(can't find \*_model_states.pt"):
        with damaged(tmp_path):
            raise FileNotFoundError(f"can't find *_model_states.pt files in directory '{tmp_path}'")
    with pytest.raises(UserError, match="incomplete .*layer_01-model_states.pt"):
        with damaged(tmp_path):
            open(tmp_path / "layer_01-model_states.pt")  # noqa: SIM115
    with pytest.raises(FileNotFoundError):
        with damaged(tmp_path / "ckpt"):
            open(tmp_path / "elsewhere" / "x")  # noqa: SIM115


def _with_files(folder):
    """A checkpoint whose manifest lists its files as a save does (checkpoint_files.files_of), as
    worker/checkpoint.save writes it after every rank's files are on disk."""
    from dsbench.checkpoint_files import files_of

    tag = write_checkpoint(folder)
    (tag / "mp_rank_00_model_states.pt").write_bytes(b"x" * 100)
    (tag / "hf").mkdir()
    (tag / "hf" / "config.json").write_text("{}")
    data = json.loads((tag / manifests.MANIFEST).read_text())
    (tag / manifests.MANIFEST).write_text(json.dumps({**data, "files": files_of(tag)}))
    return tag


def test_the_manifest_lists_every_file_and_a_resume_checks_them_first(tmp_path):
    """A rank that met a missing ZeRO partition while the other waited in DeepSpeed's load stopped it with "lost the
    connection to another rank" and gloo's traceback (found 2026-12-04 by resuming damaged copies of a checkpoint).
    The save lists its files with their sizes; locate (the launch, every rank before it joins, export) checks them."""
    tag = _with_files(tmp_path)
    assert manifests.locate(tmp_path)[1].files == {"hf/config.json": 2, "mp_rank_00_model_states.pt": 100}
    (tag / "mp_rank_00_model_states.pt").write_bytes(b"x" * 60)
    with pytest.raises(UserError, match=r"mp_rank_00_model_states.pt: 60 bytes, where the save wrote 100: the file "
                                        r"was truncated or replaced"):
        manifests.locate(tmp_path)
    (tag / "mp_rank_00_model_states.pt").unlink()
    with pytest.raises(UserError, match=r"global_step10: mp_rank_00_model_states.pt is missing \(the save wrote 2 "
                                        r"files\): the checkpoint is incomplete"):
        manifests.locate(tag)
    (tag / "mp_rank_00_model_states.pt").write_bytes(b"x" * 100)
    (tag / "extra.txt").write_text("a note a user left")  # more than the save wrote is no damage
    assert manifests.locate(tmp_path)[0] == tag


@pytest.mark.parametrize("files", [[], {"../outside.pt": 1}, {"/etc/passwd": 1}, {"a.pt": -1}, {"a.pt": "100"},
                                   {"a.pt": True}, {"": 0}])
def test_a_file_list_that_is_not_paths_in_the_folder_with_sizes_is_refused(tmp_path, files):
    tag = write_checkpoint(tmp_path)
    data = json.loads((tag / manifests.MANIFEST).read_text())
    (tag / manifests.MANIFEST).write_text(json.dumps({**data, "files": files}))
    with pytest.raises(UserError, match="files must map paths inside the folder to sizes in bytes"):
        manifests.locate(tmp_path)
