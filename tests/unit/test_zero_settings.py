"""The zero_optimization section read once (dsbench/zero_section.py), against DeepSpeed's own parser as the oracle."""

import pytest

from dsbench.configs.types import check_types
from dsbench.configs.validate import ValidateContext, validate
from dsbench.zero_section import zero_settings

# (section, as users write it): whole floats (pydantic's lax integers), offload sections, buckets unset
SECTIONS = [
    {"stage": 2.0, "reduce_bucket_size": 5e8},
    {"stage": 3, "stage3_prefetch_bucket_size": 5e7, "offload_optimizer": {"device": "cpu"},
     "offload_param": {"device": "nvme", "nvme_path": "/local"}},
    {"stage": 1, "offload_optimizer": {"device": "none"}},
    {"stage": 0},
    {},
    # DeepSpeed's deprecated spellings (the corpus' Megatron-LM ZeRO-3 release config writes cpu_offload: true)
    {"stage": 2, "cpu_offload": True},
    {"stage": 3, "cpu_offload": True, "cpu_offload_param": True, "cpu_offload_use_pin_memory": True},
    {"stage": 2, "cpu_offload": False},
    {"stage": 3, "cpu_offload_param": True, "offload_optimizer": {"device": "nvme", "nvme_path": "/local"}},
    # ZeRO++ (its hpZ group a whole float too) and ZeRO-3's partial optimizer offload
    {"stage": 3, "zero_quantized_weights": True, "zero_hpz_partition_size": 8.0, "zero_quantized_gradients": True,
     "offload_optimizer": {"device": "cpu", "ratio": 0.3}},
    {"stage": 3, "zero_hpz_partition_size": 1, "zero_quantized_weights": False},
]


def _device(offload):
    """DeepSpeed's parsed device (its config keeps enum values as strings), "none" without the section."""
    return "none" if offload is None else str(getattr(offload.device, "value", offload.device))


@pytest.mark.parametrize("section", SECTIONS)
def test_the_section_reads_as_deepspeeds_pydantic_reads_it(section):
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    theirs = DeepSpeedZeroConfig(**section)
    ours = zero_settings({"zero_optimization": section})
    assert ours.stage == int(theirs.stage)
    assert ours.offload == _device(theirs.offload_optimizer)
    assert ours.offload_param == _device(theirs.offload_param)
    # a bucket the user set, as DeepSpeed's integer; unset is None (the planner's own default then)
    if "reduce_bucket_size" in section:
        assert ours.reduce_bucket == theirs.reduce_bucket_size and isinstance(ours.reduce_bucket, int)
    if "stage3_prefetch_bucket_size" in section:
        assert ours.prefetch_bucket == theirs.prefetch_bucket_size
    # ZeRO++'s switches and the share of the optimizer ZeRO-3 offloads, as DeepSpeed's fields hold them
    assert (ours.quantized_weights, ours.hpz, ours.quantized_gradients) == (
        theirs.zero_quantized_weights, theirs.zero_hpz_partition_size, theirs.zero_quantized_gradients)
    if theirs.offload_optimizer is not None:
        assert ours.offload_ratio == theirs.offload_optimizer.ratio


@pytest.mark.parametrize("config", [{"zero_optimization": None}, {"zero_optimization": "3"}, [], None,
                                    {"zero_optimization": {"stage": "3", "offload_param": None}},
                                    {"zero_optimization": {"stage": 7, "offload_optimizer": {"device": "CPU"}}}])
def test_a_malformed_section_reads_as_the_defaults_and_validation_names_it(config):
    settings = zero_settings(config)
    assert (settings.stage, settings.offload, settings.offload_param) == (0, "none", "none")
    if isinstance(config, dict):
        assert [f for f in validate(config, ValidateContext(), deepspeed_check=False) if f.severity == "error"]


@pytest.mark.parametrize("value, deepspeed_takes", [("3", True), (True, True), ("two", False), (4, False),
                                                    (2.5, False)])
def test_a_stage_that_is_not_a_number_0_to_3_is_refused(value, deepspeed_takes):
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    try:
        DeepSpeedZeroConfig(stage=value)
        taken = True
    except Exception:
        taken = False
    assert taken is deepspeed_takes  # what DeepSpeed does with it: the reason for the note, or none
    [finding] = [f for f in check_types({"zero_optimization": {"stage": value}}) if f.path.endswith("stage")]
    assert finding.severity == "error" and "must be one of 0, 1, 2, 3" in finding.message
    assert ("DeepSpeed would read" in finding.message) is deepspeed_takes


@pytest.mark.parametrize("device", ["none", "cpu", "nvme", "CPU", "gpu", "$OFFLOAD_DEVICE", 1])
def test_offload_devices_are_deepspeeds_enum(device):
    from deepspeed.runtime.zero.offload_config import DeepSpeedZeroOffloadOptimizerConfig

    try:
        DeepSpeedZeroOffloadOptimizerConfig(device=device)
        taken = True
    except Exception:
        taken = False
    findings = check_types({"zero_optimization": {"offload_optimizer": {"device": device}}})
    assert (not findings) is taken, findings


def test_whole_float_buckets_pass_and_fractions_fail_as_in_deepspeed():
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    for value in (5e8, 5.5):
        try:
            DeepSpeedZeroConfig(reduce_bucket_size=value)
            taken = True
        except Exception:
            taken = False
        assert (not check_types({"zero_optimization": {"reduce_bucket_size": value}})) is taken


def test_the_planner_reads_a_bucket_written_as_5e8(tmp_path):
    from dsbench.plan.api import build
    from dsbench.plan.request import PlanRequest

    path = tmp_path / "ds.json"
    path.write_text('{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2.0, '
                    '"reduce_bucket_size": 5e8, "offload_optimizer": {"device": "cpu"}}}')
    workload, _, config = build(PlanRequest(model="llama-tiny", gpus=2, config=str(path)))
    assert workload.reduce_bucket == 500_000_000

    from dsbench.plan.config_row import config_candidate

    candidate = config_candidate(config)
    assert (candidate.strategy, candidate.offload) == ("zero2", "cpu")


def test_every_key_deepspeed_deprecates_is_a_warning_saying_what_deepspeed_does_with_it(monkeypatch):
    """The oracle: DeepSpeed's own parser warns of each deprecated key it is given (config_utils'
    ``_process_deprecated_field``), and dsbench warns of the same keys, naming the key that replaces each."""
    from deepspeed.runtime import config_utils
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    from dsbench.configs.schema import load_schema

    deprecated = load_schema().deprecated["zero_optimization"]
    assert {"cpu_offload", "cpu_offload_param"} <= set(deprecated)
    for key, how in deprecated.items():
        said: list[str] = []
        monkeypatch.setattr(config_utils.logger, "warning", lambda message, said=said: said.append(message))
        DeepSpeedZeroConfig(stage=3, **{key: True})
        assert any(f"Config parameter {key} is deprecated" in line for line in said), key
        findings = validate({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3, key: True}},
                            ValidateContext(), deepspeed_check=False)
        ours = [f for f in findings if f.path == f"zero_optimization.{key}"]
        assert [f.code for f in ours] == ["deprecated-key"] and how["new"] in ours[0].fix, findings
