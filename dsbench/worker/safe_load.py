"""Checkpoint files are data: nothing in one can run code, in dsbench's loads or in DeepSpeed's and torch's.

A checkpoint may come from anyone, and ``pickle`` runs whatever callable a file names. Three guards:

1. :func:`install` sets ``TORCH_FORCE_WEIGHTS_ONLY_LOAD=1`` for this process and its children. torch then loads
   every file with its restricted unpickler even where the caller asked for ``weights_only=False``
   (torch/serialization.py ``load``): DeepSpeed's torch checkpoint engine on every resume, ``zero_to_fp32`` on
   export, ``ds_to_universal``'s loads, DCP's byte items (``DefaultLoadPlanner.load_bytes``).
2. The non-tensor types these files really hold are registered with ``torch.serialization.add_safe_globals``:
   :data:`CHECKPOINT_GLOBALS`, found with ``torch.serialization.get_unsafe_globals_in_checkpoint`` over the files of
   every strategy dsbench checkpoints (``scripts/checkpoint_globals.py`` lists them again from any checkpoint
   folder; ``tests/integration/test_checkpoint.py`` runs it over freshly written ones).
3. DCP's ``.metadata`` is a plain pickle that torch's ``FileSystemReader`` reads with ``pickle.load``:
   :class:`SafeReader` reads it with an unpickler that resolves only :data:`DCP_METADATA_GLOBALS`.

Before anything is loaded, :func:`check_folder` reads the opcodes of every pickle in a checkpoint folder (no
object is built) and refuses, naming the file and the global, anything beyond these lists.
"""

from __future__ import annotations

import os
import pickle
import pickletools
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dsbench.errors import UserError

FORCE_ENV = "TORCH_FORCE_WEIGHTS_ONLY_LOAD"

# The globals beyond torch's own weights-only allow-list that dsbench's checkpoints hold (module.name), per writer:
CHECKPOINT_GLOBALS = {
    # DeepSpeed's ZeRO optimizer files (zero_pp_rank_*_optim_states.pt), their universal form's files
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",
    "deepspeed.runtime.zero.config.ZeroStageEnum",
    "deepspeed.utils.tensor_fragment.fragment_address",
}

# What DCP's .metadata pickles (torch.distributed.checkpoint.metadata / filesystem, torch 2.13).
DCP_METADATA_GLOBALS = {
    ("torch.distributed.checkpoint.metadata", name) for name in (
        "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata", "TensorProperties",
        "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")
} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch.distributed.checkpoint.planner", "LoadItemType"),
    ("torch.distributed.checkpoint.planner", "WriteItemType"),
    ("torch", "Size"), ("torch.serialization", "_get_layout"),  # torch.strided pickles as _get_layout("torch.strided")
    ("torch", "strided"), ("torch", "sparse_coo"), ("torch", "contiguous_format"),
    ("torch", "channels_last"), ("torch", "preserve_format"),
    ("collections", "OrderedDict"), ("builtins", "set"), ("builtins", "frozenset"), ("builtins", "slice"),
    ("copyreg", "_reconstructor"), ("builtins", "object"),
    ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"),  # StorageMeta.checkpoint_id
}
_DTYPE_NAMES = {"float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
                "complex64", "complex128", "float8_e4m3fn", "float8_e5m2"}


def install(deepspeed: bool = True) -> None:
    """Make every ``torch.load`` of this process (and of the processes it starts) a weights-only load that accepts
    :data:`CHECKPOINT_GLOBALS` and nothing else beyond torch's own list. ``deepspeed=False``: a rank that never
    loads a DeepSpeed checkpoint leaves DeepSpeed's classes out, and so does not import DeepSpeed."""
    import torch

    os.environ[FORCE_ENV] = "1"
    os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)  # both set is an error in torch.load
    names = CHECKPOINT_GLOBALS if deepspeed else {n for n in CHECKPOINT_GLOBALS if not n.startswith("deepspeed.")}
    torch.serialization.add_safe_globals(list(_resolve(names)))


def _resolve(names: Iterable[str]) -> Iterable[Any]:
    """The objects named ``module.attr`` that this Python can import (numpy 1 and 2 name their scalar differently)."""
    import importlib

    for name in sorted(names):
        module, _, attr = name.rpartition(".")
        try:
            found = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError):
            continue
        if callable(found):  # classes and functions only: add_safe_globals takes nothing else
            yield found


class _MetadataUnpickler(pickle.Unpickler):
    """Builds only the classes a DCP ``.metadata`` holds; any other global is refused before it is looked up."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in DCP_METADATA_GLOBALS or (module == "torch" and name in _DTYPE_NAMES):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name}")


def load_dcp_metadata(path: Path) -> Any:
    """A DCP ``.metadata`` read by :class:`_MetadataUnpickler`; anything else in it is one line naming it."""
    try:
        with open(path, "rb") as handle:
            return _MetadataUnpickler(handle).load()
    except pickle.UnpicklingError as exc:
        raise UserError(f"{path}: holds {exc}, which a torch.distributed.checkpoint metadata file never does; "
                        "dsbench loads checkpoints as data only") from None
    except (EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError, MemoryError,
            RecursionError) as exc:
        raise UserError(f"{path}: not a readable torch.distributed.checkpoint metadata file ({type(exc).__name__}); "
                        "the checkpoint is damaged or truncated") from None


def safe_reader(folder: Path) -> Any:
    """torch's ``FileSystemReader`` for ``folder`` with its ``.metadata`` read by :func:`load_dcp_metadata`."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            rank = kwargs.get("rank")
            metadata = load_dcp_metadata(Path(self._get_metadata_path(rank)))
            if getattr(metadata, "storage_meta", None) is None:  # as FileSystemReader.read_metadata does
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return SafeReader(str(folder))


_STRINGS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING", "STRING"}


def globals_in_pickle(data: bytes) -> set[str]:
    """``module.name`` of every global a pickle names, from its opcodes (``pickletools.genops``: nothing is built).
    ``STACK_GLOBAL`` takes the two strings pushed before it, directly or from the memo, as ``pickle`` writes them."""
    found: set[str] = set()
    recent: list[str | None] = []
    memo: dict[int, str | None] = {}
    for opcode, arg, _ in pickletools.genops(data):
        name = opcode.name
        if name in _STRINGS:
            recent.append(arg.decode("latin-1") if isinstance(arg, bytes) else arg)
        elif name in ("BINGET", "LONG_BINGET", "GET"):
            recent.append(memo.get(int(arg)))
        elif name == "MEMOIZE":
            memo[len(memo)] = recent[-1] if recent else None
        elif name in ("BINPUT", "LONG_BINPUT", "PUT"):
            memo[int(arg)] = recent[-1] if recent else None
        elif name == "GLOBAL":
            found.add(".".join(arg.split(" ", 1)))
        elif name == "STACK_GLOBAL":
            module, attr = (recent[-2], recent[-1]) if len(recent) >= 2 else (None, None)
            found.add(f"{module}.{attr}" if module and attr else "a global computed while loading")
    return found


def pickle_globals(path: Path) -> set[str]:
    """The globals a torch file (zip, its ``data.pkl``) or a raw pickle names, read from its opcodes."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                record = next((n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
                if record is None:
                    raise UserError(f"{path}: a zip archive without data.pkl, not a torch.save file")
                data = archive.read(record)
        else:
            data = path.read_bytes()
        return globals_in_pickle(data)
    except UserError:
        raise
    except (OSError, EOFError, ValueError, zipfile.BadZipFile, KeyError, IndexError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not a readable checkpoint file ({type(exc).__name__}: {str(exc)[:120]}); the "
                        "checkpoint is damaged or truncated") from None


def _allowed(name: str, metadata: bool) -> bool:
    import torch

    if metadata:
        module, _, attr = name.rpartition(".")
        return (module, attr) in DCP_METADATA_GLOBALS or (module == "torch" and attr in _DTYPE_NAMES)
    from torch import _weights_only_unpickler as wou

    return name in wou._get_allowed_globals() or name in wou._get_user_allowed_globals() or (
        name in CHECKPOINT_GLOBALS) or name.startswith("torch.") and name.rpartition(".")[2] in _DTYPE_NAMES or (
        isinstance(getattr(torch, name.removeprefix("torch."), None), torch.dtype))


def checkpoint_files(folder: Path) -> list[Path]:
    """The pickles of a checkpoint folder: torch files (``*.pt``) anywhere below it and DCP ``.metadata`` files."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and (p.suffix == ".pt" or p.name.endswith(".metadata")))


def check_folder(folder: Path) -> None:
    """Refuse, before anything loads, a checkpoint with a file that names a global it could run (one line: the
    file and the global)."""
    for path in checkpoint_files(folder):
        metadata = path.name.endswith(".metadata")
        unknown = sorted(name for name in pickle_globals(path) if not _allowed(name, metadata))
        if unknown:
            raise UserError(f"{path}: holds {unknown[0]}, which no checkpoint dsbench reads needs; it could run code "
                            "when loaded, so dsbench refuses the checkpoint")
