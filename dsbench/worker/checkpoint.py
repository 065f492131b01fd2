"""Checkpoints that resume exactly: save every N steps, resume from the newest complete one.

Layout of ``--checkpoint-dir D`` (DeepSpeed's own layout, so its tools read it too)::

    D/latest                        the tag of the newest *complete* checkpoint (text, as DeepSpeed writes it)
    D/global_step10/                one checkpoint (DeepSpeed's tag naming)
        mp_rank_00_model_states.pt  ...  DeepSpeed's engine files (deepspeed strategy), or
        __0_0.distcp .metadata           torch.distributed.checkpoint shards (ddp, fsdp, single)
        dsbench_rank0.pt ...             per rank: RNG states (and the LR schedule of native strategies)
        hf/config.json, tokenizer        what ``dsbench export`` needs to make a Hugging Face folder
        dsbench_checkpoint.json          the manifest, written last: step, strategy, layout, definition

A save is complete only once every rank has written its files (a barrier) and rank 0 has written the manifest;
only then is ``latest`` replaced, atomically (write a temporary file, ``os.replace``). A crash mid-save
leaves ``latest`` on the previous checkpoint and a tag folder without a manifest, which resume refuses
and the next save moves aside, never deletes.

What is restored: model, optimizer, LR schedule (DeepSpeed's engine state; DCP + the scheduler's
state_dict for native strategies), RNG states (torch CPU and CUDA, Python's ``random``) and the step. The data
position is the step itself: the batch of step s is a pure function of (seed, s) (:mod:`dsbench.worker.data`).
"""

from __future__ import annotations

import json
import os
import random
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dsbench.errors import DsbenchError, UserError
from dsbench.io import (
    WriteError,
    atomic_write_json,
    atomic_write_text,
    check_creatable_folder,
    read_json,
    read_text,
    write_failed,
)
from dsbench.strategies import CHECKPOINTED_ENGINES
from dsbench.worker import safe_load

MANIFEST = "dsbench_checkpoint.json"
LATEST = "latest"
FORMAT = 1
# Strategies whose checkpoints dsbench writes, and how: DeepSpeed's engine (ZeRO 0-3, offload, its pipeline)
# or torch.distributed.checkpoint (DCP) for the native ones. torch_pp/torch_tp are not covered yet.
# DeepSpeed saves its own layout; the torch engines save torch.distributed.checkpoint (DCP)
FORMATS = {engine: "deepspeed" if engine == "deepspeed" else "dcp" for engine in CHECKPOINTED_ENGINES}
# What must match for a resumed run to continue the same training: the data order depends on the seed, the
# sequence length and the global batch (data.BatchPlan), the weights on the model.
MUST_MATCH = ("model", "seq_len", "seed", "global_batch", "precision")


def tag_for(step: int) -> str:
    """DeepSpeed's tag for a checkpoint after ``step`` optimizer steps (its ``global_step{N}`` naming)."""
    return f"global_step{step}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Manifest:
    """What a complete checkpoint holds (``dsbench_checkpoint.json``)."""

    format: int
    step: int
    """Optimizer steps done: the resumed run starts at this step index."""
    tag: str
    strategy: str
    storage: str
    """``deepspeed`` (the engine's files) or ``dcp`` (torch.distributed.checkpoint)."""
    world_size: int
    dp: int
    tp: int
    pp: int
    zero_stage: int | None
    definition: dict[str, Any]
    """The values in MUST_MATCH, as the saving run had them."""
    written_at: str
    run_id: str | None = None
    """The training run that wrote it, kept across its resumes (random hex); None in manifests written before it
    existed, which are judged by ``definition`` alone."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def new_run_id() -> str:
    return secrets.token_hex(8)


_INT_FIELDS = {"format": 1, "step": 0, "world_size": 1, "dp": 1, "tp": 1, "pp": 1}


def _typed(data: Any, path: Path) -> Manifest:
    """The manifest's fields, each of the type and range a resume relies on; anything else is one line naming it."""
    if not isinstance(data, dict):
        raise UserError(f"{path}: not a dsbench checkpoint manifest (a JSON object is expected)")
    fields = set(Manifest.__dataclass_fields__)
    unknown = sorted(set(data) - fields)
    missing = sorted(fields - set(data) - {"run_id"})
    if unknown or missing:
        what = f"unknown key {unknown[0]!r}" if unknown else f"no {missing[0]!r}"
        raise UserError(f"{path}: not a dsbench checkpoint manifest ({what})")
    for key, low in _INT_FIELDS.items():
        if type(data[key]) is not int or data[key] < low:
            raise UserError(f"{path}: {key} must be an integer >= {low}, got {json.dumps(data[key])[:40]}")
    if data["format"] != FORMAT:
        raise UserError(f"{path}: checkpoint format {data['format']}, this dsbench reads {FORMAT}")
    if data["strategy"] not in FORMATS or data["storage"] != FORMATS[data["strategy"]]:
        raise UserError(f"{path}: strategy {json.dumps(data['strategy'])[:40]} with storage "
                        f"{json.dumps(data['storage'])[:40]} is not a checkpoint dsbench writes")
    if not isinstance(data["tag"], str) or data["tag"] != path.parent.name:
        raise UserError(f"{path}: tag {json.dumps(data['tag'])[:60]} is not the folder's name {path.parent.name!r}")
    if data["zero_stage"] is not None and (type(data["zero_stage"]) is not int or not 0 <= data["zero_stage"] <= 3):
        raise UserError(f"{path}: zero_stage must be null or 0..3, got {json.dumps(data['zero_stage'])[:40]}")
    if not isinstance(data["definition"], dict) or any(k not in data["definition"] for k in MUST_MATCH):
        raise UserError(f"{path}: definition must be an object with {', '.join(MUST_MATCH)}")
    run_id = data.get("run_id")
    if run_id is not None and not (isinstance(run_id, str) and re.fullmatch(r"[0-9a-f]{16}", run_id)):
        raise UserError(f"{path}: run_id must be 16 hex digits, got {json.dumps(run_id)[:40]}")
    if not isinstance(data["written_at"], str):
        raise UserError(f"{path}: written_at must be a string")
    return Manifest(**data)


def read_manifest(folder: Path) -> Manifest:
    """The manifest of a checkpoint tag folder, read through the guarded JSON reader (a regular UTF-8 file, bounded
    size and depth) and typed field by field; refused by name when missing or malformed."""
    path = folder / MANIFEST
    if not path.is_file():
        raise UserError(f"{folder}: no {MANIFEST}, so not a complete dsbench checkpoint (a save that did not "
                        "finish, or another tool's folder)")
    return _typed(read_json(path, "checkpoint manifest"), path)


def manifests_in(folder: Path) -> list[Manifest]:
    """The complete checkpoints in a checkpoint folder (every tag folder with a manifest), oldest step first."""
    found = [read_manifest(tag) for tag in sorted(folder.iterdir()) if (tag / MANIFEST).is_file()]
    return sorted(found, key=lambda m: m.step)


def resolve(path: str | os.PathLike[str]) -> tuple[Path, Manifest]:
    """A checkpoint given as its folder (``D``: its ``latest``) or as one tag folder (``D/global_step10``), its
    manifest typed and every pickle in it checked for globals that could run code (:func:`safe_load.check_folder`)
    before anything loads it."""
    target, manifest = _resolve(Path(path))
    safe_load.check_folder(target)
    return target, manifest


def _resolve(path: Path) -> tuple[Path, Manifest]:
    folder = Path(path)
    if not folder.is_dir():
        raise UserError(f"{folder}: {'not a folder' if folder.exists() else 'no such folder'}; give a checkpoint "
                        "folder (--checkpoint-dir of a run) or one global_stepN folder in it")
    if (folder / MANIFEST).is_file() or folder.name.startswith("global_step") or any(folder.glob("dsbench_rank*")):
        return folder, read_manifest(folder)  # a tag folder (refused by name when its save never finished)
    latest = folder / LATEST
    if not latest.is_file():
        raise UserError(f"{folder}: neither a checkpoint (no {MANIFEST}) nor a checkpoint folder (no {LATEST} file)")
    tag = read_text(latest, "checkpoint's latest file").strip()
    if not tag or "/" in tag or "\0" in tag or tag in (".", "..") or len(tag) > 255:
        raise UserError(f"{latest}: holds {tag!r}, not a checkpoint tag")
    return folder / tag, read_manifest(folder / tag)


def check_resumable(manifest: Manifest, strategy: str, definition: dict[str, Any], world_size: int,
                    tp: int = 1, pp: int = 1) -> bool:
    """Refuse a resume that could not reproduce the saved run, naming what differs. Returns True when the
    DeepSpeed checkpoint must first become a universal one (:func:`to_universal`): ZeRO partitions written by
    another number of data-parallel ranks."""
    if FORMATS.get(strategy) != manifest.storage:
        raise UserError(f"the checkpoint was written by --strategy {manifest.strategy}; resume it with the same "
                        f"strategy (this run: {strategy}), or `dsbench export` it to a Hugging Face folder")
    for key in MUST_MATCH:
        if manifest.definition.get(key) != definition.get(key):
            raise UserError(f"the checkpoint has {key} {json.dumps(manifest.definition.get(key))}, this run "
                            f"{json.dumps(definition.get(key))}: resume with the same {key}")
    if manifest.storage != "deepspeed":
        return False
    if (manifest.tp, manifest.pp) != (tp, pp):
        # ds_to_universal merges TP slices of Megatron-style models only (its UNIVERSAL_CHECKPOINT_INFO patterns);
        # AutoTP and the pipeline engine's layer files are loaded on the layout that wrote them
        raise UserError(f"the checkpoint was written with tp {manifest.tp} x pp {manifest.pp} on "
                        f"{manifest.world_size} ranks, this run has tp {tp} x pp {pp} on {world_size}: resume "
                        "with the same --tp and pipeline stages (only the data-parallel size may change)")
    if manifest.world_size == world_size:
        return False
    # ZeRO-1/2/3 partition the optimizer (and ZeRO-3 the weights) per data-parallel rank, and DeepSpeed's loader
    # needs the same count: on another world size the checkpoint is converted to its universal format first
    # (deepspeed/checkpoint/ds_to_universal.py, "Universal Checkpointing", arXiv:2406.18820). Without ZeRO the
    # engine's files hold whole tensors, which any world size loads.
    return bool(manifest.zero_stage)


UNIVERSAL_SUFFIX = "_universal"
UNIVERSAL_DONE = "dsbench_universal.json"


def universal_tag(tag: str) -> str:
    """DeepSpeed's naming for the universal form of a checkpoint tag (``global_step10_universal``)."""
    return f"{tag}{UNIVERSAL_SUFFIX}"


def universal_path(target: Path) -> Path:
    return target.with_name(universal_tag(target.name))


def to_universal(target: Path) -> Path:
    """The universal form of the DeepSpeed checkpoint ``target`` (``D/global_stepN``), converted once beside it
    as ``D/global_stepN_universal`` with DeepSpeed's own converter; rank 0 only.

    The conversion writes into a hidden temporary folder renamed into place once complete (marked by
    ``dsbench_universal.json``), so a crash mid-way leaves nothing a later resume would trust.
    """
    out = universal_path(target)
    if (out / UNIVERSAL_DONE).is_file():
        return out
    if out.exists():
        raise UserError(f"{out} exists but is not a complete universal checkpoint written by dsbench: move it "
                        "aside, and dsbench converts the checkpoint again")
    from argparse import Namespace

    from deepspeed.checkpoint import ds_to_universal

    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    # one worker each: the converter's process pools are for many-GB checkpoints, and a rank should not fork
    # while its process group is up
    args = Namespace(input_folder=str(target), output_folder=str(tmp), num_extract_workers=1,
                     num_merge_workers=1, keep_temp_folder=False, strict=True,
                     inject_missing_state=True)  # a plain HF model carries no universal_checkpoint_info
    try:
        with _refused_writes(tmp):
            ds_to_universal.main(args)
    # what the converter raises for a checkpoint it cannot read: its own asserts on required state, a missing
    # key, NotImplementedError for layouts it does not convert (AutoEP + AutoTP, ...)
    except (KeyError, ValueError, RuntimeError, NotImplementedError, AssertionError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"{target}: DeepSpeed cannot convert this checkpoint to a universal one for another "
                        f"world size ({type(exc).__name__}: {str(exc)[:200]}); resume on "
                        "the world size that wrote it") from None
    # no manifest: the universal folder is a form of the checkpoint beside it, not one to resume from by name
    atomic_write_json(tmp / UNIVERSAL_DONE, {"converted_from": target.name, "by": "deepspeed.checkpoint."
                                             "ds_to_universal", "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    tmp.rename(out)
    return out


def prepare_dir(folder: Path, resumed: Manifest | None) -> None:
    """A checkpoint folder may receive this run's saves: new, empty, or holding only checkpoints of the run being
    resumed. Ownership is read from the manifests present, never from ``latest``: each must carry the resumed
    run's id, or (written before run ids existed) its definition. Refused: a folder with another run's checkpoint
    (they would be mixed, and ``latest`` would name this run's step beside the other run's), and a path that
    cannot become a folder (under a regular file, or not writable), before any training."""
    check_creatable_folder(folder, "--checkpoint-dir")
    if not folder.is_dir():
        return
    for manifest in manifests_in(folder):
        if resumed is not None and _same_run(manifest, resumed):
            continue
        hint = "choose a new folder" + ("" if resumed else ", or --resume from it")
        raise UserError(f"--checkpoint-dir {folder} holds another run's checkpoint ({manifest.tag}, "
                        f"{'run ' + manifest.run_id if manifest.run_id else 'written before run ids'}): {hint}")
    if resumed is None and (folder / LATEST).exists():
        raise UserError(f"--checkpoint-dir {folder} holds another run's {LATEST} file: choose a new folder")


def _same_run(manifest: Manifest, resumed: Manifest) -> bool:
    """Whether a checkpoint in the folder belongs to the run being resumed: the same run id when both carry one,
    the same definition (MUST_MATCH) and strategy always."""
    if manifest.run_id and resumed.run_id and manifest.run_id != resumed.run_id:
        return False
    same = all(manifest.definition.get(k) == resumed.definition.get(k) for k in MUST_MATCH)
    return same and manifest.strategy == resumed.strategy


def check_free(folder: Path, steps: list[int]) -> None:
    """Refuse, before training, a run whose saves would meet a complete checkpoint already there."""
    for step in steps:
        if (folder / tag_for(step) / MANIFEST).exists():
            raise UserError(f"{folder / tag_for(step)} exists and this run would save there again: resume from it, "
                            "or choose another --checkpoint-dir")


def move_aside(folder: Path) -> Path | None:
    """A tag folder left by a save that never finished (no manifest): renamed, never deleted."""
    if not folder.exists():
        return None
    if (folder / MANIFEST).exists():
        raise UserError(f"{folder} is a complete checkpoint already: dsbench never overwrites one")
    aside = folder.with_name(f"{folder.name}.incomplete-{time.strftime('%Y%m%d-%H%M%S')}")
    folder.rename(aside)
    return aside


def rng_state() -> dict[str, Any]:
    """This rank's random states (dropout, sampling): torch CPU, every CUDA device, Python's ``random``."""
    import torch

    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    import torch

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _rank_file(folder: Path, rank: int) -> Path:
    return folder / f"dsbench_rank{rank}.pt"


def _save_rank_file(folder: Path, rank: int, data: dict[str, Any]) -> None:
    import torch

    target = _rank_file(folder, rank)
    tmp = target.with_name(f".{target.name}.tmp")
    torch.save(data, tmp)
    os.replace(tmp, target)


@contextmanager
def damaged(target: Path) -> Iterator[None]:
    """What DeepSpeed's and torch's readers raise on a truncated or inconsistent checkpoint, as one line naming it
    (a refused global is pickle.UnpicklingError; DCP wraps its readers' failures in CheckpointException)."""
    try:
        yield
    except (DsbenchError, OSError, KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # the readers raise ValueError, RuntimeError, KeyError, EOFError, CheckpointException
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise UserError(f"{target}: the checkpoint cannot be read ({type(exc).__name__}: {first}); it is damaged, "
                        "truncated or incomplete") from None


def _load_rank_file(folder: Path, rank: int) -> dict[str, Any]:
    """This rank's extras; on another world size, rank 0's LR schedule and no RNG (ranks do not map)."""
    import torch

    same = _rank_file(folder, rank)
    path = same if same.is_file() else _rank_file(folder, 0)
    if not path.is_file():
        raise UserError(f"{folder}: {path.name} is missing: the checkpoint is incomplete")
    # weights_only: tensors, numbers, tuples and lists only; nothing in the file can run code
    with damaged(path):
        data = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(data, dict) or ("rng" in data and not isinstance(data["rng"], dict)):
        raise UserError(f"{path}: not a dsbench rank file (a dict of RNG states and schedule is expected)")
    if path != same:
        data.pop("rng", None)
    return data


def save(engine: Any, strategy: str, folder: Path, step: int, info: Any, manifest_fields: dict[str, Any],
         comm: Any, hf_files: Any) -> Path:
    """Save this rank's part of the checkpoint after ``step`` steps; rank 0 completes it (manifest, latest).

    Collective: every rank calls it at the same step.
    """
    tag = tag_for(step)
    target = folder / tag
    if info.is_main:
        folder.mkdir(parents=True, exist_ok=True)
        move_aside(target)
    comm.barrier()  # sync point: the tag folder is fresh before any rank writes into it
    storage = FORMATS.get(strategy)
    if storage is None:
        raise UserError(f"--checkpoint-dir: checkpoints of --strategy {strategy} are not supported yet "
                        f"(supported: {', '.join(FORMATS)})")
    with _refused_writes(target):
        _write_parts(engine, strategy, storage, folder, target, tag, info, hf_files)
    comm.barrier()  # sync point: every rank's files are on disk before the checkpoint is declared complete
    if info.is_main:
        manifest = Manifest(format=FORMAT, step=step, tag=tag, strategy=strategy, storage=storage,
                            written_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), **manifest_fields)
        atomic_write_json(target / MANIFEST, manifest.to_dict())
        atomic_write_text(folder / LATEST, tag)  # last: a crash before this leaves latest on the previous save
    return target


@contextmanager
def _refused_writes(target: Path) -> Iterator[None]:
    """A write the disk refuses (full, quota, file-size limit) is one line, exit 1; ``latest`` still names the
    previous complete checkpoint. torch.save reports it as a RuntimeError from its zip writer, and DCP wraps that
    in a CheckpointException holding each rank's failure."""
    try:
        yield
    except OSError as exc:
        raise write_failed(target, exc) from None
    except BaseException as exc:  # DCP's CheckpointException derives from BaseException
        cause = None if isinstance(exc, KeyboardInterrupt | SystemExit) else _write_failure(exc)
        if cause is None:
            raise
        raise WriteError(f"cannot write checkpoint {target}: {cause} (latest still names the previous complete "
                         "checkpoint)") from None


_WRITER_MARKERS = ("PytorchStreamWriter", "inline_container", "file write failed", "No space left", "File too large")


def _write_failure(exc: BaseException) -> str | None:
    """The first line of a write failure inside ``exc`` (its DCP per-rank failures, its cause chain), or None."""
    seen: list[BaseException] = [exc]
    while seen:
        current = seen.pop()
        if isinstance(current, OSError) and current.strerror:
            return current.strerror
        text = str(current).splitlines()[0] if str(current) else ""
        if isinstance(current, RuntimeError) and any(marker in str(current) for marker in _WRITER_MARKERS):
            return text[:200]
        for failure in getattr(current, "failures", {}).values():  # DCP: rank -> (exception, traceback)
            inner = failure[0] if isinstance(failure, tuple) else failure
            if isinstance(inner, BaseException):
                seen.append(inner)
        seen += [e for e in (current.__cause__, current.__context__) if e is not None]
    return None


def _write_parts(engine: Any, strategy: str, storage: str, folder: Path, target: Path, tag: str, info: Any,
                 hf_files: Any) -> None:
    """This rank's files of the checkpoint (model, optimizer, its RNG and schedule; rank 0: the HF files)."""
    extras: dict[str, Any] = {"rng": rng_state()}
    if storage == "deepspeed":
        # every rank writes its own ZeRO partition (and rank 0 the module); latest is ours to write, below
        engine.engine.save_checkpoint(str(folder), tag=tag, save_latest=False)
    else:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optim_state = get_state_dict(engine.model, engine.optimizer)
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(target))  # collective
        extras["scheduler"] = engine.scheduler.state_dict()
    _save_rank_file(target, info.rank, extras)
    if info.is_main:
        hf_files(target / "hf")


def load(engine: Any, strategy: str, target: Path, manifest: Manifest, info: Any, universal: Path | None = None
         ) -> None:
    """Restore model, optimizer, LR schedule and RNG from a complete checkpoint (collective). ``universal``: the
    checkpoint's universal form, loaded instead (the engine was built with ``checkpoint.load_universal``)."""
    extras = _load_rank_file(target, info.rank)
    with damaged(target):
        _load_states(engine, target, manifest, extras, universal)
    if "rng" in extras:
        with damaged(_rank_file(target, info.rank)):
            set_rng_state(extras["rng"])


def _load_states(engine: Any, target: Path, manifest: Manifest, extras: dict[str, Any], universal: Path | None
                 ) -> None:
    """Model, optimizer and schedule from the checkpoint's files (collective)."""
    if manifest.storage == "deepspeed":
        source = universal or target
        path, _ = engine.engine.load_checkpoint(str(source.parent), tag=source.name, load_optimizer_states=True,
                                                load_lr_scheduler_states=True)
        if path is None:
            raise UserError(f"{source}: DeepSpeed found no checkpoint to load there")
    else:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model_state, optim_state = get_state_dict(engine.model, engine.optimizer)
        state = {"model": model_state, "optim": optim_state}
        dcp.load(state, storage_reader=safe_load.safe_reader(target))  # collective; reshards to this run's layout
        set_state_dict(engine.model, engine.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        engine.scheduler.load_state_dict(extras["scheduler"])


def copy_hf_files(model: Any, tokenizer: Any) -> Any:
    """A writer of the model's config (and generation config) and the tokenizer into a folder."""

    def write(folder: Path) -> None:
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        model.config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        tmp.rename(folder)

    return write
