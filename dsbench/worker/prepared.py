"""Everything one rank set up for its run, as the loop, the records and the checkpoints read it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsbench.checkpoints import Manifest
from dsbench.models import ModelShape
from dsbench.parallel import ParallelDims

if TYPE_CHECKING:  # the worker's torch-side types, for the annotations only
    from dsbench.worker.data import BatchPlan
    from dsbench.worker.dist import DistInfo
    from dsbench.worker.loop import LoopSettings

Resumed = tuple[Path, Manifest]
"""The checkpoint ``--resume`` names: its tag folder and its manifest."""


@dataclass
class Prepared:
    """Everything set up for the run on this rank."""

    strategy: str
    shape: ModelShape
    ds_config: dict[str, Any] | None
    info: DistInfo
    """This rank's place in the process group."""
    plan: BatchPlan
    """Which sequences each rank reads at each step."""
    engine: Any
    precision: str
    dims: ParallelDims
    fsdp: dict[str, bool] | None
    settings: LoopSettings
    """The loop's settings."""
    folder: Path | None
    """The run folder (rank 0), checked before the model is built: measurements are never overwritten."""
    hostnames: list[Any]
    """The host each rank runs on, by rank."""
    model: Any = None
    """The Hugging Face model the engine wraps (its config goes into checkpoints)."""
    tokenizer: Any = None
    resumed: Resumed | None = None
    """The checkpoint this run continues, or None."""
