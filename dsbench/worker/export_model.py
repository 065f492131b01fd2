"""The model an export is written as: built on the meta device from the checkpoint's ``hf/config.json``, its tied
weights (written once), and the check that the checkpoint's weights are that model's, name for name and shape for
shape, so the folder from_pretrained loads is the model that trained (worker side: imports torch)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dsbench.errors import UserError

Weights = Iterator[tuple[str, Callable[[], Any]]]


def meta_model(config_folder: Path) -> Any:
    """The checkpoint's model on the meta device, built by transformers from its ``hf/config.json``. A config it
    refuses is one line naming the file: an unknown model_type (ValueError, KeyError), a field of the wrong type
    (huggingface_hub's StrictDataclassFieldValidationError, a plain Exception: until 2026-12-04 a traceback, exit 1),
    a size the model cannot be built with."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        config = AutoConfig.from_pretrained(config_folder)
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(config)
    except Exception as exc:  # noqa: BLE001 (transformers' and huggingface_hub's own kinds, each one line)
        first = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise UserError(f"{config_folder / 'config.json'}: transformers cannot build a model from it ({first})"
                        ) from None


def tied_names(model: Any) -> set[str]:
    """Names of weights that are the same tensor as an earlier one in the model (dropped from the export)."""
    first: dict[int, str] = {}
    dropped = set()
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in first:
            dropped.add(name)
        else:
            first[id(param)] = name
    return dropped


def matching(weights: Weights, model: Any, config: Path) -> Weights:
    """``weights`` as they come, each checked against ``model`` (the one ``config`` builds) as it is materialised:
    a name the model does not hold, a shape it does not have, or (at the end) a parameter no weight gave is one line.
    A config edited after the save (``n_layer`` 1 for a 2-layer run) exported a folder from_pretrained loads with a
    warning only, the second layer's weights dropped (until 2026-12-04). Buffers may be absent: from_pretrained
    rebuilds them."""
    shapes = {name: tuple(t.shape) for name, t in model.state_dict(keep_vars=True).items()}
    needed = {name for name, _ in model.named_parameters()}  # tied copies under their first name only
    seen = set()
    for name, materialise in weights:
        if name not in shapes:
            raise UserError(f"{config}: the checkpoint holds {name}, a weight the model this config builds has not "
                            "(the config is not the one the run saved)")
        seen.add(name)
        yield name, _checked(name, materialise, shapes[name], config)
    if missing := sorted(needed - seen):
        raise UserError(f"{config}: the model this config builds has {len(missing)} parameter(s) the checkpoint "
                        f"lacks ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''})")


def _checked(name: str, materialise: Callable[[], Any], shape: tuple[int, ...], config: Path) -> Callable[[], Any]:
    def load() -> Any:
        tensor = materialise()
        if tuple(tensor.shape) != shape:
            raise UserError(f"{config}: the checkpoint's {name} is {list(tensor.shape)}, the model this config "
                            f"builds has {list(shape)} (the config is not the one the run saved)")
        return tensor
    return load
