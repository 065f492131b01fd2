"""ZeRO++'s hpZ group size against the world: dsbench refuses exactly what DeepSpeed's ZeRO-3 asserts on.

Oracle: DeepSpeed's own group arithmetic (utils/groups.py ``_create_zero_param_parallel_group``: groups of
``min(size, world)`` ranks, checked by ``_ensure_divisibility``), called for every pair.
"""

from __future__ import annotations

import pytest

from dsbench.configs.validate import ValidateContext, validate
from dsbench.configs.zeropp_check import check_hpz


def _config(stage: int, hpz: int) -> dict:
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
            "zero_optimization": {"stage": stage, "zero_hpz_partition_size": hpz}}


def _deepspeed_refuses(world: int, hpz: int) -> bool:
    from deepspeed.utils.groups import _ensure_divisibility

    try:
        _ensure_divisibility(world, min(hpz, world))
    except AssertionError:
        return True
    return False


@pytest.mark.parametrize("world", range(1, 17))
def test_hpz_is_refused_exactly_where_deepspeed_asserts(world):
    for hpz in range(1, 20):
        findings = check_hpz(_config(3, hpz), world)
        assert bool(findings) is _deepspeed_refuses(world, hpz), (world, hpz)
        for finding in findings:
            assert finding.severity == "error" and f"'{world} is not divisible by {hpz}'" in finding.message
            offered = [int(n) for n in finding.fix.split("(")[1].rstrip(")").split(", ")]
            assert offered and all(not _deepspeed_refuses(world, n) for n in offered)


def test_only_zero3_and_a_known_world_are_checked():
    assert check_hpz(_config(2, 3), 4) == []  # stages 0-2 never build the groups (validate's ZeRO++ check warns)
    assert check_hpz(_config(3, 3), None) == []
    paths = [f.path for f in validate(_config(3, 3), ValidateContext(world_size=4), deepspeed_check=False)
             if f.severity == "error"]
    assert paths == ["zero_optimization.zero_hpz_partition_size"]


@pytest.mark.parametrize("value", ["3", True, 2.5, -1])
def test_a_group_size_that_is_no_whole_number_is_refused_by_name(value):
    """``"3"`` would be read as 3 by DeepSpeed's pydantic and then assert on 4 ranks; a group size is a JSON whole
    number, as the parallel degrees are (configs/types.py)."""
    findings = validate(_config(3, value), ValidateContext(world_size=4), deepspeed_check=False)
    assert [f.path for f in findings if f.severity == "error"] == ["zero_optimization.zero_hpz_partition_size"]
