"""What ZeRO's gradient reduction refuses (dsbench/configs/reduction_check.py). The oracle: DeepSpeed's own
assertions, read from its source for the pinned version, and a launch (ZeRO-2 with prescale_gradients and a
factor of 2 stopped at start-up on 2 CPU ranks; with reduce_scatter false it trained, 2026-11-30)."""

import inspect

import pytest

from dsbench.configs.reduction_check import check_reduction
from dsbench.configs.validate import ValidateContext, validate


def test_deepspeed_still_asserts_what_the_check_names():
    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    two = inspect.getsource(DeepSpeedZeroOptimizer.__init__)
    three = inspect.getsource(DeepSpeedZeroOptimizer_Stage3.__init__)
    assert "if self.reduce_scatter and self.partition_gradients:" in two
    for source in (two, three):
        assert "assert self.gradient_predivide_factor == 1.0" in source
        assert "assert self.postscale_gradients" in source


@pytest.mark.parametrize("config, paths", [
    ({"zero_optimization": {"stage": 2}, "prescale_gradients": True, "gradient_predivide_factor": 2.0},
     ["gradient_predivide_factor", "prescale_gradients"]),
    ({"zero_optimization": {"stage": 3}, "gradient_predivide_factor": 4}, ["gradient_predivide_factor"]),
    ({"zero_optimization": {"stage": 3}, "prescale_gradients": True}, ["prescale_gradients"]),
    ({"zero_optimization": {"stage": 2, "reduce_scatter": False}, "prescale_gradients": True,
      "gradient_predivide_factor": 2.0}, []),  # all-reduce instead: trains
    ({"zero_optimization": {"stage": 1}, "prescale_gradients": True, "gradient_predivide_factor": 2.0}, []),
    ({"zero_optimization": {"stage": 2}, "gradient_predivide_factor": 1.0, "prescale_gradients": False}, []),
])
def test_a_reduction_zero_refuses_is_an_error_naming_its_key(config, paths):
    assert [f.path for f in check_reduction(config)] == paths
    found = validate({"train_micro_batch_size_per_gpu": 1, **config}, ValidateContext(), deepspeed_check=False)
    assert {f.path for f in found if f.severity == "error"} == set(paths)


@pytest.mark.parametrize("factor, said", [("2", "must be a number"), (0, "must be > 0"), (-1, "must be > 0")])
def test_a_factor_that_is_not_a_positive_number_is_named(factor, said):
    """DeepSpeed divides the gradients by it; "2" would pass its `!= 1.0` test and fail later, 0 divide by zero."""
    found = validate({"train_micro_batch_size_per_gpu": 1, "gradient_predivide_factor": factor},
                     ValidateContext(), deepspeed_check=False)
    assert [f.path for f in found if f.severity == "error" and said in f.message] == ["gradient_predivide_factor"]
