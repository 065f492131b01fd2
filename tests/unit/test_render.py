import json

import pytest

from dsbench.configs.api import make_render_spec, render_config
from dsbench.configs.autofill import auto_paths
from dsbench.configs.findings import has_errors
from dsbench.configs.overrides import apply_overrides, get_path, parse_value
from dsbench.configs.render import fragment_names, render
from dsbench.configs.templates import presets
from dsbench.configs.validate import ValidateContext, validate
from dsbench.errors import UserError
from dsbench.io import dumps_json
from dsbench.spec import RenderSpec
from tests.conftest import ROOT

PRESETS = sorted(presets())


@pytest.mark.parametrize("world", [1, 2, 8, 64])
@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_renders_and_deepspeed_accepts_it(name, world):
    needs = presets()[name].get("pipeline_stages", 1) * presets()[name].get("tp", 1)
    flags = {"world_size": world, "micro_batch": 2, "grad_accum": 2}
    model = "llama-7b" if presets()[name].get("tp", 1) > 1 else "gpt2"  # AutoTP splits Llama-family models only
    if world % needs:
        with pytest.raises(UserError, match="not divisible"):
            render_config(flags, name, model=model)
        return
    config, _ = render_config(flags, name, model=model)
    assert auto_paths(config) == []
    stages = presets()[name].get("pipeline_stages", 1)
    assert config["train_batch_size"] == 2 * 2 * world // stages
    findings = validate(config, ValidateContext(world_size=world), deepspeed_check=True)
    assert not has_errors(findings), [f.line() for f in findings]


@pytest.mark.parametrize("name", PRESETS)
def test_shipped_preset_files_are_current(name):
    """ds_configs/<preset>.json is `dsbench render --preset NAME --keep-auto` (regenerate with `make configs`)."""
    config, _ = render_config({}, name, keep_auto=True)
    assert (ROOT / "ds_configs" / f"{name}.json").read_text() == dumps_json(config)


def test_auto_values_resolve_like_the_hf_trainer():
    config, notes = render_config({"zero": 3, "world_size": 4, "micro_batch": 3, "grad_accum": 5, "lr": 1e-4,
                                   "precision": "bf16", "grad_clip": 0.5, "warmup_steps": 10}, model="gpt2")
    zero = config["zero_optimization"]
    assert zero["reduce_bucket_size"] == 768 * 768
    assert zero["stage3_prefetch_bucket_size"] == int(0.9 * 768 * 768)
    assert zero["stage3_param_persistence_threshold"] == 7680
    assert (config["train_batch_size"], config["train_micro_batch_size_per_gpu"],
            config["gradient_accumulation_steps"]) == (60, 3, 5)
    assert config["optimizer"]["params"] == {"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}
    assert config["scheduler"]["params"] == {"warmup_min_lr": 0, "warmup_max_lr": 1e-4, "warmup_num_steps": 10}
    assert config["bf16"] == {"enabled": True} and "fp16" not in config
    assert config["gradient_clipping"] == 0.5
    assert notes == []


def test_without_model_bucket_sizes_fall_back_to_deepspeed_defaults_with_a_note():
    config, notes = render_config({"zero": 3, "world_size": 1})
    assert "reduce_bucket_size" not in config["zero_optimization"]
    # one line for the three sizes a plain `dsbench launch --zero 3` leaves to DeepSpeed (its defaults, by name)
    assert notes == ["no --model given, so DeepSpeed's defaults apply to reduce_bucket_size 500,000,000, "
                     "stage3_prefetch_bucket_size 50,000,000, stage3_param_persistence_threshold 100,000 (pass "
                     "--model to size them as the HF Trainer does)"]


def test_keep_auto_leaves_auto_except_explicit_flags():
    config, _ = render_config({"zero": 2, "micro_batch": 4}, keep_auto=True)
    assert config["train_micro_batch_size_per_gpu"] == 4
    assert config["train_batch_size"] == "auto" and config["optimizer"]["params"]["lr"] == "auto"
    assert config["fp16"]["enabled"] == "auto" and config["bf16"]["enabled"] == "auto"


def test_no_warmup_means_no_scheduler():
    """DeepSpeed's WarmupLR rejects 0 warm-up steps and raises 1 to 2, so "no warm-up" means "no scheduler"."""
    config, _ = render_config({"zero": 1})
    assert "scheduler" not in config
    for steps, severity in ((0, "error"), (1, "warning")):
        findings = validate({**config, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": steps}}},
                            ValidateContext(world_size=1), deepspeed_check=True)
        assert [(f.code, f.severity) for f in findings if f.code.startswith("warmup")] == [("warmup-below-2",
                                                                                            severity)]


def test_global_batch_derives_accumulation():
    config, _ = render_config({"world_size": 8, "micro_batch": 4, "global_batch": 256})
    assert config["gradient_accumulation_steps"] == 8 and config["train_batch_size"] == 256


@pytest.mark.parametrize("flags, needle", [
    ({"world_size": 8, "micro_batch": 3, "global_batch": 100}, "not a multiple"),
    ({"world_size": 2, "micro_batch": 1, "global_batch": 8, "grad_accum": 3}, "disagrees with --grad-accum"),
    ({"zero": 2, "offload_param": "cpu"}, "needs --zero 3"),
    ({"zero": 3, "offload": "nvme"}, "--nvme-path"),
    ({"zero": 2, "offload": "nvme", "nvme_path": "/x"}, "needs --zero 3"),
    ({"zero": 0, "offload": "cpu"}, "needs --zero 1, 2 or 3"),
    ({"zero": 2, "pipeline_stages": 2, "world_size": 2}, "rejects ZeRO-2/3"),
    ({"tp": 3, "world_size": 4}, "not divisible"),
    ({"micro_batch": 0}, "--micro-batch must be >= 1"),
])
def test_bad_flag_combinations_name_the_flag(flags, needle):
    with pytest.raises(UserError, match=needle):
        render_config(flags)


def test_offload_nvme_and_parallel_fragments():
    spec = RenderSpec(zero=3, offload="nvme", offload_param="nvme", nvme_path="/mnt/nvme", world_size=4, tp=2,
                      micro_batch=1)
    assert fragment_names(spec)[-3:] == ["offload_optimizer_nvme", "offload_param_nvme", "tensor_parallel"]
    config, _ = render(spec)
    assert get_path(config, "zero_optimization.offload_param.nvme_path") == "/mnt/nvme"
    assert get_path(config, "zero_optimization.offload_optimizer.nvme_path") == "/mnt/nvme"
    assert config["tensor_parallel"] == {"autotp_size": 2}
    # AutoTP under ZeRO-3: DeepSpeed checks train_batch_size against two rank counts, so it is left for DeepSpeed to
    # derive (both of its checks accept the render: tests/unit/test_config_batch.py)
    assert "train_batch_size" not in config and config["train_micro_batch_size_per_gpu"] == 1


def test_set_overrides_are_json_typed_and_applied_last():
    config, _ = render_config({"zero": 2, "world_size": 1}, sets=(
        "zero_optimization.stage=3", "optimizer.params.lr=1e-5", "zero_optimization.overlap_comm=false",
        "comms_logger.enabled=true", "optimizer.type=Adam", "train_micro_batch_size_per_gpu=7"))
    assert config["zero_optimization"]["stage"] == 3 and config["optimizer"]["params"]["lr"] == 1e-5
    assert config["zero_optimization"]["overlap_comm"] is False and config["comms_logger"] == {"enabled": True}
    assert config["optimizer"]["type"] == "Adam"
    assert config["train_batch_size"] == 7  # derived from the overridden micro-batch


@pytest.mark.parametrize("item, needle", [("stage3", "expected KEY.PATH=VALUE"), ("=3", "expected"),
                                          ("a..b=1", "expected"), ("optimizer.type.x=1", "not an object")])
def test_bad_set_items(item, needle):
    with pytest.raises(UserError, match=needle):
        apply_overrides({"optimizer": {"type": "AdamW"}}, [item])


def test_parse_value_types():
    assert parse_value("3") == 3 and parse_value("1e-4") == 1e-4 and parse_value("true") is True
    assert parse_value("[1, 2]") == [1, 2] and parse_value("cpu") == "cpu" and parse_value("null") is None


def test_render_is_deterministic_and_sorted():
    a, _ = render_config({"zero": 3, "offload": "cpu"}, model="llama-tiny")
    b, _ = render_config({"zero": 3, "offload": "cpu"}, model="llama-tiny")
    assert dumps_json(a) == dumps_json(b)
    assert list(a) == sorted(a)


def test_preset_values_are_overridden_by_explicit_flags():
    spec, _ = make_render_spec({"offload": "none", "precision": "bf16"}, "zero3_offload")
    assert (spec.zero, spec.offload, spec.offload_param, spec.precision) == (3, "none", "cpu", "bf16")
    with pytest.raises(UserError, match="needs --zero 3"):
        make_render_spec({"zero": 2}, "zero3_offload")  # the preset's param offload conflicts with the flag


def test_unknown_preset_lists_known_ones():
    with pytest.raises(UserError, match="zero3_offload"):
        render_config({}, "zero4")


def test_rendered_json_is_plain_json():
    config, _ = render_config({"zero": 1})
    assert json.loads(dumps_json(config)) == config


@pytest.mark.parametrize("sets, flags", [
    (("pipeline.stages=2",), {"pipeline_stages": 2}),
    (('pipeline={"stages": 2}',), {"pipeline_stages": 2}),
    (("tensor_parallel.autotp_size=2",), {"tp": 2, "zero": 1}),
    (("sequence_parallel_size=2",), {"ulysses": 2, "zero": 1}),
])
def test_a_degree_written_by_set_renders_the_batch_its_flag_does(sets, flags):
    """`--set pipeline.stages=2` lays out the ranks as `--pipeline-stages 2` does, so the accumulation for a fixed
    global batch counts the data-parallel ranks that layout leaves (the flag's render is the oracle; the degree key
    itself is the --set's, applied last)."""
    base = {"world_size": 4, "micro_batch": 1, "global_batch": 8}
    by_set, _ = render_config({**base, "zero": flags.get("zero")}, sets=sets)
    by_flag, _ = render_config({**base, **flags})
    assert by_set["gradient_accumulation_steps"] == by_flag["gradient_accumulation_steps"]
    assert by_set["train_batch_size"] == by_flag["train_batch_size"] == 8
    if "pipeline_stages" in flags:  # 2 data-parallel ranks, no --zero: the stage the pipeline engine takes
        assert by_set["gradient_accumulation_steps"] == 4
        assert by_set["zero_optimization"]["stage"] == by_flag["zero_optimization"]["stage"] == 1
        assert by_set["pipeline"]["stages"] == 2


@pytest.mark.parametrize("sets, message", [
    (("pipeline.stages=2",), "--set pipeline.stages=2: world size 3 is not divisible by pipeline.stages 2 x --tp 1"),
    (('pipeline={"stages": 2}',), '--set pipeline={"stages": 2}: world size 3 is not divisible by pipeline.stages 2'),
])
def test_a_degree_written_by_set_that_does_not_divide_is_named_by_the_set(sets, message):
    with pytest.raises(UserError) as error:
        render_config({"world_size": 3}, sets=sets)
    assert str(error.value).startswith(message), error.value


@pytest.mark.parametrize("world", [1, 2, 4, 8])
@pytest.mark.parametrize("sets", [(), ("pipeline.stages=2",), ("pipeline.stages=1",), ("pipeline.stages=0",),
                                  ('pipeline.stages="auto"',), ("tensor_parallel.autotp_size=2",),
                                  ("sequence_parallel_size=2", "zero_optimization.stage=1"),
                                  ("pipeline.stages=2", "tensor_parallel.autotp_size=2", "zero_optimization.stage=1")])
@pytest.mark.parametrize("flags", [{}, {"pipeline_stages": 2}, {"tp": 2, "zero": 1}, {"ulysses": 2, "zero": 1}])
def test_the_render_s_layout_is_the_rendered_config_s(world, sets, flags):
    """The one layout a launch works out (the render spec's) is the one the config's keys make
    (configs.layout.layout_of, which reads the JSON alone), for any mix of degree flags and --set."""
    from dsbench.configs.layout import layout_of

    try:
        spec, _ = make_render_spec({"world_size": world, "micro_batch": 1, **flags}, sets=sets, check_model=False)
    except UserError:
        return  # a layout the world cannot take is refused before anything renders
    config, _ = render(spec)
    assert layout_of(config, world) == spec.dims()


@pytest.mark.parametrize("key, value, needle", [
    ("pipeline.stages", 0, "must be >= 1, got 0"), ("pipeline.stages", 2.0, "must be a whole number, got 2.0"),
    ("pipeline.stages", True, "must be a whole number, got true"), ("pipeline.stages", "two", "a whole number"),
    ("tensor_parallel.autotp_size", -1, "must be >= 0, got -1"), ("sequence_parallel_size", 0, "must be >= 1"),
])
def test_a_degree_that_is_not_a_whole_number_is_an_error(key, value, needle):
    """configs/layout.py reads such a degree as 1 while DeepSpeed would take it as written (PipelineModule's
    num_stages, TPConfig's autotp_size): validation names it instead."""
    from dsbench.configs.overrides import set_path

    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2}
    set_path(config, key.split("."), value)
    findings = [f for f in validate(config, ValidateContext(world_size=4), deepspeed_check=False)
                if f.path == key and f.severity == "error"]
    assert findings and needle in findings[0].message, [f.line() for f in findings]


@pytest.mark.parametrize("key, value", [("pipeline.stages", "auto"), ("tensor_parallel.autotp_size", 0),
                                        ("pipeline.stages", 2), ("sequence_parallel_size", 1)])
def test_degrees_deepspeed_takes_pass(key, value):
    from dsbench.configs.overrides import set_path

    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2}
    set_path(config, key.split("."), value)
    assert not [f for f in validate(config, ValidateContext(world_size=4), deepspeed_check=False) if f.path == key]


@pytest.mark.parametrize(("item", "message"), [
    ("a." * 3000 + "b=1", "3,001 keys deep; a config nests at most 64 levels"),
    ("train_micro_batch_size_per_gpu=" + "9" * 5000, "a number too long to read (over 4,300 digits)"),
    ("optimizer.params.betas=" + "[" * 5000 + "]" * 5000, "nested deeper than 64 levels"),
    ("a." * 40 + "b=" + "[" * 30 + "]" * 30, "nested deeper than 64 levels"),  # the key path and the value together
])
def test_a_set_too_deep_or_too_long_is_one_line(cli_run, item, message):
    """Each was an internal error (RecursionError in the checks that walk the config, int()'s 4,300-digit
    ValueError) until 2026-11-30; now refused as a config file holding the same would be."""
    result = cli_run("render", "--preset", "zero2", "--set", item)
    assert result.exit_code == 2 and message in result.output and "internal error" not in result.output
