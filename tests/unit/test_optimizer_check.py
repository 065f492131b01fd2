"""The optimizer DeepSpeed's engine builds for a config, and the two start-up checks it makes of it
(dsbench/configs/optimizer_check.py), against DeepSpeed's own code as the oracle."""

import inspect
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


def _public_optimizers() -> list[str]:
    import torch

    return sorted(name for name in dir(torch.optim) if isinstance(getattr(torch.optim, name), type)
                  and issubclass(getattr(torch.optim, name), torch.optim.Optimizer) and name != "Optimizer")


@pytest.mark.parametrize("name", [*_public_optimizers(), "adam", "ADAMW", "Lamb", "lion", "Muon", "muadamw", "MuSGD",
                                  "OneBitAdam", "ZeroOneAdam", "OneBitLamb", "adamw_torch", "FusedAdam",
                                  "DeepSpeedCPUAdam", "adam8bit", "sgd", ""])
def test_a_name_the_engine_builds_nothing_for_is_refused_without_deepspeed(name):
    """The oracle: DeepSpeed's engine's own test (``_is_supported_optimizer``) of the name DeepSpeedConfig keeps,
    over every optimizer class torch.optim has and DeepSpeed's own names in other cases; the check reads the
    schema's lists only (a launch imports no DeepSpeed)."""
    from deepspeed.runtime.config import DEEPSPEED_OPTIMIZERS
    from deepspeed.runtime.engine import DeepSpeedEngine

    kept = name.lower() if name.lower() in DEEPSPEED_OPTIMIZERS else name  # DeepSpeedConfig.optimizer_name
    builds = DeepSpeedEngine._is_supported_optimizer(None, kept) if name else False
    refused = [f for f in check_optimizer({"optimizer": {"type": name}, "zero_optimization": {"stage": 0}})
               if "builds no optimizer" in f.message]
    assert (not refused) is builds, refused
    assert all(f.path == "optimizer.type" and f.severity == "error" for f in refused)


def test_a_refused_name_suggests_the_closest_one_built():
    [finding] = check_optimizer({"optimizer": {"type": "adamw_torch"}})
    assert finding.fix.startswith("did you mean 'adamw'?"), finding.fix
    [finding] = check_optimizer({"optimizer": {"type": "sgd"}})  # torch's class is SGD; DeepSpeed keeps "sgd"
    assert finding.fix.startswith("did you mean 'SGD'?"), finding.fix
    [finding] = check_optimizer({"optimizer": {"type": "adafactor"}})
    assert finding.fix.startswith("did you mean 'Adafactor'?"), finding.fix
    [finding] = check_optimizer({"optimizer": {"type": "OneBitAdam"}})
    assert "did you mean" not in finding.fix  # nothing close (not NAdam): the plain advice


def _standin(real):
    """A class of ``real``'s name whose constructor takes exactly ``real``'s arguments (binding them to its
    signature, so a wrong one is the same TypeError) and builds no op."""
    signature = inspect.signature(real.__init__)

    def init(self, *args, **kwargs):
        signature.bind(self, *args, **kwargs)

    return type(real.__name__, (), {"__init__": init})


def _deepspeeds_class(monkeypatch, kept, params, offload):
    """The class DeepSpeed's own ``_configure_basic_optimizer`` builds, on a stand-in engine, with its op-backed
    classes replaced by stand-ins of the same names and signatures (so no op is built) and torch's built for real."""
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
            monkeypatch.setattr(module, name, _standin(getattr(module, name)))
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
    # removed from DeepSpeed 0.19.8: refused from the schema's lists, without DeepSpeed's code, so a launch refuses
    # it before any rank starts (until 2026-12-04 the ranks did, each after importing DeepSpeed)
    ({"optimizer": {"type": "OneBitAdam"}, "zero_optimization": {"stage": 2}}, ["builds no optimizer 'OneBitAdam'"]),
])
def test_what_the_engine_would_stop_at_is_an_error_before_it_starts(config, needles):
    errors = _errors(config)
    assert len(errors) == len(needles) and all(n in e for n, e in zip(needles, errors, strict=True)), errors
    if needles:  # and validation reports it, so that a launch refuses it before any process starts
        found = validate({"train_micro_batch_size_per_gpu": 1, **config}, ValidateContext(), deepspeed_check=False)
        assert {f.message for f in found if f.severity == "error"} >= set(errors)


@pytest.mark.parametrize("kept, params, offload", [
    ("adamw", {"lr": 0.01, "beta": [0.9, 0.99]}, False),
    ("adamw", {"lr": 0.01, "betas": [0.9, 0.99], "eps": 1e-8, "bias_correction": True}, False),
    ("adamw", {"lr": 0.01, "fused": True}, False),
    ("adamw", {"lr": 0.01, "fused": True, "torch_adam": True}, False),
    ("adamw", {"lr": 0.01, "foreach": True, "torch_adam": True}, True),
    ("adam", {"lr": 0.01, "adamw_mode": False}, True),
    ("adam", {"lr": 0.01, "adamw_mode": False}, False),
    ("adam", {"lr": 0.01, "adam_w_mode": False, "fp32_optimizer_states": True}, True),
    ("adamw", {"lr": 0.01, "max_grad_norm": 1.0}, False),
    ("lamb", {"lr": 0.01, "max_grad_norm": 1.0}, False),
    ("lamb", {"lr": 0.01, "max_coeff": 10.0, "min_coeff": 0.01}, False),
    ("lion", {"lr": 0.01, "eps": 1e-8}, True),
    ("adagrad", {"lr": 0.01, "lr_decay": 0.1}, True),
    ("adagrad", {"lr": 0.01, "lr_decay": 0.1}, False),
    ("SGD", {"lr": 0.01, "momentum": 0.9, "nesterov": True}, False),
    ("SGD", {"lr": 0.01, "betas": [0.9, 0.99]}, False),
    ("RMSprop", {"lr": 0.01, "alpha": 0.9, "centred": True}, False),
])
def test_params_the_engine_would_stop_at_are_the_ones_deepspeeds_own_dispatch_stops_at(monkeypatch, kept, params,
                                                                                        offload):
    """The oracle: DeepSpeed's ``_configure_basic_optimizer`` with each class's real signature: it raises (its
    ValueError for max_grad_norm, the class's TypeError for an argument it does not take or gets twice) exactly where
    dsbench reports an ``optimizer.params`` error."""
    try:
        _deepspeeds_class(monkeypatch, kept, params, offload)
        stops = False
    except (TypeError, ValueError):
        stops = True
    config = {"optimizer": {"type": kept, "params": params}, "zero_allow_untested_optimizer": True,
              "zero_force_ds_cpu_optimizer": False,
              "zero_optimization": {"stage": 2, **({"offload_optimizer": {"device": "cpu"}} if offload else {})}}
    said = [f for f in check_optimizer(config) if f.path.startswith("optimizer.params")]
    assert bool(said) is stops, said


@pytest.mark.parametrize("scheduler", [
    {"type": "WarmupLR", "params": {"warmup_num_steps": 10, "warmup_max_lr": 0.01}},
    {"type": "WarmupLR", "params": {"warmup_steps": 10}},
    {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 10}},
    {"type": "WarmupDecayLR", "params": {"total_num_steps": 100, "warmup_num_steps": 10}},
    {"type": "WarmupCosineLR", "params": {"total_num_steps": 100, "cos_min_ratio": 0.1}},
    {"type": "WarmupCosine", "params": {"total_num_steps": 100}},
    {"type": "OneCycle", "params": {"cycle_min_lr": 1e-4, "cycle_max_lr": 1e-2}},
    {"type": "OneCycle", "params": {"cycle_max_lr": 1e-2}},
    {"type": "CosineAnnealingLR", "params": {"T_max": 10}},
    {"type": "CosineAnnealingLR", "params": {}},
    {"type": "StepLR", "params": {"step_size": 5, "gamma": 0.5}},
    {"type": "LambdaLR", "params": {"lr_lambda": "lambda step: 1.0"}},
    {"type": "SequentialLR", "params": {"milestones": [5]}},
    {"type": "ChainedScheduler", "params": {}},
    {"type": "ReduceLROnPlateau", "params": {"patience": 2}},
    {"type": "LinearLR", "params": {"start_factor": 0.5, "total_iters": 4}},
])
def test_a_scheduler_the_engine_would_stop_at_is_the_one_deepspeeds_own_code_stops_at(scheduler):
    """The oracle: DeepSpeed's ``_scheduler_from_config`` on a real optimizer, then one ``step()`` as the engine
    calls it after an optimizer step: it raises exactly where dsbench reports an error."""
    import torch
    from deepspeed.runtime.engine import DeepSpeedEngine

    from dsbench.configs.scheduler_check import check_scheduler

    engine = types.SimpleNamespace(scheduler_name=lambda: scheduler["type"],
                                   scheduler_params=lambda: dict(scheduler["params"]))
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.01)
    try:
        built = DeepSpeedEngine._scheduler_from_config(engine, optimizer)
        optimizer.step()  # the engine's order: the optimizer's step, then the scheduler's
        built.step()
        stops = False
    except (AssertionError, TypeError, ValueError, KeyError):
        stops = True
    said = check_scheduler({"scheduler": scheduler})
    assert bool(said) is stops, said


@pytest.mark.parametrize("key", ["zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer"])
def test_the_switches_are_read_as_deepspeed_tests_them_and_typed_by_validation(key):
    """DeepSpeed tests both by truth (engine.py: ``assert self.zero_allow_untested_optimizer()``, ``if
    self.zero_force_ds_cpu_optimizer()``), so "yes" would count as true: validation names the type, and the
    optimizer check does not add a second error for a switch meant as true."""
    config = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
              "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
              "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False, key: "yes"}
    errors = [f for f in validate(config, ValidateContext(), deepspeed_check=False) if f.severity == "error"]
    expected = [key] + (["optimizer.type"] if key == "zero_force_ds_cpu_optimizer" else [])  # "yes": still forced
    assert sorted(f.path for f in errors) == sorted(expected), errors


@pytest.mark.parametrize("fp16", [None, {"enabled": True}, {"enabled": True, "loss_scale": 128},
                                  {"enabled": False, "loss_scale": 512}, {"enabled": True, "loss_scale": 0},
                                  {"enabled": True, "loss_scale": 0.5}, {"enabled": "auto", "loss_scale": 65536}])
@pytest.mark.parametrize("optimizer", ["Lamb", "AdamW"])
def test_lamb_is_refused_exactly_where_deepspeeds_engine_finds_no_dynamic_loss_scale(fp16, optimizer):
    """Oracle: DeepSpeed's own reading, ``get_float16_config(config).loss_scale == 0`` (engine.dynamic_loss_scale),
    which ``_do_sanity_check`` asserts for Lamb."""
    from deepspeed.runtime.precision_config import get_float16_config

    config = {"train_micro_batch_size_per_gpu": 1, "optimizer": {"type": optimizer, "params": {"lr": 1e-3}},
              **({"fp16": fp16} if fp16 is not None else {})}
    refused = [f for f in check_optimizer(config) if f.path == "fp16.loss_scale"]
    assert bool(refused) is (optimizer == "Lamb" and get_float16_config(config).loss_scale != 0)
