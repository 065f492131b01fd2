import json

import pytest

from dsbench.configs.api import validate_file
from dsbench.configs.findings import has_errors
from dsbench.configs.loader import parse_config_text
from dsbench.configs.validate import ValidateContext, validate

BASE = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 2}}


def run(config, world=2, allow_auto=False, ds=False):
    return validate(config, ValidateContext(world_size=world, allow_auto=allow_auto), deepspeed_check=ds)


def codes(findings):
    return [(f.severity, f.code, f.path) for f in findings]


def test_clean_config_has_no_findings_and_deepspeed_agrees():
    assert run(BASE, ds=True) == []


def test_unknown_keys_at_every_level_with_suggestions():
    config = {**BASE, "train_batch_sizee": 4, "zero_optimization": {"stage": 3, "overlap_com": True,
                                                                    "offload_param": {"device": "cpu", "pinmemory": 1}},
              "pipeline": {"enabled": True}, "activation_checkpointing": {"partition_activation": True},
              "flops_profiler": {"enable": True}, "autotuning": {"anything": 1},
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "whatever": 1}}}
    found = {f.path: f for f in run(config) if f.code == "unknown-key"}
    assert set(found) == {"train_batch_sizee", "zero_optimization.overlap_com",
                          "zero_optimization.offload_param.pinmemory", "pipeline.enabled",
                          "activation_checkpointing.partition_activation", "flops_profiler.enable"}
    assert "did you mean 'train_batch_size'" in found["train_batch_sizee"].fix
    assert "did you mean 'overlap_comm'" in found["zero_optimization.overlap_com"].fix
    assert "did you mean 'partition_activations'" in found["activation_checkpointing.partition_activation"].fix


def test_removed_keys_quote_deepspeed():
    [finding] = run({**BASE, "elasticity": {"enabled": True}})
    assert finding.code == "removed-key" and "Elastic training has been removed" in finding.message
    # DeepSpeed's sentence keeps its one full stop before the fix (until 2026-12-01 a second one was added)
    import deepspeed
    from deepspeed.runtime.config import _REMOVED_ZERO_CONFIG_KEYS

    [mics] = run({**BASE, "zero_optimization": {"stage": 3, "mics_shard_size": -1}})
    assert mics.text() == (f"zero_optimization.mics_shard_size: removed in DeepSpeed {deepspeed.__version__}: "
                           f"{_REMOVED_ZERO_CONFIG_KEYS['mics_shard_size']} Fix: {mics.fix}")


@pytest.mark.parametrize("batch, world, message", [
    ({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}, 2,
     "train_batch_size 32 != micro 4 x grad_accum 2 x data-parallel 2 = 16"),
    ({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 3}, 2,
     "train_batch_size 10 != micro 3 x grad_accum 1 x data-parallel 2 = 6"),
    ({"train_batch_size": 26, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 3}, None,
     "train_batch_size 26 is not a multiple of micro 4 x grad_accum 3 = 12"),
])
def test_batch_arithmetic_shows_the_numbers(batch, world, message):
    [finding] = run({"zero_optimization": {"stage": 1}, **batch}, world=world)
    assert finding.code == "batch-mismatch" and message in finding.message


def test_batch_uses_data_parallel_size_with_pipeline_and_tp():
    config = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
              "pipeline": {"stages": 2}, "zero_optimization": {"stage": 1}}
    assert run(config, world=4) == []
    [finding] = run(config, world=8)
    assert "data-parallel 4" in finding.message and "/ 2 pipeline stages" in finding.message


def test_batch_missing_and_bad_types():
    assert codes(run({"gradient_accumulation_steps": 2})) == [("error", "batch-missing", "train_batch_size")]
    assert codes(run({"train_micro_batch_size_per_gpu": "4"})) == [
        ("error", "batch-type", "train_micro_batch_size_per_gpu")]


@pytest.mark.parametrize("extra, code, severity", [
    ({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}, "offload-param-below-zero3", "warning"),
    ({"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}}, "offload-optimizer-zero0",
     "warning"),
    ({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}}, "nvme-without-path", "error"),
    ({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/x"}}},
     "nvme-optimizer-below-zero3", "warning"),
    ({"zero_optimization": {"stage": 2, "zero_quantized_weights": True}}, "zeropp-below-zero3", "warning"),
    ({"zero_optimization": {"stage": 1, "zero_hpz_partition_size": 8}}, "zeropp-below-zero3", "warning"),
    ({"fp16": {"enabled": True}, "bf16": {"enabled": True}}, "fp16-and-bf16", "error"),
    ({"pipeline": {"stages": 2}, "zero_optimization": {"stage": 2}}, "pipeline-zero2", "error"),
    ({"pipeline": {"stages": 2}, "tensor_parallel": {"autotp_size": 2}, "zero_optimization": {"stage": 1}},
     "pipeline-autotp", "error"),  # DeepSpeed's AutoTP finds no policy in a PipelineModule (seen on 4 ranks)
    # DeepSpeed checks it against two rank counts (configs/batch.checked_twice; its own DeepSpeedConfig as the
    # oracle: tests/unit/test_config_batch.py)
    ({"tensor_parallel": {"autotp_size": 2}, "zero_optimization": {"stage": 3}, "train_batch_size": 4},
     "autotp-zero3-train-batch", "warning"),
])
def test_combinations(extra, code, severity):
    findings = run({**BASE, **extra})
    assert (severity, code) in [(f.severity, f.code) for f in findings]


def test_autotp_under_zero3_without_train_batch_size_warns_nothing():
    config = {**BASE, "tensor_parallel": {"autotp_size": 2}, "zero_optimization": {"stage": 3}}
    config.pop("train_batch_size", None)
    assert "autotp-zero3-train-batch" not in [f.code for f in run(config)]


PIPE_ZERO0 = {**BASE, "gradient_accumulation_steps": 2, "pipeline": {"stages": 2}, "zero_optimization": {"stage": 0},
              "gradient_clipping": 1.0}


@pytest.mark.parametrize("change, warned", [
    ({}, True),  # fp32, ZeRO-0, clipping: DeepSpeed clips by the first stage's norm (worker/engines/pipe_clip.py)
    ({"gradient_clipping": "auto"}, True),  # the HF Trainer fills its max_grad_norm (1.0 by default)
    ({"gradient_clipping": 0.0}, False),
    ({"gradient_clipping": True}, False),  # not a number: the type check names it
    ({"zero_optimization": {"stage": 1}}, False),  # ZeRO-1 computes its own norm over every stage
    ({"bf16": {"enabled": True}}, False),
    ({"fp16": {"enabled": True}}, False),
    ({"pipeline": {"stages": 1}}, False),
])
def test_a_zero0_fp32_pipeline_that_clips_is_warned(change, warned):
    findings = run({**PIPE_ZERO0, **change})
    assert (("warning", "pipeline-zero0-clip", "gradient_clipping") in codes(findings)) is warned


@pytest.mark.parametrize("accumulation, bubble", [(1, True), (-1, False), (0, False), (2, False)])
def test_a_pipeline_bubble_is_warned_for_a_real_count_of_micro_batches(accumulation, bubble):
    """gradient_accumulation_steps -1 under a 2-stage pipeline stopped validate, explain and launch with an internal
    ZeroDivisionError in the bubble's (P-1)/(M+P-1) (found 2026-12-04 by mutating corpus configs); below 1 it is the
    type check's error alone."""
    findings = codes(run({**PIPE_ZERO0, "gradient_accumulation_steps": accumulation}))
    assert (("warning", "pipeline-bubble", "gradient_accumulation_steps") in findings) is bubble
    assert (("error", "batch-type", "gradient_accumulation_steps") in findings) is (accumulation < 1)


def test_tensor_parallel_must_divide_world():
    [finding] = run({**BASE, "tensor_parallel": {"autotp_size": 4}}, world=6)
    assert finding.code == "degree-not-dividing" and finding.path == "tensor_parallel.autotp_size"


def test_auto_is_an_error_naming_the_value_unless_allowed():
    config = {**BASE, "train_micro_batch_size_per_gpu": "auto", "optimizer": {"type": "AdamW",
                                                                               "params": {"lr": "auto"}}}
    findings = run(config)
    assert {f.path for f in findings} == {"train_micro_batch_size_per_gpu", "optimizer.params.lr"}
    assert all(f.severity == "error" and f.code == "unresolved-auto" for f in findings)
    assert "becomes 8" in findings[0].message and "becomes 5e-05" in findings[1].message
    allowed = run(config, allow_auto=True)
    assert not has_errors(allowed) and {f.path for f in allowed} == {f.path for f in findings}
    # allowed, the warning no longer tells the user to pass the flag they passed (until 2026-12-02 it did)
    assert all("--allow-auto" not in f.text() and "becomes" in f.message for f in allowed)


def test_deepspeed_s_own_auto_values_are_not_the_trainer_s_to_fill():
    """ZenFlow's select_strategy, select_interval and update_interval, data_types.keep_in_fp32_modules, AutoEP's
    router settings and pipeline.stages take "auto" as DeepSpeed's own value. Oracle: DeepSpeed 0.19.8's parsed
    config, whose default at each of them is "auto". Until 2026-12-04 validate refused a ZenFlow config for two."""
    from deepspeed.runtime.config import DeepSpeedConfig

    from dsbench.configs.autofill import DEEPSPEED_AUTO

    parsed = DeepSpeedConfig({"train_micro_batch_size_per_gpu": 1, "train_batch_size": 1, "expert_parallel": {},
                              "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"},
                                                    "zenflow": {}}})
    defaults = {"pipeline.stages": parsed.pipeline["stages"],
                "data_types.keep_in_fp32_modules": parsed.keep_in_fp32_modules,
                **{f"zero_optimization.zenflow.{key}": getattr(parsed.zero_config.zenflow, key)
                   for key in ("select_strategy", "select_interval", "update_interval")},
                **{f"expert_parallel.{key}": getattr(parsed.expert_parallel_config, key)
                   for key in ("score_apply", "combine_impl", "row_weighting_impl", "score_func", "top_k")}}
    assert set(defaults) == DEEPSPEED_AUTO and set(defaults.values()) == {"auto"}
    config = {**BASE, "data_types": {"keep_in_fp32_modules": "auto"}, "zero_optimization": {
        "stage": 2, "offload_optimizer": {"device": "cpu"},
        "zenflow": {"topk_ratio": 0.05, "select_strategy": "auto", "select_interval": "auto", "update_interval": 4}}}
    assert not [f for f in run(config) if f.code == "unresolved-auto"]
    trainer = {**config, "gradient_clipping": "auto"}  # the Trainer's placeholder beside them is still named
    assert [f.path for f in run(trainer) if f.code == "unresolved-auto"] == ["gradient_clipping"]


def test_all_problems_are_listed_not_only_the_first():
    config = {"train_batch_size": 7, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
              "zero_optimization": {"stage": 1, "offload_param": {"device": "cpu"}, "bogus": 1},
              "fp16": {"enabled": True}, "bf16": {"enabled": True}, "wall_clock": True}
    assert {f.code for f in run(config)} == {"batch-mismatch", "offload-param-below-zero3", "unknown-key",
                                             "fp16-and-bf16"}


def test_deepspeed_own_classes_catch_bad_values():
    findings = run({**BASE, "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "buffer_count": -1}}},
                   ds=True)
    [ds] = [f for f in findings if f.code == "deepspeed-rejects"]
    assert ds.path == "zero_optimization.offload_param.buffer_count" and "-1" in ds.message
    # what dsbench checks itself (an offload device outside DeepSpeed's enum) is said once, in dsbench's words
    findings = run({**BASE, "zero_optimization": {"stage": 3, "offload_param": {"device": "gpu"}}}, ds=True)
    assert [(f.code, f.path) for f in findings] == [("value-type", "zero_optimization.offload_param.device")]


def test_an_assertion_across_fields_is_said_in_deepspeeds_words_and_explained_under_zero3():
    """ZeRO-3's partial optimizer offload (offload_optimizer.ratio): DeepSpeed's own section class asserts it below
    stage 3, and its message is the finding's, whole (until 2026-12-01 the section's repr filled the line and cut
    it off); under ZeRO-3, explain says which share goes to the host (stage3.py splits the sub-groups so)."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from pydantic import ValidationError

    from dsbench.configs.explain import explain

    section = {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}
    with pytest.raises(ValidationError) as raised:
        DeepSpeedZeroConfig(**section)
    [ds] = [f for f in run({**BASE, "zero_optimization": section}, ds=True) if f.code == "deepspeed-rejects"]
    assert ds.path == "zero_optimization" and raised.value.errors()[0]["msg"] in ds.message
    assert len(ds.line()) < 240 and "DeepSpeedZeroConfig(" not in ds.message
    lines = explain({**BASE, "zero_optimization": {**section, "stage": 3}})
    assert any("only 30% of them (offload_optimizer.ratio 0.3)" in line for line in lines), lines
    assert not any("ratio" in line for line in explain({**BASE, "zero_optimization": {
        "stage": 3, "offload_optimizer": {"device": "cpu"}}}))


def test_deepspeed_check_runs_at_the_given_world_size():
    config = {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2}
    assert run(config, world=4, ds=True) == []


def test_malformed_json_reports_line_and_column():
    config, findings = parse_config_text('{\n  "a": 1,\n  "b": ]\n}', "x.json")
    assert config is None and findings[0].code == "malformed-json" and "x.json:3:8" in findings[0].message


def test_duplicate_keys_are_errors_as_in_deepspeed():
    _, findings = parse_config_text('{"fp16": {"enabled": true}, "fp16": {}}', "x.json")
    assert findings[0].code == "duplicate-key" and findings[0].path == "fp16"


def test_hjson_only_files_are_a_warning():
    config, findings = parse_config_text('{\n // comment\n "train_micro_batch_size_per_gpu": 1,\n}', "x.json")
    assert config == {"train_micro_batch_size_per_gpu": 1}
    assert findings[0].severity == "warning" and findings[0].code == "not-strict-json"


@pytest.mark.parametrize("text", ['\ufeff{"train_micro_batch_size_per_gpu": 1}',
                                  '\ufeff{"train_micro_batch_size_per_gpu": 1,}'])
def test_a_byte_order_mark_is_named_as_what_to_remove(text):
    """A Windows editor's "UTF-8 with BOM": DeepSpeed's hjson skips the mark, json.load (the HF Trainer's and
    accelerate's reader) stops at it; the fix names it, and, the mark removed, what else strict JSON refuses.
    Oracles: hjson and json themselves, on the file as the fix leaves it."""
    import json

    import hjson

    config, findings = parse_config_text(text, "x.json")
    assert config == dict(hjson.loads(text)) and findings[0].code == "not-strict-json"
    with pytest.raises(ValueError, match="BOM"):
        json.loads(text)
    fix = findings[0].fix
    assert "byte-order mark" in fix
    try:
        json.loads(text[1:])
        assert "comments" not in fix  # the mark alone
    except ValueError:
        assert "trailing commas" in fix


def test_template_placeholders():
    _, findings = parse_config_text('{"train_batch_size": CONFIG_BATCH_SIZE,\n "steps_per_print": 1}', "t.json")
    assert codes(findings) == [("error", "template-placeholder", "train_batch_size")]


@pytest.mark.parametrize("text, path", [
    ('{"zero_optimization": {"stage": ${zero_stage},\n "overlap_comm": true}}', "zero_optimization.stage"),
    ('{"zero_optimization": {"offload_param": {"device": "$OFFLOAD_DEVICE"}}}',
     "zero_optimization.offload_param.device"),
    ('{"train_batch_size": $GLOBAL_BATCH_SIZE,\n "steps_per_print": 1}', "train_batch_size"),
])
def test_shell_variables_left_in_a_config_are_template_placeholders(text, path):
    """From scripts that write the config with a heredoc (Megatron-DeepSpeed's examples), saved unexpanded."""
    config, findings = parse_config_text(text, "t.json")
    assert config is None and codes(findings) == [("error", "template-placeholder", path)]


def test_a_value_that_only_mentions_a_variable_is_not_a_placeholder():
    config, findings = parse_config_text('{"zero_optimization": {"offload_param": {"nvme_path": "$HOME/nvme"}}}',
                                         "t.json")
    assert findings == [] and config["zero_optimization"]["offload_param"]["nvme_path"] == "$HOME/nvme"


def test_top_level_must_be_an_object(tmp_path):
    path = tmp_path / "list.json"
    path.write_text(json.dumps([1, 2]))
    _, findings = validate_file(str(path), None, allow_auto=False)
    assert findings[0].code == "not-an-object"


def test_autotp_batch_counts_every_rank_like_deepspeed():
    """deepspeed 0.19.8 asserts train_batch_size over the full world with AutoTP (no mpu in DeepSpeedConfig)."""
    config = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
              "tensor_parallel": {"autotp_size": 2}, "zero_optimization": {"stage": 1}}
    assert run(config, world=2, ds=True) == []
    [finding] = run({**config, "train_batch_size": 2}, world=2, ds=True)
    assert finding.code == "batch-mismatch" and "DeepSpeed counts AutoTP ranks" in finding.message


@pytest.mark.parametrize("name", ["AdamW", "adam", "Lamb", "Lion", "SGD", "sgd", "RAdam", "Adafactor", "OneBitAdam",
                                  "ZeroOneAdam", "FusedAdam", "adamw_torch"])
def test_an_optimizer_the_engine_would_not_build_is_an_error(name):
    """The oracle: DeepSpeed's engine's own test (``_is_supported_optimizer``) of the name DeepSpeedConfig keeps."""
    from deepspeed.runtime.config import DEEPSPEED_OPTIMIZERS
    from deepspeed.runtime.engine import DeepSpeedEngine

    kept = name.lower() if name.lower() in DEEPSPEED_OPTIMIZERS else name  # DeepSpeedConfig.optimizer_name
    builds = DeepSpeedEngine._is_supported_optimizer(None, kept)
    # ZeRO-0: the engine's further checks of the class it builds under ZeRO are tests/unit/test_optimizer_check.py's
    findings = run({**BASE, "zero_optimization": {"stage": 0}, "optimizer": {"type": name, "params": {"lr": 1e-3}}},
                   ds=True)
    assert (not [f for f in findings if f.path == "optimizer.type"]) is builds, findings


@pytest.mark.parametrize("value", [123, 1.5, True, ["AdamW"], {"name": "AdamW"}, None, "AdamW", "WarmupLR"])
def test_an_optimizer_or_scheduler_type_that_is_no_name_is_refused_by_its_path(value):
    """Until 2026-12-04 `"type": 123` passed `dsbench launch --config` (and validate named only DeepSpeedConfig's
    AttributeError for an optimizer's, and nothing for a scheduler's), to stop every rank at start-up. Oracles:
    DeepSpeedConfig for the optimizer's (it lower-cases the name), and the engine's own _scheduler_from_config
    for the scheduler's (it looks the name up with hasattr), on a stand-in engine and a real torch optimizer."""
    import types

    import torch
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.engine import DeepSpeedEngine

    def stops(build) -> bool:
        try:
            build()
        except (AttributeError, TypeError, AssertionError):
            return True
        return False

    optimizer = {**BASE, "zero_optimization": {"stage": 0}, "optimizer": {"type": value, "params": {"lr": 1e-3}}}
    # the type's own kind (a name DeepSpeedConfig keeps and the engine then refuses is the name check's, above)
    refused = [f for f in run(optimizer, world=1) if f.path == "optimizer.type" and f.code == "value-type"]
    assert bool(refused) is stops(lambda: DeepSpeedConfig(optimizer)), refused
    engine = types.SimpleNamespace(scheduler_name=lambda: value, scheduler_params=lambda: {})
    torch_optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    built = stops(lambda: DeepSpeedEngine._scheduler_from_config(engine, torch_optimizer))
    scheduler = {**BASE, "scheduler": {"type": value}}
    refused = [f for f in run(scheduler) if f.path == "scheduler.type"]
    assert bool(refused) is built, refused


def test_explain_names_the_clipping_deepspeed_applies_where_the_config_leaves_it_out():
    """Oracle: DeepSpeed's parsed config, whose gradient_clipping is what its engine clips at."""
    from deepspeed.runtime.config import DeepSpeedConfig

    from dsbench.configs.explain import explain

    for clip in (None, 0.0, 0.3):
        config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                  **({"gradient_clipping": clip} if clip is not None else {})}
        said = [line for line in explain(config) if line.startswith("gradient clipping")]
        applied = DeepSpeedConfig(config).gradient_clipping
        assert said == ([f"gradient clipping: global norm {applied:g}"
                         + (", DeepSpeed's default where the config leaves gradient_clipping out" if clip is None
                            else "")] if applied else []), clip
