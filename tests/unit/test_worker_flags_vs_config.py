"""Worker flags after ``--`` that a DeepSpeed config contradicts are refused by the launch (the config's value would
win on every rank, silently): launch_checks.check_worker_flags."""

from __future__ import annotations

import pytest

from dsbench.errors import UserError
from dsbench.launch_checks import check_worker_flags

CONFIG = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
          "optimizer": {"type": "AdamW", "params": {"lr": 3e-4}}, "zero_optimization": {"stage": 2}}


@pytest.mark.parametrize("args, message", [
    (["--micro-batch", "3"], "-- --micro-batch 3: the DeepSpeed config sets train_micro_batch_size_per_gpu to 2"),
    (["--grad-accum", "4"], "-- --grad-accum 4: the DeepSpeed config sets gradient_accumulation_steps to 1"),
    (["--lr", "1e-3"], "-- --lr 0.001: the DeepSpeed config sets optimizer.params.lr to 0.0003"),
    (["--grad-clip", "0.5"], "-- --grad-clip 0.5: the DeepSpeed config sets gradient_clipping to 1.0"),
    # no scheduler section: a constant LR, whatever the worker's flag says
    (["--lr-warmup-steps", "8"], "sets scheduler.params.warmup_num_steps to 0, which the ranks would use; give "
                                 "--warmup-steps 8 before -- instead"),
    (["--precision", "bf16"], "sets precision (bf16.enabled, fp16.enabled) to fp32"),
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


def test_a_scheduler_with_the_same_warmup_passes():
    warm = {**CONFIG, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 8}}}
    check_worker_flags(["--lr-warmup-steps", "8"], warm, None)
    with pytest.raises(UserError, match="warmup_num_steps to 8"):
        check_worker_flags(["--lr-warmup-steps", "4"], warm, None)
