"""ZeRO++'s hpZ against the ranks it partitions over.

hpZ (``zero_hpz_partition_size``) keeps a second copy of the parameters partitioned over groups of that many
consecutive ranks. DeepSpeed builds the groups over the whole world, ``min(size, world)`` ranks each, and asserts
that they tile it (deepspeed 0.19 utils/groups.py ``_create_zero_param_parallel_group``: ``_ensure_divisibility``,
"4 is not divisible by 3"), only when ZeRO-3 starts (runtime/zero/stage3.py, partition_parameters.py for
``zero.Init``); stages 0-2 never read the key (runtime/engine.py builds the group in its stage-3 branch alone).
"""

from __future__ import annotations

from typing import Any

from dsbench.configs.findings import Finding
from dsbench.zero_section import zero_settings

PATH = "zero_optimization.zero_hpz_partition_size"


def check_hpz(config: dict[str, Any], world_size: int | None) -> list[Finding]:
    """An error for ZeRO-3's hpZ groups that do not tile the world."""
    zero = zero_settings(config)
    if zero.hpz <= 1:
        return []
    if zero.stage != 3:  # validate's ZeRO++ check warns that stages 0-2 ignore it
        return []
    if world_size is None or world_size % min(zero.hpz, world_size) == 0:
        return []
    # each group is min(size, world) consecutive ranks (groups._create_zero_param_parallel_group)
    divisors = [n for n in range(2, world_size + 1) if world_size % n == 0]  # the world itself among them
    return [Finding(severity="error", code="hpz-groups", path=PATH,
                    message=f"{zero.hpz} does not divide the {world_size} ranks: DeepSpeed's ZeRO-3 asserts at start "
                            f"('{world_size} is not divisible by {zero.hpz}')",
                    fix="make it a divisor of the world size, usually the GPUs per node "
                        f"({', '.join(map(str, divisors))})")]
