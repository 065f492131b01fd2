"""Which compare strategy runs a planner candidate or a launched run: the inverse of
:attr:`Strategy.planner_fields` and of what a run's header records, derived from the registry's definitions
(dsbench/strategies.py). It holds no table of names: a run that no registered strategy matches is named by its
ZeRO stage or its engine."""

from __future__ import annotations

import difflib
import re
from typing import Any

from dsbench.strategies import (
    FAMILIES,
    FIXED,
    LISTED,
    PLANNER,
    THREE_D_SHARDING,
    Strategy,
    get,
    lookup,
    three_d,
    with_options,
)


def _planner_fields(strategy: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` over a plain strategy's :attr:`Strategy.planner_fields`: one source of names and defaults."""
    defaults = Strategy("", "ddp", "torchrun").planner_fields
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise TypeError(f"not planner fields: {', '.join(unknown)}")
    return {**defaults, **options, "strategy": strategy}


def name_for(strategy: str, **options: Any) -> str | None:
    """The compare name of a planner candidate (the inverse of :attr:`Strategy.planner_fields`; ``options`` are its
    other fields); ``None`` when no compare strategy runs it. DDP on one rank is ``ddp`` here (compare's ``single``
    is its 1-rank baseline)."""
    fields = _planner_fields(strategy, options)
    tp, pp, virtual_stages, zero_bubble = fields["tp"], fields["pp"], fields["virtual_stages"], fields["zero_bubble"]
    for how in FIXED.values():
        if how.name != "single" and how.reshard and how.planner_fields == fields:
            return how.name
    if fields["engine"] == "torch" and tp > 1 and pp > 1:  # DTensor TP inside torch's pipeline stages: torch_3d
        shard = fields["dp_shard"] if strategy == "fsdp_hybrid" else {
            name: dp_shard for dp_shard, name in THREE_D_SHARDING.items()}.get(strategy, -1)
        how = three_d(tp, pp, shard, virtual_stages, zero_bubble)
        return how.name if how.dp_shard >= 0 and how.planner_fields == fields else None
    for family, (degree_of, _) in FAMILIES.items():
        degree = fields[degree_of]
        suffixes = {k: fields[k] for k in {"torch_pipe": ("virtual_stages", "zero_bubble"),
                                            "torch_tp": ("sequence_parallel", "loss_parallel")}.get(family, ())}
        how = lookup(with_options(f"{family}{degree}", **suffixes)) if degree > 1 else None
        if how and how.planner_fields == fields:
            return how.name
    return None


def for_candidate(strategy: str, **options: Any) -> Strategy:
    """The strategy that runs a planner candidate: compare's where it has one, else one named by its parts
    (``fsdp_hybrid``) with the same fields, so that its launch flags are derived alike."""
    name = name_for(strategy, **options)
    if name is not None:
        return get(name)
    f = _planner_fields(strategy, options)
    offload, tp, pp = f["offload"], f["tp"], f["pp"]
    offloads = ([f"offload-{offload}" + ("+params" if f["offload_param"] != "none" else "")] if offload != "none"
                else [f"offload-params-{f['offload_param']}"] if f["offload_param"] != "none" else [])
    label = " + ".join([strategy, *offloads, *(f"{d}{f[d]}" for d in ("tp", "pp", "ulysses") if f[d] > 1)])
    if f["engine"] == "torch":
        engine_name = "torch_3d" if tp > 1 and pp > 1 else "torch_tp" if tp > 1 else "torch_pp"
        return Strategy(label, engine_name, "torchrun", tp=tp, pp=pp, sequence_parallel=f["sequence_parallel"],
                        loss_parallel=f["loss_parallel"], dp_shard=f["dp_shard"] if engine_name == "torch_3d" else 0,
                        planned=True)
    zero = PLANNER[strategy].zero
    if zero is None:  # DDP and FSDP (hybrid sharding included) under torchrun
        return Strategy(label, "fsdp" if strategy.startswith("fsdp") else "ddp", "torchrun", tp=tp, pp=pp,
                        dp_shard=f["dp_shard"])
    return Strategy(label, "deepspeed", "deepspeed", zero=zero, offload=offload, offload_param=f["offload_param"],
                    tp=tp, pp=pp, ulysses=f["ulysses"])


def name_of_run(engine: str, zero: int | None = None, offload: str = "none", offload_param: str = "none",
                tp: int = 1, pp: int = 1, reshard: bool = True, sequence_parallel: bool = False,
                loss_parallel: bool = False, virtual_stages: int = 1, zero_bubble: bool = False,
                ulysses: int = 1, dp_shard: int = 0) -> str:
    """The compare name of a run launched by hand, from what its header records. Where no compare strategy matches
    exactly: a DeepSpeed run by its stage and offload (``zero3_offload`` for ZeRO-3 with the optimizer alone on the
    CPU), any other by its engine."""
    if ulysses > 1 and engine == "deepspeed":
        return f"ulysses{ulysses}" if zero == 1 else f"zero{zero}_ulysses{ulysses}"
    if engine == "torch_3d":
        return three_d(tp, pp, dp_shard, virtual_stages, zero_bubble).name
    if engine == "fsdp" and dp_shard:  # HSDP
        return f"fsdp_shard{dp_shard}"
    fields = (engine, zero, offload, offload_param, tp, pp, reshard)
    for s in FIXED.values():
        if (s.engine, s.zero, s.offload, s.offload_param, s.tp, s.pp, s.reshard) == fields:
            return s.name
    for family, (degree_of, template) in FAMILIES.items():
        degree = tp if degree_of == "tp" else pp if degree_of == "pp" else 1
        if degree > 1 and tp * pp == degree and (template.engine, template.zero) == (engine, zero):
            return with_options(f"{family}{degree}", sequence_parallel, loss_parallel, virtual_stages, zero_bubble)
    if engine == "deepspeed" and zero is not None:  # parameters offloaded apart from the optimizer: said apart
        params = f"_params_{offload_param}" if offload_param not in ("none", offload) else ""
        return f"zero{zero}" + {"none": "", "cpu": "_offload"}.get(offload, f"_{offload}") + params
    return engine


def did_you_mean(name: str) -> str:
    """A hint for a strategy name the registry does not know, to follow it in an error: the name in lower case, a
    family's degree below 2 (a degree splits over at least 2 ranks), else the closest listed name; '' for none."""
    if (lowered := name.strip().lower()) != name and lookup(lowered) is not None:
        return f" (did you mean {lowered!r}?)"
    # a degree of 1-4 digits, as the registry's names have (a longer one is no degree: int() refuses 4,300 digits)
    family = re.fullmatch(f"({'|'.join(FAMILIES)}|torch_3d_tp[0-9]{{1,4}}_pp)([0-9]{{1,4}})(.*)", name)
    if family is not None and int(family[2]) < 2:
        return f" ({family[1]}{family[2]}: a degree is at least 2, as in {family[1]}2{family[3]})"
    if family is not None and family[2].startswith("0"):
        return f" (did you mean {family[1] + str(int(family[2])) + family[3]!r}?)"
    close = difflib.get_close_matches(name, [*FIXED, *LISTED], n=1, cutoff=0.6)
    # another number is another stage or degree, not a typo of it (zero9 is no zero0)
    digits_only = bool(close) and re.sub("[0-9]", "#", close[0]) == re.sub("[0-9]", "#", name)
    return f" (did you mean {close[0]!r}?)" if close and not digits_only else ""

