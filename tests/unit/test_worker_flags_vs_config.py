"""Worker flags after ``--`` that a DeepSpeed config contradicts are refused by the launch (the config's value would
win on every rank, silently): configs/worker_flags.check_worker_flags. A rank started by hand makes the same check
on the flags typed beside its ``--deepspeed_config`` (docs/errors.md's worker row, run as a process)."""

from __future__ import annotations

import pytest

from dsbench.configs.worker_flags import check_worker_flags as _check
from dsbench.errors import UserError
from dsbench.trainflags import given_flags
from tests.conftest import ROOT

CONFIG = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
          "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}}, "zero_optimization": {"stage": 2}}


def check_worker_flags(args: list[str], config: dict, config_file: str | None, **kwargs) -> None:
    """As the launch calls it: the flags typed after --, parsed by the worker's own parser."""
    _check(given_flags(args), config, config_file, **kwargs)


@pytest.mark.parametrize("args, message", [
    (["--micro-batch", "3"], "-- --micro-batch 3: the DeepSpeed config sets train_micro_batch_size_per_gpu to 2"),
    (["--grad-accum", "4"], "-- --grad-accum 4: the DeepSpeed config sets gradient_accumulation_steps to 1"),
    (["--lr", "1e-3"], "-- --lr 0.001: the DeepSpeed config sets optimizer.params.lr to 0.0003"),
    (["--grad-clip", "0.5"], "-- --grad-clip 0.5: the DeepSpeed config sets gradient_clipping to 1.0"),
    # no scheduler section: a constant LR, whatever the worker's flag says
    (["--lr-warmup-steps", "8"], "sets scheduler.params.warmup_num_steps to 0, which the ranks would use; give "
                                 "--warmup-steps 8 before -- instead"),
    (["--precision", "bf16"], "sets precision (bf16.enabled, fp16.enabled, torch_autocast) to fp32"),
])
def test_a_contradicted_worker_flag_is_one_line_naming_the_launch_flag(args, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        check_worker_flags(args, CONFIG, None)


def test_with_the_users_config_the_fix_is_in_that_file():
    with pytest.raises(UserError, match=r"change train_micro_batch_size_per_gpu in my\.json, or set it to \"auto\""):
        check_worker_flags(["--micro-batch", "4"], CONFIG, "my.json")


@pytest.mark.parametrize("args", [[], ["--micro-batch", "2", "--lr", "0.0003", "--steps", "5"],
                                  ["--grad-clip", "1"], ["--precision", "fp32"]])
def test_flags_that_agree_with_the_config_pass(args):
    check_worker_flags(args, CONFIG, None)


def test_what_the_config_leaves_auto_is_the_workers_to_fill():
    auto = {**CONFIG, "train_micro_batch_size_per_gpu": "auto", "bf16": {"enabled": "auto"},
            "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}}}
    check_worker_flags(["--micro-batch", "8", "--lr-warmup-steps", "5", "--precision", "bf16"], auto, "my.json")
    # a key the config does not set is outside this check (DeepSpeed derives it; dsbench's renders set every one)
    check_worker_flags(["--grad-accum", "4"], {"zero_optimization": {"stage": 1}}, None)


def test_a_clipping_the_config_leaves_out_is_deepspeeds_default_not_the_flags():
    """DeepSpeed clips at its own default where a file leaves gradient_clipping out (oracle: its
    GRADIENT_CLIPPING_DEFAULT, 1.0 in 0.19.8), so --grad-clip 0.5 beside such a file would be ignored; accelerate's
    inline settings are another matter: the worker completes them with "auto", which the flag fills."""
    from deepspeed.runtime.constants import GRADIENT_CLIPPING_DEFAULT

    from dsbench.configs.autofill import CLIP_DEFAULT

    assert CLIP_DEFAULT == GRADIENT_CLIPPING_DEFAULT
    bare = {key: value for key, value in CONFIG.items() if key != "gradient_clipping"}
    with pytest.raises(UserError, match=r"-- --grad-clip 0\.5: the DeepSpeed config leaves gradient_clipping out, so "
                                        r"DeepSpeed clips at its default, 1\.0, which the ranks would use; add "
                                        r"\"gradient_clipping\": 0\.5 \(or \"auto\"\) to my\.json"):
        check_worker_flags(["--grad-clip", "0.5"], bare, "my.json")
    check_worker_flags(["--grad-clip", str(GRADIENT_CLIPPING_DEFAULT)], bare, "my.json")
    check_worker_flags(["--grad-clip", "0.5"], {}, "my.yaml", accelerate=True, inline=True)


@pytest.mark.parametrize("clip", [0, 0.0, 0.5, 1.0, None])
def test_a_grad_clip_flag_beside_a_yamls_inline_clipping_passes_only_where_the_ranks_clip_at_it(clip, monkeypatch):
    """``dsbench launch --accelerate-config Y -- --grad-clip X`` with Y's inline ``gradient_clipping``. Oracle:
    accelerate's DeepSpeedPlugin builds the config (it drops a 0: ``if self.gradient_clipping``, and leaves "auto"
    for the script where the YAML has no key), DeepSpeed's DeepSpeedConfig gives the norm its engine clips at.
    Until 2026-12-03 a YAML's 0 passed ``-- --grad-clip 0``, and the ranks clipped at 1.0."""
    import os

    from accelerate.utils.dataclasses import DeepSpeedPlugin
    from deepspeed.runtime.config import DeepSpeedConfig

    for name in list(os.environ):
        if name.startswith("ACCELERATE_"):
            monkeypatch.delenv(name)
    inline = {"gradient_clipping": clip} if clip is not None else {}
    built = dict(DeepSpeedPlugin(zero_stage=2, **inline).deepspeed_config)
    for typed in ("0", "0.5", "1.0"):
        kept = {} if "gradient_clipping" not in built else {
            "gradient_clipping": float(typed) if built["gradient_clipping"] == "auto" else built["gradient_clipping"]}
        applied = DeepSpeedConfig({"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, **kept})
        try:
            check_worker_flags(["--grad-clip", typed], inline, "acc.yaml", accelerate=True, inline=True)
        except UserError as refused:
            assert applied.gradient_clipping != float(typed), refused
            fix = ('name a DeepSpeed JSON with "gradient_clipping": 0 in deepspeed_config.deepspeed_config_file of '
                   "acc.yaml" if typed == "0" else "change deepspeed_config.gradient_clipping in acc.yaml")
            assert str(refused).endswith(fix), refused
        else:
            assert applied.gradient_clipping == float(typed), (clip, typed)


def test_a_scheduler_with_the_same_warmup_passes():
    warm = {**CONFIG, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 8}}}
    check_worker_flags(["--lr-warmup-steps", "8"], warm, None)
    with pytest.raises(UserError, match="warmup_num_steps to 8"):
        check_worker_flags(["--lr-warmup-steps", "4"], warm, None)


CORPUS = ROOT / "tests" / "data" / "corpus" / "accelerate"


@pytest.mark.parametrize("yaml, args, message", [
    # the inline plugin's own accumulation (16) and clipping win on the ranks (configs/accelerate_worker.py)
    ("HKUST-LongGroup__DyME__default_config.yaml", ["--grad-accum", "4"],
     "-- --grad-accum 4: the DeepSpeed config sets gradient_accumulation_steps to 16, which the ranks would use; "
     "change deepspeed_config.gradient_accumulation_steps in "),
    ("OpenLMLab__MOSS-RLHF__accelerate_config.yaml", ["--grad-clip", "0.5"], "sets gradient_clipping to 1.0"),
])
def test_a_users_yaml_that_fixes_the_flag_refuses_it(cli_run, tmp_path, yaml, args, message):
    result = cli_run("launch", "--accelerate-config", str(CORPUS / yaml), "--num-processes", "2", "--run-dir",
                     str(tmp_path / "r"), "--dry-run", "--", *args)
    assert result.exit_code == 2 and message in result.output, result.output


@pytest.mark.parametrize("yaml, args", [
    ("HKUST-LongGroup__DyME__default_config.yaml", ["--grad-accum", "16", "--lr-warmup-steps", "3"]),
    # the inline plugin sets no accumulation: the flag fills it
    ("huggingface__trl__examples_accelerate_configs_deepspeed_zero2.yaml", ["--grad-accum", "4"]),
])
def test_a_users_yaml_that_leaves_the_flag_open_takes_it(cli_run, tmp_path, yaml, args):
    result = cli_run("launch", "--accelerate-config", str(CORPUS / yaml), "--num-processes", "2", "--run-dir",
                     str(tmp_path / "r"), "--dry-run", "--", *args)
    assert result.exit_code == 0, result.output


def test_dsbench_s_own_accelerate_deepspeed_file_leaves_every_flag_open():
    import json

    shipped = json.loads((ROOT / "ds_configs" / "zero2.json").read_text())  # what deepspeed_zero2.yaml names
    check_worker_flags(["--micro-batch", "4", "--grad-accum", "2", "--lr", "1e-3", "--lr-warmup-steps", "3"],
                       shipped, "ds_configs/zero2.json", accelerate=True)


def test_under_accelerate_the_warmup_flag_is_taken_where_the_worker_brings_the_scheduler():
    """The worker completes accelerate's inline settings with AdamW and WarmupLR from its flags, and a DeepSpeed
    file only when it names no optimizer (accelerate_worker.script_completes, as the rank decides it); precision is
    accelerate's. Until 2026-11-30 12:20 a file that named its optimizer and no scheduler took --lr-warmup-steps here
    and trained at a constant LR (measured: lr 3e-4 at each of 4 steps with --lr-warmup-steps 5)."""
    inline = {key: value for key, value in CONFIG.items() if key != "optimizer"}
    check_worker_flags(["--lr-warmup-steps", "5", "--precision", "bf16"], CONFIG, "acc.yaml", accelerate=True,
                       inline=True)
    check_worker_flags(["--lr-warmup-steps", "5"], inline, "ds.json", accelerate=True)
    with pytest.raises(UserError, match=r"scheduler\.params\.warmup_num_steps to 0"):
        check_worker_flags(["--lr-warmup-steps", "5"], CONFIG, "ds.json", accelerate=True)
    with pytest.raises(UserError, match=r"change train_micro_batch_size_per_gpu in ds\.json, or set it to \"auto\""):
        check_worker_flags(["--micro-batch", "4"], CONFIG, "ds.json", accelerate=True)


@pytest.mark.parametrize("launch, args, message", [
    (["--zero", "2"], ["--micro-batch", "0"], "--micro-batch must be >= 1"),
    (["--zero", "2"], ["--lr", "nan"], "--lr must be a finite number > 0, got nan"),
    (["--accelerate-config", str(CORPUS / "HKUST-LongGroup__DyME__default_config.yaml"), "--num-processes", "2"],
     ["--grad-accum", "0"], "--grad-accum must be >= 1"),
])
def test_a_flag_with_a_bad_value_is_refused_for_its_value_first(cli_run, tmp_path, launch, args, message):
    """What is wrong with the value itself is said before whether the config would ignore it."""
    result = cli_run("launch", *launch, "--run-dir", str(tmp_path / "r"), "--dry-run", "--", *args)
    assert result.exit_code == 2 and message in result.output and "the DeepSpeed config sets" not in result.output


def test_a_file_without_optimizer_or_scheduler_takes_the_workers_warmup():
    """The worker brings AdamW and WarmupLR to a file that names no optimizer, as the HF Trainer brings its own
    (worker/resolve.py): the warm-up flag is used there, not ignored. A file that names its optimizer but no
    scheduler trains at a constant LR, so the flag would be ignored: refused."""
    bare = {key: value for key, value in CONFIG.items() if key not in ("optimizer", "scheduler")}
    check_worker_flags(["--lr-warmup-steps", "5"], bare, "ds.json")
    with pytest.raises(UserError, match=r"scheduler\.params\.warmup_num_steps to 0"):
        check_worker_flags(["--lr-warmup-steps", "5"], {**bare, "optimizer": {"type": "AdamW"}}, "ds.json")
