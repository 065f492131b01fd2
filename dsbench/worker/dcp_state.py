"""What a torch.distributed.checkpoint (DCP) checkpoint of a torch engine holds, and how a rank fills it back: the
model's and the optimizer's states under the model's own (Hugging Face) parameter names, whatever the engine.

DDP, FSDP2, DTensor TP and one process hold the whole model under its names, so torch's ``get_state_dict`` names
their states. A pipeline rank (torch_pp, torch_3d) holds only its stages, wrapped in modules of its own
(``layers.N.block...``, an interleaved rank's chunks in a list): :class:`StageNames` maps each of its tensors back
to the model's names, so every rank writes its own part of one model's state, any layout (and any torch engine) can
resume it, and ``dsbench export`` reads it as it reads the others. Tensors held by several ranks (a tied embedding
on the first and last stage, a data-parallel replica) are written once: DCP keeps one copy of each key
(``dedup_save_plans``).

The optimizer's state is flat, one key per parameter (``state.<name>.exp_avg``, ``param_groups.<name>.lr``;
torch's ``flatten_optimizer_state_dict``, as torchtitan saves pipeline stages): a nested state lists each group's
parameter names in one object (``optim.param_groups.0.params``), which DCP keeps from one rank only, so it would name
only that rank's stage. Checkpoints written before 2026-12-01 hold the nested form (:func:`is_flat`), which the
engines that hold the whole model still read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsbench.errors import UserError
from dsbench.worker.safe_load import load_dcp_metadata


@dataclass(frozen=True)
class StageNames:
    """A pipeline rank's stage modules and the model they were cut from: each tensor of the stages by the model's
    names for it (two for a tied embedding: ``transformer.wte.weight`` and ``lm_head.weight``, as the model's own
    ``state_dict`` lists it)."""

    model: Any
    """The whole model (its modules are the stages' own, so it names the optimizer's parameters too)."""
    names: dict[str, tuple[str, ...]]
    """The stages' ``state_dict`` key -> the model's keys for the same tensor."""

    @classmethod
    def of(cls, model: Any, stages: Any) -> StageNames:
        """Built before the stages are split or sharded (tensor parallelism and FSDP2 swap the parameters for
        DTensors, under the same keys): a tensor is matched by identity."""
        by_tensor: dict[int, list[str]] = {}
        for name, tensor in model.state_dict(keep_vars=True).items():
            by_tensor.setdefault(id(tensor), []).append(name)
        names = {key: tuple(by_tensor.get(id(tensor), ())) for key, tensor in stages.state_dict(keep_vars=True).items()}
        unnamed = [key for key, found in names.items() if not found]
        if unnamed:  # a stage module holding a tensor of its own: the split would save what the model does not have
            raise RuntimeError(f"the pipeline stage's {unnamed[0]} is no tensor of the model it was cut from")
        return cls(model, names)

    def model_state(self, stages: Any) -> dict[str, Any]:
        """This rank's tensors under the model's names, sharing their storage (so a load fills them in place)."""
        return {name: tensor.detach() for key, tensor in stages.state_dict(keep_vars=True).items()
                for name in self.names[key]}


def _options(flat: bool) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=flat)


def states(engine: Any, flat: bool = True) -> dict[str, Any]:
    """This rank's ``{"model": ..., "optim": ...}`` for DCP to save, or to load into (then :func:`restore`)."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, get_state_dict

    staged: StageNames | None = engine.stage_names
    if staged is None:
        model_state, optim_state = get_state_dict(engine.model, engine.optimizer, options=_options(flat))
    else:
        if not flat:
            raise UserError("the checkpoint was written before 2026-12-01, when dsbench kept one list of the "
                            "optimizer's parameters per checkpoint; a pipeline rank holds only its stage's: resume "
                            "it with --strategy ddp, fsdp, single or torch_tp, which save it again in the new form")
        model_state = staged.model_state(engine.model)
        optim_state = get_optimizer_state_dict(staged.model, engine.optimizer, options=_options(flat))
    return {"model": model_state, "optim": optim_state}


IMPLEMENTATION = ("fused", "foreach", "capturable", "differentiable")
"""AdamW's parameter-group settings that choose its kernel, not the training: the resuming run keeps its own (a
checkpoint of a ``--fused-optimizer`` run resumed without it would otherwise step torch_tp's mixed DTensor and plain
group with the fused kernel, which refuses it)."""


def restore(engine: Any, state: dict[str, Any], flat: bool) -> None:
    """Put what DCP loaded into ``state`` (from :func:`states`) into the engine's model and optimizer."""
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict, set_state_dict

    kernels = [{key: group[key] for key in IMPLEMENTATION if key in group} for group in engine.optimizer.param_groups]
    staged: StageNames | None = engine.stage_names
    if staged is None:
        set_state_dict(engine.model, engine.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"], options=_options(flat))
    else:  # the model's tensors were loaded in place (StageNames.model_state shares their storage)
        set_optimizer_state_dict(staged.model, engine.optimizer, state["optim"], options=_options(flat))
    for group, kernel in zip(engine.optimizer.param_groups, kernels, strict=True):
        group.update(kernel)


def is_flat(target: Path) -> bool:
    """Whether the DCP checkpoint ``target`` holds the optimizer's state flat, one key per parameter (written since
    2026-12-01), rather than nested with one ``param_groups`` list."""
    keys = load_dcp_metadata(target / ".metadata").state_dict_metadata
    # DCP spells a nested group's list of names ``optim.param_groups.<group>.params``; flat, no key is named "params"
    return not any(key.startswith("optim.param_groups.") and key.endswith(".params") for key in keys)


def schedule_for(saved: dict[str, Any], groups: int) -> dict[str, Any]:
    """The LR schedule's saved state for an optimizer of ``groups`` parameter groups. ``--fused-optimizer`` splits
    torch_tp's and torch_3d's parameters into two groups of one kind each (engines/native.py ``_by_tensor_kind``),
    which share every setting, so a checkpoint of one form resumes in the other: the per-group lists of torch's
    ``LambdaLR`` state (``base_lrs``, ``_last_lr``, ``lr_lambdas``) take the resuming optimizer's count of groups."""
    lists = {key: value for key, value in saved.items() if isinstance(value, list)}
    if all(len(value) == groups for value in lists.values()):
        return saved
    if any(len(set(map(repr, value))) > 1 for value in lists.values()):
        saved_groups = len(next(iter(lists.values())))
        raise UserError(f"the checkpoint's LR schedule holds {saved_groups} parameter groups with different "
                        f"settings; this run's optimizer has {groups}: resume with the same --fused-optimizer setting")
    return {**saved, **{key: value[:1] * groups for key, value in lists.items()}}
