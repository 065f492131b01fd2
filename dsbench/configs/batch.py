"""A DeepSpeed config's batch on a world size, derived as DeepSpeed derives it: the one reader of its three keys.

``DeepSpeedConfig._set_batch_related_parameters`` (deepspeed/runtime/config.py) fills whichever of
``train_batch_size``, ``train_micro_batch_size_per_gpu`` and ``gradient_accumulation_steps`` is missing from the
others with integer division, over the ranks its assertion counts (:meth:`ParallelDims.deepspeed_batch_ranks`), and
then asserts train = micro x accumulation x ranks (validation reports a config where that fails). So a config of
train 64 and micro 2 on 8 ranks trains 4 accumulation steps; one of train 64 alone, a micro-batch of 8.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsbench.configs.layout import data_parallel_size, int_or_none, parallel_degrees
from dsbench.configs.overrides import get_path
from dsbench.errors import UserError
from dsbench.parallel import ParallelDims
from dsbench.zero_section import zero_settings

BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


@dataclass(frozen=True, slots=True)
class Batch:
    """The three values as DeepSpeed runs them."""

    train: int
    micro: int
    accum: int


def derive_batch(tb: int | None, mb: int | None, ga: int | None, dp: int) -> Batch:
    """Fill the missing values exactly as DeepSpeed does (integer division); one of ``tb`` and ``mb`` is set."""
    if tb is not None and mb is not None and ga is not None:
        return Batch(tb, mb, ga)
    if tb is not None and mb is not None:
        return Batch(tb, mb, tb // mb // dp)
    if tb is not None and ga is not None:
        return Batch(tb, tb // dp // ga, ga)
    if mb is not None and ga is not None:
        return Batch(mb * ga * dp, mb, ga)
    if tb is not None:
        return Batch(tb, tb // dp, 1)
    assert mb is not None
    return Batch(mb * dp, mb, 1)


def config_batch(config: dict[str, Any], world_size: int, dims: ParallelDims | None = None) -> Batch | None:
    """The config's batch on ``world_size`` ranks (``dims``: its layout there, where the caller has worked it out);
    None where it has no definite one (a value "auto" or of another type, neither train nor micro set, degrees that
    do not lay out the world: validation names each)."""
    values = [get_path(config, key) for key in BATCH_KEYS]
    tb, mb, ga = (int_or_none(value) for value in values)
    dp = dims.deepspeed_batch_ranks() if dims is not None else data_parallel_size(config, world_size)
    if dp is None or (tb is None and mb is None) or any(
            value is not None and known is None for value, known in zip(values, (tb, mb, ga), strict=True)):
        return None
    return derive_batch(tb, mb, ga, dp)


def checked_twice(config: dict[str, Any]) -> bool:
    """Whether DeepSpeed 0.19.8 checks this config's ``train_batch_size`` against two rank counts that differ, so
    that no value passes both: AutoTP (``tensor_parallel.autotp_size`` > 1) with ZeRO-3.

    ``deepspeed.initialize`` builds its ``DeepSpeedConfig`` without an mpu and counts every rank (AutoTP's ranks too:
    :meth:`ParallelDims.deepspeed_batch_ranks`); then ZeRO-3 partitions the parameters through ``zero.Init``
    (runtime/zero/parameter_offload.py ``_convert_to_zero_parameters``), which builds a second ``DeepSpeedConfig``
    with the engine's mpu, the TP groups AutoTP has just made, and counts the data-parallel ranks only,
    world / autotp_size (runtime/config.py ``_batch_assertion``; seen on 2 ranks: "4 != 2 * 1 * 1"). Without
    ``train_batch_size`` each derives its own from the micro-batch and the accumulation, and both pass."""
    return parallel_degrees(config)[1] > 1 and zero_settings(config).stage == 3


def for_deepspeed(config: dict[str, Any]) -> dict[str, Any]:
    """The config as ``deepspeed.initialize`` can start it: without ``train_batch_size`` where DeepSpeed checks it
    twice (:func:`checked_twice`) and the micro-batch is given, so DeepSpeed derives it (the same samples: the
    micro-batch and the accumulation say how many each rank trains); unchanged otherwise."""
    if checked_twice(config) and "train_batch_size" in config and "train_micro_batch_size_per_gpu" in config:
        return {key: value for key, value in config.items() if key != "train_batch_size"}
    return config


def for_any_world(config: dict[str, Any], given: frozenset[str], sets: tuple[str, ...]) -> tuple[dict[str, Any], str]:
    """A config rendered with no world size (no ``--world-size`` or hostfile), with the batch keys that hold on any
    number of ranks, and the note that says which DeepSpeed derives at launch. DeepSpeed fills the missing key from
    the other two over the ranks it counts (see this module's docstring), so the three keys together hold on one rank
    count only: ``train_batch_size`` 2 with a micro-batch of 2 fails DeepSpeed's assertion on 8 ranks (2 != 2 x 1 x 8).
    The key left out is the one the user did not ask for: the accumulation when a global batch was given, else the
    global batch. Both given: they are kept, and they hold on ``train / (micro x accum)`` data-parallel ranks.
    ``given``: the render's flags the user set (RenderSpec.explicit); ``sets``: its ``--set`` items."""
    written = {item.partition("=")[0].strip() for item in sets}
    train, micro, accum = (config.get(key) for key in BATCH_KEYS)
    # a --set of null leaves the key to DeepSpeed (get_scalar_param reads null as absent)
    global_given = "global_batch" in given or ("train_batch_size" in written and train is not None)
    accum_given = "grad_accum" in given or ("gradient_accumulation_steps" in written and accum is not None)
    if global_given and not accum_given and isinstance(train, int) and isinstance(micro, int) and train % micro:
        raise UserError(f"train_batch_size {train} is not a multiple of micro-batch {micro}, so no number of ranks "
                        "runs it (DeepSpeed derives accumulation = train / (micro x ranks) and asserts it whole)")
    if global_given and accum_given:
        whole = all(isinstance(value, int) and value >= 1 for value in (train, micro, accum))
        if not whole or train % (micro * accum):
            raise UserError(f"train_batch_size {train} is not micro-batch {micro} x accumulation {accum} x a number "
                            "of ranks: change one, or leave the accumulation out for DeepSpeed to derive")
        return config, (f"no --world-size or --hostfile: train_batch_size {train}, micro-batch {micro} and "
                        f"accumulation {accum} hold on {train // (micro * accum)} data-parallel rank(s) only "
                        "(DeepSpeed asserts train = micro x accumulation x ranks at launch)")
    dropped = "gradient_accumulation_steps" if global_given else "train_batch_size"
    how = ("train_batch_size / (micro-batch x data-parallel ranks)" if global_given else
           "micro-batch x gradient_accumulation_steps x data-parallel ranks")
    return ({key: value for key, value in config.items() if key != dropped},
            f"no --world-size or --hostfile: {dropped} left out, so that the config runs on any number of ranks; "
            f"DeepSpeed derives it at launch as {how} (pass --world-size N or --hostfile to write it)")
