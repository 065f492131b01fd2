"""A checkpoint's manifest and where checkpoints live (stdlib only): reading a manifest (typed, bounded), locating a
path's newest complete checkpoint, what a resuming run must share with it, and whose checkpoints a folder holds (a
run never overwrites another run's).

The manifest, ``dsbench_checkpoint.json``, is written last into each tag folder (dsbench/worker/checkpoint.py
has the layout and the save order). The launch refuses a resume that cannot continue before any rank starts
(:func:`check_before_launch`); each rank checks again and scans the checkpoint's pickles before loading them
(dsbench/worker/checkpoint_manifest.py).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dsbench.checkpoint_files import MANIFEST, check_files, inside
from dsbench.errors import UserError
from dsbench.io import check_creatable_folder, read_json, read_text
from dsbench.strategies import ENGINES

LATEST = "latest"
FORMAT = 1
# How each engine writes its checkpoints: DeepSpeed's engine (ZeRO 0-3, offload, its pipeline) its own files, the
# torch engines torch.distributed.checkpoint (DCP) under the model's own parameter names (worker/dcp_state.py; the
# pipeline stages' since 2026-12-01), so any torch engine resumes another's.
FORMATS = {engine: "deepspeed" if engine == "deepspeed" else "dcp" for engine in ENGINES}
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
    files: dict[str, int] | None = None
    """Every file of the tag folder but this manifest, by its path in the folder, with its size in bytes as the save
    left it (:func:`files_of`); None in manifests written before 2026-12-04, whose files are not checked."""

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
    missing = sorted(fields - set(data) - {"run_id", "files"})
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
    files = data.get("files")
    if files is not None and not (isinstance(files, dict) and all(
            inside(name) and type(size) is int and size >= 0 for name, size in files.items())):
        raise UserError(f"{path}: files must map paths inside the folder to sizes in bytes (whole numbers >= 0)")
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


def locate(path: str | os.PathLike[str]) -> tuple[Path, Manifest]:
    """A checkpoint given as its folder (``D``: its ``latest``) or as one tag folder (``D/global_step10``), and its
    manifest, typed."""
    folder = Path(path)
    if not folder.is_dir():
        raise UserError(f"{folder}: {'not a folder' if folder.exists() else 'no such folder'}; give a checkpoint "
                        "folder (--checkpoint-dir of a run) or one global_stepN folder in it")
    if (folder / MANIFEST).is_file() or folder.name.startswith("global_step") or any(folder.glob("dsbench_rank*")):
        return folder, _complete(folder)  # a tag folder (refused by name when its save never finished)
    latest = folder / LATEST
    if not latest.is_file():
        raise UserError(f"{folder}: neither a checkpoint (no {MANIFEST}) nor a checkpoint folder (no {LATEST} file)")
    tag = read_text(latest, "checkpoint's latest file").strip()
    if not tag or "/" in tag or "\0" in tag or tag in (".", "..") or len(tag) > 255:
        raise UserError(f"{latest}: holds {tag!r}, not a checkpoint tag")
    if not (folder / tag).is_dir():  # DeepSpeed writes latest after the tag's files: the folder it names is gone
        saved = sorted((p.name for p in folder.glob("global_step*") if p.is_dir()), key=lambda n: (len(n), n))
        raise UserError(f"{latest} names {tag!r}, which is not a folder in {folder}"
                        + (f" (it holds {', '.join(saved[-3:])}: give one of them)" if saved else ""))
    return folder / tag, _complete(folder / tag)


def _complete(tag: Path) -> Manifest:
    """The tag folder's manifest, with every file it lists there as the save wrote it."""
    manifest = read_manifest(tag)
    check_files(tag, manifest.files)
    return manifest


def definition(model: dict[str, Any], seq_len: int, seed: int, global_batch: int | None,
               precision: str | None) -> dict[str, Any]:
    """What a checkpoint must share with the run resuming it (:data:`MUST_MATCH`), as its manifest records it."""
    return {"model": model, "seq_len": seq_len, "seed": seed, "global_batch": global_batch, "precision": precision}


def check_steps(target: Path, manifest: Manifest, steps: int, warmup: int) -> None:
    """Refuse a resume that leaves no step to measure."""
    if not manifest.step < steps - warmup:
        raise UserError(f"{target} was saved after {manifest.step} steps: --steps {steps} with --warmup {warmup} "
                        "leaves no step to measure; raise --steps")


def check_before_launch(resume: str, strategy: str, steps: int, warmup: int, run: dict[str, Any], world_size: int,
                        tp: int, pp: int) -> None:
    """What ``dsbench launch`` refuses of ``--resume`` before any rank starts (each rank checks it all again, and
    scans the checkpoint's pickles before loading them): the steps left, the strategy, the parts of the definition
    the launch knows (``run``: without those the ranks resolve, e.g. from a config's "auto"), and the layout. A
    path this host cannot see is left to the ranks (a folder on the nodes only)."""
    if not Path(resume).exists():
        return
    target, manifest = locate(resume)
    check_steps(target, manifest, steps, warmup)
    check_resumable(manifest, strategy, run, world_size, tp=tp, pp=pp)


def check_resumable(manifest: Manifest, strategy: str, definition: dict[str, Any], world_size: int,
                    tp: int = 1, pp: int = 1) -> bool:
    """Refuse a resume that could not reproduce the saved run, naming what differs (of :data:`MUST_MATCH`, the keys
    ``definition`` has: a rank has them all). Returns True when the DeepSpeed checkpoint must first become a
    universal one (:func:`to_universal`): ZeRO partitions written by another number of data-parallel ranks."""
    if FORMATS.get(strategy) != manifest.storage:
        raise UserError(f"the checkpoint was written by --strategy {manifest.strategy}; resume it with the same "
                        f"strategy (this run: {strategy}), or `dsbench export` it to a Hugging Face folder")
    for key in (key for key in MUST_MATCH if key in definition):
        if manifest.definition.get(key) != definition.get(key):
            raise UserError(f"the checkpoint has {key} {json.dumps(manifest.definition.get(key))}, this run "
                            f"{json.dumps(definition.get(key))}: resume with the same {key}")
    if manifest.storage != "deepspeed":
        _check_blocks_apart(manifest, tp)
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


FUSED_BLOCKS = {"gpt2": "GPT-2's c_attn (q, k and v)", "phi3": "Phi-3's qkv_proj and gate_up_proj"}
"""The families whose fused projections Megatron-style tensor parallelism holds in another shape, and what they are."""


def _check_blocks_apart(manifest: Manifest, tp: int) -> None:
    """GPT-2's c_attn and Phi-3's qkv_proj and gate_up_proj are held with their blocks apart under Megatron-style
    tensor parallelism (worker/engines/conv1d_parallel.py, fused_parallel.py) and whole without it, and DCP loads a
    tensor into one of its saved shape: such a checkpoint resumes on the same side of that line (any
    tensor-parallel degree on its side)."""
    arch = (manifest.definition.get("model") or {}).get("arch")
    if arch not in FUSED_BLOCKS or (manifest.tp > 1) == (tp > 1):
        return
    held, this, resume = (("apart", "whole", "--tp 2 or more (torch_tp, torch_3d)") if manifest.tp > 1
                          else ("whole", "apart", "tp 1"))
    raise UserError(f"the checkpoint holds {FUSED_BLOCKS[arch]} with their blocks {held} (written with tp "
                    f"{manifest.tp}), this run holds them {this} (tp {tp}): resume it with {resume}, or `dsbench "
                    "export` it to a Hugging Face folder and start from that")


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
