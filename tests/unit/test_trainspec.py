"""The worker's typed run description: flags, run.json, and the two together."""

from __future__ import annotations

import json

import pytest

from dsbench.errors import UserError
from dsbench.trainflags import from_argv
from dsbench.trainspec import TrainSpec, from_dict, write
from tests.conftest import DATA


def test_flags_and_run_json_give_the_same_spec(tmp_path):
    flags = ["--strategy", "ddp", "--model", "llama-tiny", "--micro-batch", "3", "--steps", "9", "--no-fsdp-reshard",
             "--lr", "1e-3", "--precision", "bf16", "--local_rank=1"]
    spec = from_argv(flags)
    assert (spec.strategy, spec.model, spec.micro_batch, spec.steps, spec.lr) == ("ddp", "llama-tiny", 3, 9, 1e-3)
    assert spec.fsdp_reshard is False and spec.precision == "bf16" and spec.seed == TrainSpec().seed
    path = write(spec, tmp_path / "run.json")
    assert from_argv(["--run-json", str(path)]) == spec
    # a flag next to --run-json overrides the file; the rest comes from the file
    override = from_argv(["--run-json", str(path), "--steps", "4"])
    assert override.steps == 4 and override.model == "llama-tiny" and override.warmup == spec.warmup


def test_default_warmup_fits_a_short_run():
    assert from_argv(["--steps", "3"]).warmup == 2 and from_argv(["--steps", "1"]).warmup == 0
    assert from_argv([]).warmup == 3
    with pytest.raises(UserError, match="--warmup must be in 0..2"):
        from_argv(["--steps", "3", "--warmup", "3"])


@pytest.mark.parametrize("command", [["launch", "--dry-run", "--"], ["compare", "--dry-run"], ["tune", "--dry-run"]])
def test_a_warm_up_that_leaves_nothing_to_measure_is_one_rule_everywhere(cli_run, command):
    """The worker (through `dsbench launch`), compare and tune state one rule in one line that says why (until
    2026-12-04 each had its own copy, which said only the range)."""
    if command[0] == "launch":
        result = cli_run(*command, "--steps", "2", "--warmup", "5")
    else:
        result = cli_run(*command, "--steps", "2", "--warmup", "5", "--out", "o")
    assert result.exit_code == 2
    assert ("--warmup must be in 0..1: 5 warm-up steps (left out of the figures) leave none of --steps 2 to "
            "measure") in result.output, result.output


@pytest.mark.parametrize("data, needle", [
    ({"stepz": 3}, "unknown key 'stepz'"),
    ({"steps": True}, "steps must be int, got true"),
    ({"steps": "5"}, 'steps must be int, got "5"'),
    ({"lr": "fast"}, 'lr must be float, got "fast"'),
    ({"lr": float("nan")}, "--lr must be a finite number > 0, got nan"),
    ({"grad_clip": -1.0}, "--grad-clip must be a finite number >= 0, got -1.0"),
    ({"strategy": "megatron"}, "--strategy must be one of auto, deepspeed, ddp, fsdp, single"),
    ({"precision": "fp8"}, "--precision must be fp32, bf16 or fp16"),
    ({"micro_batch": 0}, "--micro-batch must be >= 1"),
])
def test_bad_run_descriptions_are_named(data, needle):
    with pytest.raises(UserError, match=needle):
        from_dict(data, "run.json")


def test_bad_files_and_flags_are_one_line_errors(tmp_path):
    (tmp_path / "list.json").write_text(json.dumps([1, 2]))
    (tmp_path / "torn.json").write_text('{"steps": ')
    cases = {("--run-json", str(tmp_path / "missing.json")): "run description not found",
             ("--run-json", str(tmp_path / "list.json")): "expected a JSON object",
             ("--run-json", str(tmp_path / "torn.json")): "malformed JSON",
             ("--run-json", str(tmp_path)): "run description is a directory",
             ("--steps", "x"): "argument --steps: invalid int value: 'x'",
             ("--bogus",): "unrecognized arguments: --bogus"}
    for argv, needle in cases.items():
        with pytest.raises(UserError, match=needle):
            from_argv(list(argv))


@pytest.mark.parametrize("argv, needle", [
    (["--strategy", "ddp", "--pipeline-stages", "2"], "--pipeline-stages 2 is for --strategy torch_pp"),
    (["--strategy", "ddp", "--tp", "2"], "--tp 2 is for --strategy torch_tp"),
    (["--strategy", "torch_pp", "--pipeline-stages", "2"], "1F1B needs at least as many micro-batches as stages"),
    (["--strategy", "torch_pp", "--pipeline-stages", "0"], "--pipeline-stages must be >= 1"),
    (["--pipeline-schedule", "zb"], "invalid choice: 'zb'"),
    (["--strategy", "ddp", "--sequence-parallel"], "--sequence-parallel .* needs --strategy torch_tp"),
    (["--strategy", "torch_tp", "--loss-parallel"], r"--loss-parallel .* --tp 2 or more \(got --strategy torch_tp"),
    (["--strategy", "torch_tp", "--tp", "2", "--sequence-parallel", "--seq-len", "127"],
     "--seq-len 127 is not divisible by --tp 2"),
    (["--activation-checkpointing", "--recompute", "selective"], "--activation-checkpointing is --recompute full"),
    (["--recompute", "half"], "invalid choice: 'half'"),
    (["--strategy", "torch_pp", "--pipeline-stages", "2", "--virtual-stages", "2"],
     "--virtual-stages 2 needs --pipeline-schedule interleaved or interleaved-zb"),
    (["--strategy", "torch_pp", "--pipeline-stages", "2", "--pipeline-schedule", "interleaved-zb",
      "--virtual-stages", "2", "--grad-accum", "5"], "interleaved-zb on 2 stages cannot split --grad-accum 5"),
    (["--strategy", "ddp", "--pipeline-schedule", "interleaved-zb", "--virtual-stages", "2"],
     "--pipeline-schedule interleaved-zb needs --strategy torch_pp"),
    (["--strategy", "torch_pp", "--pipeline-stages", "2", "--pipeline-schedule", "interleaved"],
     "needs --strategy torch_pp or torch_3d with --pipeline-stages 2 or more and --virtual-stages 2 or more"),
    (["--strategy", "torch_pp", "--pipeline-stages", "4", "--pipeline-schedule", "interleaved", "--virtual-stages",
      "2", "--grad-accum", "9"], "on 4 stages cannot split --grad-accum 9 .* work: 1, 2, 3, 4, 5, 6, 7, 8,"),
])
def test_model_parallel_flags_are_checked(argv, needle):
    with pytest.raises(UserError, match=needle):
        from_argv(argv)
    gpipe = from_argv(["--strategy", "torch_pp", "--pipeline-stages", "2", "--pipeline-schedule", "gpipe"])
    assert gpipe.grad_accum == 1  # GPipe runs fewer micro-batches than stages (launch warns of the bubble)


@pytest.mark.parametrize("argv, needle", [
    (["--compile", "--warmup", "0"], "--compile needs --warmup >= 1"),
    (["--compile", "--strategy", "torch_tp", "--tp", "2"], "--compile is not supported with --strategy torch_tp"),
    (["--fused-optimizer", "--strategy", "deepspeed"], "--strategy deepspeed steps with its config's optimizer"),
])
def test_speed_options_are_refused_where_they_cannot_be_measured_or_done(argv, needle):
    with pytest.raises(UserError, match=needle):
        from_argv(argv)


def test_compile_is_refused_for_deepspeeds_pipeline_and_autotp_layouts():
    """The layout check the launch and every rank make (layout_check.check_run_layout)."""
    from dsbench.layout_check import check_run_layout
    from dsbench.model_config import resolve_model
    from dsbench.parallel import ParallelDims

    llama = resolve_model("llama-tiny")
    spec = from_argv(["--compile", "--strategy", "deepspeed", "--model", "llama-tiny"])
    check_run_layout(spec, "deepspeed", llama, ParallelDims(world=2))  # ZeRO: engine.compile()
    for dims, needle in ((ParallelDims(world=2, pp=2), "pipeline engine"), (ParallelDims(world=2, tp=2), "AutoTP")):
        with pytest.raises(UserError, match=needle):
            check_run_layout(spec, "deepspeed", llama, dims)
    eager = from_argv(["--strategy", "deepspeed", "--model", "llama-tiny"])
    check_run_layout(eager, "deepspeed", llama, ParallelDims(world=2, pp=2))  # eager: fine


def test_speed_flags_reach_the_spec():
    spec = from_argv(["--compile", "--fused-optimizer", "--warmup", "2"])
    assert spec.compile and spec.fused_optimizer
    assert not from_argv([]).compile


def test_interleaved_micro_batch_counts_follow_torchs_rounds():
    """torch's ScheduleInterleaved1F1B runs max(1, M // P) rounds and refuses an M they do not divide."""
    from dsbench.parallel import interleaved_accepts

    assert [m for m in range(1, 13) if interleaved_accepts(m, 2)] == [1, 2, 3, 4, 6, 8, 10, 12]
    assert not interleaved_accepts(9, 4) and interleaved_accepts(12, 4) and interleaved_accepts(5, 4)
    spec = from_argv(["--strategy", "torch_pp", "--pipeline-stages", "2", "--pipeline-schedule", "interleaved",
                      "--virtual-stages", "2", "--grad-accum", "4"])
    assert (spec.pipeline_schedule, spec.virtual_stages) == ("interleaved", 2)


def test_the_two_spellings_of_full_recompute_are_one_setting():
    assert from_argv(["--activation-checkpointing"]).recompute == "full"
    assert from_argv(["--recompute", "full"]).activation_checkpointing is True
    assert from_argv(["--recompute", "selective-op"]).activation_checkpointing is False


@pytest.mark.parametrize("launch, worker, world, needle", [
    # (Phi-3's family was refused here until 2026-12-01, GPT-2's before; Megatron-style TP splits every family now)
    (["--strategy", "torch_tp", "--tp", "4", "--launcher", "torchrun", "--model", "phi3-tiny", "--num-gpus", "4"],
     ["--strategy", "torch_tp", "--tp", "4", "--model", "phi3-tiny"], 4,
     "--tp 4 must divide phi3-tiny's 4 attention heads and 2 key/value heads (each rank holds whole heads)"),
    (["--strategy", "torch_pp", "--pipeline-stages", "2", "--launcher", "torchrun", "--model", "gpt2-tiny",
      "--grad-accum", "4", "--pipeline-schedule", "interleaved", "--virtual-stages", "2"],
     ["--strategy", "torch_pp", "--pipeline-stages", "2", "--model", "gpt2-tiny", "--grad-accum", "4",
      "--pipeline-schedule", "interleaved", "--virtual-stages", "2"], 2,
     "--virtual-stages 2 does not divide gpt2-tiny's 2 layers into 2 stages x 2 equal chunks"),
    (["--strategy", "torch_tp", "--tp", "2", "--launcher", "torchrun", "--loss-parallel", "--model",
      str(DATA / "models" / "qwen2-tied-tiny")],
     ["--strategy", "torch_tp", "--tp", "2", "--loss-parallel", "--model", str(DATA / "models" / "qwen2-tied-tiny")],
     2, "--loss-parallel"),
])
def test_the_launch_and_a_rank_refuse_a_layout_in_the_same_words(cli_run, tmp_path, launch, worker, world, needle):
    """One layout check (layout_check.check_run_layout) serves both: what `dsbench launch` refuses before any process
    starts, a rank started by hand (its run resolved by worker/resolve.py) refuses with the same line."""
    from dsbench.worker.resolve import resolve

    result = cli_run("launch", *launch, "--run-dir", str(tmp_path / "run"), "--dry-run")
    assert result.exit_code == 2 and needle in result.output, result.output
    with pytest.raises(UserError) as refused:
        resolve(from_argv(worker), world, {})
    assert needle in str(refused.value) and str(refused.value) in result.output


def test_a_config_without_an_optimizer_gets_the_one_the_worker_renders(tmp_path):
    """A config left for the training script to bring its optimizer (the HF Trainer's case: many users' ZeRO
    configs have no optimizer section) trains with the AdamW the worker renders, at its flags' values; DeepSpeed
    alone stops at "zero stage 2 requires an optimizer". Measured 2026-11-30 (gpt2-tiny, 2 ranks, ZeRO-2, 4 steps):
    the losses equal to the last digit those of the same config with an AdamW section at that LR."""
    from dsbench.worker.resolve import resolve

    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}}))
    spec = from_argv(["--strategy", "deepspeed", "--deepspeed_config", str(path), "--lr", "1e-3",
                      "--weight-decay", "0.05"])
    optimizer = resolve(spec, 2, {}).ds_config["optimizer"]
    assert optimizer["type"] == "AdamW" and optimizer["params"]["lr"] == 1e-3
    assert optimizer["params"]["weight_decay"] == 0.05
    # a config that names its optimizer keeps it
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2},
                                "zero_allow_untested_optimizer": True,
                                "optimizer": {"type": "SGD", "params": {"lr": 0.5}}}))
    assert resolve(from_argv(["--strategy", "deepspeed", "--deepspeed_config", str(path)]), 2, {}).ds_config[
        "optimizer"] == {"type": "SGD", "params": {"lr": 0.5}}


def test_a_launch_takes_a_trainer_config_whose_auto_values_the_ranks_fill(cli_run, tmp_path):
    """`dsbench launch --config` of an HF Trainer config ("auto" batch, clipping, precision and buckets, as the
    corpus' LLaMA-Factory and Qwen configs write them) starts, as `deepspeed --deepspeed_config` with it does: the
    ranks fill each "auto" from the worker's flags (worker/setup.complete_ds_config). Until 2026-11-30 the launch
    refused every "auto" and told the user of an --allow-auto that launch does not have."""
    config = DATA / "corpus" / "ds_configs" / "hiyouga__LLaMA-Factory__examples_deepspeed_ds_z3_config.json"
    assert "auto" in config.read_text()
    result = cli_run("launch", "--config", str(config), "--run-dir", str(tmp_path / "run"), "--dry-run")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "run" / "ds_config.json").read_text()) == json.loads(config.read_text())
    # its "auto" values in one note that names each (a walk of the JSON here), not one note apiece telling the user to
    # set it (until 2026-12-02: 9 notes for this file)

    def autos(node, path=""):
        if node == "auto":
            return [path]
        items = node.items() if isinstance(node, dict) else ()
        return [found for key, value in items for found in autos(value, f"{path}.{key}".lstrip("."))]

    expected = autos(json.loads(config.read_text()))
    notes = [line for line in result.output.splitlines() if line.startswith("note: ") and "'auto'" in line]
    assert len(expected) > 1 and notes == [
        f"note: {config}: {len(expected)} 'auto' values filled on the ranks from the worker's flags, as the HF "
        f"Trainer fills them: {', '.join(expected)}"]
