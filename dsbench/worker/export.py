"""``dsbench export CHECKPOINT OUT``: a dsbench checkpoint as a Hugging Face folder (safetensors shards).

Streaming: weights are materialised one at a time and written shard by shard, so the consolidated model is
never held whole in memory. DeepSpeed ZeRO 1-3 checkpoints are read through DeepSpeed's own
``get_fp32_state_dict_from_zero_checkpoint(lazy_mode=True)`` (each fp32 weight is gathered from the rank
partitions when asked for; the partitions themselves are loaded, as DeepSpeed's loader does); ZeRO-0 from the
engine's module file; torch.distributed.checkpoint folders (ddp, fsdp, single) by reading tensors in groups of
at most one shard through ``dcp.load`` without a process group. Weights tied to another (GPT-2's ``lm_head``
to ``wte``) are written once, as ``save_pretrained`` does; ``from_pretrained`` ties them again.

The output appears only when complete: it is written into a temporary sibling folder and renamed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dsbench.checkpoints import Manifest
from dsbench.errors import UserError
from dsbench.io import parse_size
from dsbench.worker import checkpoint, checkpoint_manifest, safe_load
from dsbench.worker.export_model import matching, meta_model, tied_names

WEIGHTS_INDEX = "model.safetensors.index.json"


def deepspeed_weights(target: Path, manifest: Manifest) -> Iterator[tuple[str, Callable[[], Any]]]:
    """(name, materialise) for every weight of a DeepSpeed checkpoint."""
    if manifest.pp != 1:
        yield from pipeline_weights(target)
        return
    if manifest.zero_stage in (None, 0):
        import torch

        # DeepSpeed's own module file (written by engine.save_checkpoint), as data only (safe_load)
        states = torch.load(target / "mp_rank_00_model_states.pt", map_location="cpu", weights_only=True, mmap=True)
        for name, tensor in states["module"].items():
            yield name, lambda tensor=tensor: tensor.float()
        return
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    lazy = get_fp32_state_dict_from_zero_checkpoint(str(target.parent), tag=target.name, lazy_mode=True)
    for name, tensor in lazy.items():
        yield name, tensor.contiguous


def pipeline_weights(target: Path) -> Iterator[tuple[str, Callable[[], Any]]]:
    """(name, materialise) for every weight of a DeepSpeed pipeline checkpoint: one file per layer
    (``layer_NN-model_states.pt``, names local to dsbench's pipeline layer), read one file at a time.

    The Hugging Face name of each local weight comes from the model itself, not from a table: the model is built
    on the meta device from the checkpoint's config and split as training split it (pipe_split.stage_layers), so
    a layer's tensor is the very object the whole model names.
    """
    import torch

    from dsbench.worker.pipe_split import split_model, stage_layers

    model = meta_model(target / "hf")
    named: dict[int, str] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        named.setdefault(id(tensor), name)  # a tied weight keeps its first name, as save_pretrained writes it
    wanted = set(named.values())
    for index, layer in enumerate(stage_layers(split_model(model))):
        path = target / f"layer_{index:02d}-model_states.pt"
        if not path.is_file():
            continue  # the tied head: its weight is the embedding's, saved with layer 0
        local = {key: named[id(tensor)] for key, tensor in layer.state_dict(keep_vars=True).items()}
        states = torch.load(path, map_location="cpu", weights_only=True, mmap=True)  # tensors only: no code runs
        unknown = sorted(set(states) - set(local))
        if unknown:
            raise UserError(f"{path}: holds {unknown[0]!r}, which the model in {target / 'hf'} does not have at "
                            f"pipeline layer {index}: the checkpoint and its config disagree")
        for key, tensor in states.items():
            wanted.discard(local[key])
            yield local[key], lambda tensor=tensor: tensor.float()
    # persistent buffers that training never saved per layer are rebuilt by from_pretrained; weights are not
    missing = sorted(name for name in wanted if isinstance(_get_tensor(model, name), torch.nn.Parameter))
    if missing:
        raise UserError(f"{target}: no layer file holds {missing[0]} ({len(missing)} weights missing): the "
                        "checkpoint is incomplete")


def _get_tensor(model: Any, name: str) -> Any:
    owner, _, attr = name.rpartition(".")
    return getattr(model.get_submodule(owner) if owner else model, attr)


def dcp_weights(target: Path, max_bytes: int) -> Iterator[tuple[str, Callable[[], Any]]]:
    """(name, materialise) for every model weight of a torch.distributed.checkpoint folder, read a group of
    at most ``max_bytes`` at a time."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    metadata = safe_load.safe_reader(target).read_metadata()
    names = [k for k, v in metadata.state_dict_metadata.items()
             if k.startswith("model.") and isinstance(v, TensorStorageMetadata)]
    group: list[str] = []
    loaded: dict[str, Any] = {}

    def load(keys: list[str]) -> None:
        state = {k: torch.empty(tuple(metadata.state_dict_metadata[k].size),
                                dtype=metadata.state_dict_metadata[k].properties.dtype) for k in keys}
        with warnings.catch_warnings():  # torch says it loads in one process, as no_dist asks: not news to a user
            warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
            dcp.load(state, storage_reader=safe_load.safe_reader(target), no_dist=True)
        loaded.clear()
        loaded.update(state)

    def size(key: str) -> int:
        meta = metadata.state_dict_metadata[key]
        return int(torch.Size(meta.size).numel()) * torch.empty((), dtype=meta.properties.dtype).element_size()

    i = 0
    while i < len(names):
        group, total = [], 0
        while i < len(names) and (not group or total + size(names[i]) <= max_bytes):
            group.append(names[i])
            total += size(names[i])
            i += 1
        load(group)
        for key in group:
            yield key.removeprefix("model."), lambda key=key: as_transformers_holds(key, loaded[key])


def as_transformers_holds(name: str, tensor: Any) -> Any:
    """A weight in the shape transformers gives it: GPT-2's c_attn, which Megatron-style tensor parallelism holds as
    its q, k and v blocks apart ((in, 3, out / 3) and (3, out / 3): worker/engines/conv1d_parallel.py), flattened
    back to (in, out) and (out,), a view of the same numbers in the same order; Phi-3's qkv_proj, held by key/value
    head ((kv_heads, G + 2, head_dim, in)), with its rows put back as q, k, v, and its gate_up_proj ((2, ff, in))
    flattened (worker/engines/fused_parallel.py)."""
    if name.endswith("attn.c_attn.weight") and tensor.dim() == 3:
        return tensor.flatten(1)
    if name.endswith("attn.c_attn.bias") and tensor.dim() == 2:
        return tensor.flatten()
    if name.endswith("self_attn.qkv_proj.weight") and tensor.dim() == 4 and tensor.shape[1] >= 3:  # G + 2
        from dsbench.worker.engines.fused_parallel import transformers_qkv

        return transformers_qkv(tensor)
    if name.endswith("mlp.gate_up_proj.weight") and tensor.dim() == 3:
        return tensor.flatten(0, 1)
    return tensor


def write_shards(weights: Iterator[tuple[str, Callable[[], Any]]], skip: set[str], out: Path,
                 max_bytes: int) -> dict[str, Any]:
    """Write weights into safetensors shards of at most ``max_bytes`` (one tensor may exceed it alone), as
    ``save_pretrained`` names them; returns the index."""
    from safetensors.torch import save_file

    shards: list[dict[str, Any]] = [{}]
    sizes = [0]
    files: list[Path] = []
    total = 0

    def flush() -> None:
        path = out / f"shard-{len(files):05d}.safetensors"
        save_file(shards[-1], str(path), metadata={"format": "pt"})
        files.append(path)
        shards[-1] = {}  # free the shard's tensors
        sizes[-1] = 0

    for name, materialise in weights:
        if name in skip:
            continue
        tensor = materialise().detach().to("cpu").contiguous()
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and sizes[-1] + nbytes > max_bytes:
            flush()
            shards.append({})
            sizes.append(0)
        shards[-1][name] = tensor
        sizes[-1] += nbytes
        total += nbytes
    if shards[-1]:
        flush()
    if not files:
        raise UserError("the checkpoint holds no model weights")
    index = {"metadata": {"total_size": total}, "weight_map": _named_as_save_pretrained(files, out)}
    if len(files) > 1:
        (out / WEIGHTS_INDEX).write_text(json.dumps(index, indent=2) + "\n")
    return index


def _named_as_save_pretrained(files: list[Path], out: Path) -> dict[str, str]:
    """Rename the written shards as ``save_pretrained`` names them (model.safetensors alone, or
    model-0000i-of-0000n.safetensors with an index); returns each weight's file."""
    from safetensors import safe_open

    weight_map: dict[str, str] = {}
    for i, path in enumerate(files):
        final = "model.safetensors" if len(files) == 1 else f"model-{i + 1:05d}-of-{len(files):05d}.safetensors"
        with safe_open(str(path), framework="pt") as handle:
            weight_map.update({key: final for key in handle.keys()})
        path.rename(out / final)
    return weight_map


def export(source: str, out: str, max_shard_size: str = "2GB") -> Path:
    """Export the checkpoint at ``source`` into a new Hugging Face folder ``out``."""
    max_bytes = parse_size(max_shard_size)
    target, manifest = checkpoint_manifest.resolve(source)
    destination = Path(out)
    if destination.exists() or destination.is_symlink():
        raise UserError(f"{destination} exists: export writes a new folder and never replaces one")
    if not destination.parent.is_dir():
        raise UserError(f"{destination.parent}: no such folder for the export")
    hf = target / "hf"
    if not (hf / "config.json").is_file():
        raise UserError(f"{target}: no hf/config.json in the checkpoint, so no model to export it as")
    if manifest.storage == "deepspeed" and manifest.tp > 1:
        # zero_to_fp32 consolidates ZeRO partitions, not AutoTP's slices: it stops on the extra optimizer files
        raise UserError(f"{target}: an AutoTP checkpoint (tp {manifest.tp}); DeepSpeed's consolidation merges ZeRO "
                        "partitions only, so dsbench exports checkpoints written with tp 1")
    safe_load.install()  # every load below, DeepSpeed's zero_to_fp32 included, is weights-only
    model = meta_model(hf)
    skip = tied_names(model)
    work = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
    try:
        for item in hf.iterdir():
            shutil.copy2(item, work / item.name)
        weights = matching(deepspeed_weights(target, manifest) if manifest.storage == "deepspeed"
                           else dcp_weights(target, max_bytes), model, hf / "config.json")
        with checkpoint.damaged(target):
            write_shards(weights, skip, work, max_bytes)
        (work / "dsbench_export.json").write_text(json.dumps(
            {"checkpoint": str(target.resolve()), "step": manifest.step, "strategy": manifest.strategy}, indent=2)
            + "\n")
        os.rename(work, destination)  # the folder appears complete or not at all
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return destination


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dsbench.worker.export",
                                     description="Export a dsbench checkpoint as a Hugging Face folder.")
    parser.add_argument("checkpoint")
    parser.add_argument("out")
    parser.add_argument("--max-shard-size", default="2GB")
    args = parser.parse_args(argv)
    try:
        path = export(args.checkpoint, args.out, args.max_shard_size)
    except UserError as exc:
        print(f"dsbench export: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"dsbench export: error: {exc.filename or args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"exported: {path} (load it with from_pretrained)")
    return 0


if __name__ == "__main__":
    from dsbench.paths import leave_working_folder_off_path

    leave_working_folder_off_path()
    sys.exit(main())
