"""Checkpoints that resume exactly: save every N steps, resume from the newest complete one.

Layout of ``--checkpoint-dir D`` (DeepSpeed's own layout, so its tools read it too)::

    D/latest                        the tag of the newest *complete* checkpoint (text, as DeepSpeed writes it)
    D/global_step10/                one checkpoint (DeepSpeed's tag naming)
        mp_rank_00_model_states.pt  ...  DeepSpeed's engine files (deepspeed strategy), or
        __0_0.distcp .metadata           torch.distributed.checkpoint shards (the torch engines)
        dsbench_rank0.pt ...             per rank: RNG states (and the LR schedule of native strategies)
        hf/config.json, tokenizer        what ``dsbench export`` needs to make a Hugging Face folder
        dsbench_checkpoint.json          the manifest, written last: step, strategy, layout, definition

A save is complete only once every rank has written its files (a barrier) and rank 0 has written the manifest;
only then is ``latest`` replaced, atomically (write a temporary file, ``os.replace``). A crash mid-save
leaves ``latest`` on the previous checkpoint and a tag folder without a manifest, which resume refuses
and the next save moves aside, never deletes.

What is restored: model, optimizer, LR schedule (DeepSpeed's engine state; DCP + the scheduler's
state_dict and fp16's loss scale for native strategies), RNG states (torch CPU and CUDA, Python's ``random``) and
the step. The data position is the step itself: the batch of step s is a pure function of (seed, s)
(:mod:`dsbench.worker.data`).
"""

from __future__ import annotations

import os
import random
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dsbench.checkpoint_files import files_of
from dsbench.checkpoints import FORMAT, FORMATS, LATEST, MANIFEST, Manifest, move_aside, tag_for
from dsbench.errors import DsbenchError, UserError
from dsbench.io import (
    WriteError,
    atomic_write_json,
    atomic_write_text,
    write_failed,
)
from dsbench.worker import dcp_state, safe_load

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
    except FileNotFoundError as exc:  # a file the reader looked for in the checkpoint (DeepSpeed's tool names none)
        if exc.filename is not None and not Path(exc.filename).resolve().is_relative_to(Path(target).resolve()):
            raise  # not the checkpoint's: an I/O error (exit 1)
        raise UserError(f"{target}: the checkpoint is incomplete ({exc.strerror or exc}"
                        + (f": {exc.filename}" if exc.filename else "") + ")") from None
    except (DsbenchError, OSError, KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # the readers raise ValueError, RuntimeError, KeyError, EOFError, CheckpointException
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise UserError(f"{target}: the checkpoint cannot be read ({type(exc).__name__}: {first}); it is damaged, "
                        "truncated or incomplete") from None


def _load_rank_file(folder: Path, rank: int, same_world: bool) -> dict[str, Any]:
    """This rank's extras; on another world size, a rank the checkpoint had none of takes rank 0's LR schedule and
    no RNG (ranks do not map). On the same world size every rank's file must be there: a missing one resumed that
    rank without its RNG, silently (until 2026-12-04)."""
    import torch

    same = _rank_file(folder, rank)
    if same_world and not same.is_file():
        raise UserError(f"{folder}: {same.name} is missing: the checkpoint is incomplete (rank {rank}'s RNG and "
                        "LR schedule)")
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
    storage = FORMATS[strategy]
    with _refused_writes(target):
        _write_parts(engine, strategy, storage, folder, target, tag, info, hf_files)
    comm.barrier()  # sync point: every rank's files are on disk before the checkpoint is declared complete
    if info.is_main:
        manifest = Manifest(format=FORMAT, step=step, tag=tag, strategy=strategy, storage=storage,
                            written_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), files=files_of(target),
                            **manifest_fields)
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

        dcp.save(dcp_state.states(engine), checkpoint_id=str(target))  # collective
        extras["scheduler"] = engine.scheduler.state_dict()
        extras["loss_scale"] = engine.loss_scale.state_dict()  # fp16's scale (the identity's in fp32 and bf16)
    _save_rank_file(target, info.rank, extras)
    if info.is_main:
        hf_files(target / "hf")


def load(engine: Any, strategy: str, target: Path, manifest: Manifest, info: Any, universal: Path | None = None
         ) -> None:
    """Restore model, optimizer, LR schedule and RNG from a complete checkpoint (collective). ``universal``: the
    checkpoint's universal form, loaded instead (the engine was built with ``checkpoint.load_universal``)."""
    extras = _load_rank_file(target, info.rank, same_world=manifest.world_size == info.world_size)
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

        flat = dcp_state.is_flat(target)
        state = dcp_state.states(engine, flat)
        dcp.load(state, storage_reader=safe_load.safe_reader(target))  # collective; reshards to this run's layout
        dcp_state.restore(engine, state, flat)
        groups = len(engine.optimizer.param_groups)
        engine.scheduler.load_state_dict(dcp_state.schedule_for(extras["scheduler"], groups))
        if isinstance(extras.get("loss_scale"), dict):  # checkpoints before 2026-11-30 have none: 2**16 again
            engine.loss_scale.load_state_dict(extras["loss_scale"])


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
