"""The gradient-accumulation dtype beside the model's: dsbench refuses exactly the mixes DeepSpeed's engine stops at.

Oracle: DeepSpeed's own ``DeepSpeedEngine._do_optimizer_sanity_check`` (deepspeed 0.19.8 runtime/engine.py), run on
an engine holding only the parsed ``DeepSpeedConfig`` for every stage, precision, accumulation dtype and
``compute_grad_norm`` setting; a config its parser refuses first is left to configs/deepspeed_check.py.
"""

from __future__ import annotations

import itertools

import pytest

from dsbench.configs.dtype_check import check_grad_accum_dtype

PRECISIONS = {"fp32": {}, "bf16": {"bf16": {"enabled": True}}, "fp16": {"fp16": {"enabled": True}}}


def _engine_refuses(config: dict, monkeypatch) -> bool | None:
    """Whether DeepSpeed's engine stops when it wraps an optimizer under ``config`` (None: its parser refuses it)."""
    import torch
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.engine import DeepSpeedEngine
    from deepspeed.runtime.zero import utils

    monkeypatch.setattr(utils.dist, "get_rank", lambda *a, **k: 0)  # it logs a warning from rank 0 only
    try:
        parsed = DeepSpeedConfig(config)
    except Exception:  # noqa: BLE001 (pydantic's, or DeepSpeed's own assertion: the parser's refusal)
        return None
    engine = DeepSpeedEngine.__new__(DeepSpeedEngine)  # no __init__: only what the check reads
    for name, value in {"_config": parsed, "pipeline_parallelism": False, "global_rank": 0}.items():
        object.__setattr__(engine, name, value)
    try:
        engine._do_optimizer_sanity_check(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))]))
    except (NotImplementedError, ValueError):
        return True
    return False


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_every_mix_is_refused_exactly_where_deepspeeds_engine_stops(stage, monkeypatch):
    checked = 0
    for (precision, section), accum, grad_norm, offload in itertools.product(
            PRECISIONS.items(), (None, "fp32", "bf16", "fp16", "float", "bfloat16"), (None, False), (None, "cpu")):
        zero = {"stage": stage, **({"compute_grad_norm": grad_norm} if grad_norm is not None else {}),
                **({"offload_optimizer": {"device": offload}} if offload else {})}
        config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, **section,
                  "zero_optimization": zero, **({"data_types": {"grad_accum_dtype": accum}} if accum else {})}
        oracle = _engine_refuses(config, monkeypatch)
        if oracle is None:
            continue
        assert bool(check_grad_accum_dtype(config)) is oracle, (precision, accum, zero)
        checked += 1
    assert checked >= 36  # the parser refuses compute_grad_norm false outside stages 1-2, offload at stage 0


def test_a_precision_left_auto_is_not_judged():
    config = {"bf16": {"enabled": "auto"}, "data_types": {"grad_accum_dtype": "fp32"}, "zero_optimization": {}}
    assert check_grad_accum_dtype(config) == []


def test_the_dtype_spellings_are_deepspeeds_and_any_other_is_refused():
    """Oracle: DeepSpeed's DtypeEnum, which the engine calls on the value (a ValueError for any other spelling)."""
    from deepspeed.runtime.config import DtypeEnum

    from dsbench.configs.precision import DTYPES
    from dsbench.configs.types import check_types

    spelled = {key: DtypeEnum(key).name for key in DtypeEnum._value2member_map_ if isinstance(key, str)}
    assert DTYPES == spelled
    for value in ("BF16", "fp64", 3, ["bf16"], True):
        with pytest.raises(ValueError):
            DtypeEnum(value)
        assert [f.path for f in check_types({"data_types": {"grad_accum_dtype": value}})] == [
            "data_types.grad_accum_dtype"], value


@pytest.mark.parametrize("precision", list(PRECISIONS))
def test_a_param_dtype_is_refused_exactly_where_deepspeeds_engine_asserts(precision):
    """``data_types.param_dtype`` against the fp16/bf16 flags. Oracle: DeepSpeed's own
    ``DeepSpeedEngine._assert_valid_mixed_precision_config`` on the parsed config (an AssertionError on every rank
    at start-up, which validate said nothing of until 2026-12-04)."""
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.engine import DeepSpeedEngine

    from dsbench.configs.dtype_check import check_param_dtype

    for param in ("fp32", "float32", "bf16", "bfloat16", "fp16", "half"):
        config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, **PRECISIONS[precision],
                  "data_types": {"param_dtype": param}}
        engine = DeepSpeedEngine.__new__(DeepSpeedEngine)  # no __init__: only what the check reads
        object.__setattr__(engine, "_config", DeepSpeedConfig(config))
        try:
            engine._assert_valid_mixed_precision_config()
            stops = False
        except AssertionError:
            stops = True
        findings = check_param_dtype(config)
        assert bool(findings) is stops, (precision, param)
        assert all(f.path == "data_types.param_dtype" and f.severity == "error" for f in findings)
