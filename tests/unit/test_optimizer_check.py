"""The optimizer DeepSpeed's engine builds for a config, and the two start-up checks it makes of it
(dsbench/configs/optimizer_check.py), against DeepSpeed's own code as the oracle."""

import types

import pytest

from dsbench.configs.optimizer_check import built_class, check_optimizer
from dsbench.configs.schema import load_schema
from dsbench.configs.validate import ValidateContext, validate


def test_the_schemas_optimizer_lists_are_deepspeeds_and_torchs():
    import torch
    from deepspeed.runtime.config import DEEPSPEED_OPTIMIZERS
    from deepspeed.runtime.zero.utils import ZERO_SUPPORTED_OPTIMIZERS

    known = load_schema().optimizers
    assert known["deepspeed"] == list(DEEPSPEED_OPTIMIZERS)
    assert {c.__name__ for c in ZERO_SUPPORTED_OPTIMIZERS} <= set(known["zero_tested"])
    assert all(issubclass(getattr(torch.optim, name), torch.optim.Optimizer) for name in known["torch"])


def _deepspeeds_class(monkeypatch, kept, params, offload):
    """The class DeepSpeed's own ``_configure_basic_optimizer`` builds, on a stand-in engine, with its op-backed
    classes replaced by empty ones of the same names (so no op is built) and torch's built for real."""
    import deepspeed.ops.adagrad
    import deepspeed.ops.adam
    import deepspeed.ops.lamb
    import deepspeed.ops.lion
    import torch
    from deepspeed.runtime.engine import DeepSpeedEngine

    for module, names in ((deepspeed.ops.adam, ("FusedAdam", "DeepSpeedCPUAdam", "ZenFlowCPUAdam")),
                          (deepspeed.ops.adagrad, ("DeepSpeedCPUAdagrad",)), (deepspeed.ops.lamb, ("FusedLamb",)),
                          (deepspeed.ops.lion, ("FusedLion", "DeepSpeedCPULion"))):
        for name in names:
            monkeypatch.setattr(module, name, type(name, (), {"__init__": lambda self, *a, **k: None}))
    engine = types.SimpleNamespace(optimizer_params=lambda: dict(params), optimizer_name=lambda: kept,
                                   zero_use_cpu_optimizer=lambda: offload, zenflow=False,
                                   bf16_optimizer_states=lambda: False)
    engine.get_optimizer_configuration = types.MethodType(DeepSpeedEngine.get_optimizer_configuration, engine)
    built = DeepSpeedEngine._configure_basic_optimizer(engine, [torch.nn.Parameter(torch.zeros(2))])
    return type(built).__name__


@pytest.mark.parametrize("kept", ["adam", "adamw", "adagrad", "lamb", "lion", "SGD", "RMSprop", "Adafactor"])
@pytest.mark.parametrize("params", [{"lr": 0.01}, {"lr": 0.01, "torch_adam": True},
                                    {"lr": 0.01, "torch_adam": True, "adam_w_mode": False}])
@pytest.mark.parametrize("offload", [False, True])
def test_the_class_named_is_the_class_deepspeed_builds(monkeypatch, kept, params, offload):
    if kept not in ("adam", "adamw"):
        params = {"lr": 0.01}  # torch_adam and adam_w_mode are Adam's alone (others would take them as arguments)
    assert built_class(kept, params, offload) == _deepspeeds_class(monkeypatch, kept, params, offload)


def _errors(config):
    return [f.message for f in check_optimizer(config)]


@pytest.mark.parametrize("config, needles", [
    ({"optimizer": {"type": "Adafactor"}, "zero_optimization": {"stage": 2}}, ["DeepSpeed builds Adafactor"]),
    ({"optimizer": {"type": "Lamb"}, "zero_optimization": {"stage": 1}}, ["DeepSpeed builds FusedLamb"]),
    ({"optimizer": {"type": "SGD"}, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}},
     ["DeepSpeed builds SGD", "the offloaded optimizer steps on the CPU"]),
    ({"optimizer": {"type": "SGD"}, "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False,
      "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}, []),
    ({"optimizer": {"type": "adagrad"}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}},
     ["DeepSpeed builds DeepSpeedCPUAdagrad for 'adagrad' and stops"]),
    ({"optimizer": {"type": "AdamW", "params": {"torch_adam": True}},
      "zero_optimization": {"stage": 2, "cpu_offload": True}}, ["DeepSpeed builds AdamW for 'AdamW' and stops"]),
    ({"optimizer": {"type": "SGD"}, "zero_optimization": {"stage": 0}}, []),  # no ZeRO: any torch.optim class
    ({"optimizer": {"type": "RMSprop"}, "zero_allow_untested_optimizer": True, "zero_optimization": {"stage": 3}}, []),
    ({"optimizer": {"type": "Lion"}, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}, []),
    ({"optimizer": {"type": "AdamW"}, "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}, []),
    ({"zero_optimization": {"stage": 3}}, []),  # the script brings its optimizer
    ({"optimizer": {"type": "OneBitAdam"}, "zero_optimization": {"stage": 2}}, []),  # deepspeed_check's to report
])
def test_what_the_engine_would_stop_at_is_an_error_before_it_starts(config, needles):
    errors = _errors(config)
    assert len(errors) == len(needles) and all(n in e for n, e in zip(needles, errors, strict=True)), errors
    if needles:  # and validation reports it, so that a launch refuses it before any process starts
        found = validate({"train_micro_batch_size_per_gpu": 1, **config}, ValidateContext(), deepspeed_check=False)
        assert {f.message for f in found if f.severity == "error"} >= set(errors)
