"""The parallel layout a DeepSpeed config asks for: its pipeline stages, AutoTP and Ulysses degrees, and the dims
they make on a world size. One place, read by validation, DeepSpeed's own check, explain, launch and the worker."""

from __future__ import annotations

import re
from typing import Any

from dsbench.configs.overrides import get_path
from dsbench.errors import UserError
from dsbench.parallel import ParallelDims


def int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parallel_degrees(config: dict[str, Any]) -> tuple[int, int]:
    """Pipeline stages and tensor-parallel degree the config asks for (1 when absent or "auto")."""
    pp = int_or_none(get_path(config, "pipeline.stages")) or 1
    tp = int_or_none(get_path(config, "tensor_parallel.autotp_size")) or 1
    return pp, tp


def ulysses_degree(config: dict[str, Any]) -> int:
    """The Ulysses sequence-parallel degree the config asks for (``sequence_parallel_size``; 1 when absent)."""
    return int_or_none(config.get("sequence_parallel_size")) or 1


DEGREE_KEYS = {"--pipeline-stages": "pipeline.stages", "--tp": "tensor_parallel.autotp_size",
               "--ulysses": "sequence_parallel_size"}
"""The launch flag of each degree, and the config key that holds it."""


def in_config_keys(message: str, keys: dict[str, str] | None = None) -> str:
    """A layout message that names degree flags, naming the config's keys instead (``keys``: flag -> what to
    name; :data:`DEGREE_KEYS` by default)."""
    for flag, key in (DEGREE_KEYS if keys is None else keys).items():
        message = re.sub(rf"{re.escape(flag)}(?![\w-])", key, message)
    return message


def layout_of(config: dict[str, Any], world_size: int) -> ParallelDims | str:
    """The config's dims on ``world_size`` ranks, or why there are none (:class:`ParallelDims`' own words, in the
    config's keys)."""
    pp, tp = parallel_degrees(config)
    try:
        return ParallelDims(world=world_size, tp=tp, pp=pp, sp=ulysses_degree(config))
    except UserError as error:
        return in_config_keys(str(error))


def layout_problem(config: dict[str, Any], world_size: int) -> str | None:
    """Why the config's degrees cannot lay out ``world_size`` ranks, or None."""
    found = layout_of(config, world_size)
    return found if isinstance(found, str) else None


def config_dims(config: dict[str, Any], world_size: int) -> ParallelDims | None:
    """The parallel layout a config asks for on ``world_size`` ranks (``None`` if the degrees do not divide it)."""
    found = layout_of(config, world_size)
    return None if isinstance(found, str) else found


def data_parallel_size(config: dict[str, Any], world_size: int) -> int | None:
    """The rank count DeepSpeed's batch assertion uses (:meth:`ParallelDims.deepspeed_batch_ranks`), or ``None``."""
    dims = config_dims(config, world_size)
    return None if dims is None else dims.deepspeed_batch_ranks()


