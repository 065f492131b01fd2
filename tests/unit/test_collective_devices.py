"""Every tensor the worker hands to a collective lives on the rank's device.

Under NCCL a CPU tensor fails at the first collective ("No backend type associated with device type
cpu"), yet gloo accepts it, so the CPU suite cannot see the defect by running. Here the rank's device is
torch's ``meta`` device, the one device a CPU-only machine has besides the CPU: a tensor made on the CPU
by default shows up as a mismatch. torch.distributed is replaced by a recorder of the devices it is
handed; the real loop, gathers and barrier run on top of it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from dsbench.parallel import ParallelDims
from dsbench.worker import loop
from dsbench.worker.data import build_plan
from dsbench.worker.dist import Collectives, DistInfo
from tests.conftest import ROOT

META = DistInfo(rank=0, world_size=2, local_rank=0, device="meta", backend="nccl", process_group=True)


class Recorder:
    """Stands in for torch.distributed: records the device of every tensor it is handed."""

    def __init__(self) -> None:
        self.devices: list[tuple[str, str]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import torch.distributed as dist

        monkeypatch.setattr(dist, "is_initialized", lambda: True)
        monkeypatch.setattr(dist, "all_gather", self.all_gather)
        monkeypatch.setattr(dist, "all_reduce", self.all_reduce)
        monkeypatch.setattr(dist, "all_gather_object", self.all_gather_object)

    def all_gather(self, outputs: list[torch.Tensor], tensor: torch.Tensor, **_: object) -> None:
        self.devices += [("all_gather", str(t.device)) for t in (tensor, *outputs)]

    def all_reduce(self, tensor: torch.Tensor, **_: object) -> None:
        self.devices.append(("all_reduce", str(tensor.device)))

    def all_gather_object(self, out: list[object], value: object, **_: object) -> None:
        out[:] = [value] * len(out)


class MetaEngine:
    """A training engine whose losses live on the meta device, as a GPU engine's live on the GPU."""

    measure_states = False
    model = torch.nn.Linear(1, 1, device="meta")  # the Engine protocol's model (its parameters are not activations)

    def train_step(self, batches: list[torch.Tensor]) -> torch.Tensor:
        assert all(batch.device.type == "meta" for batch in batches)
        return torch.ones((), device="meta")

    def lr(self) -> float:
        return 1e-3

    def skipped_steps(self) -> int:
        return 0

    def model_state_bytes(self) -> dict[str, int]:
        return {"total": 1}


@pytest.fixture
def recorder(monkeypatch):
    rec = Recorder()
    rec.install(monkeypatch)
    # Reading a meta tensor's values is impossible; the host copy returns ones of the gathered shape.
    monkeypatch.setattr(loop, "to_host", lambda t: torch.ones(t.shape, dtype=t.dtype).tolist())
    return rec


def test_a_tensor_on_another_device_is_refused(recorder):
    comm = Collectives(META)
    with pytest.raises(RuntimeError, match="rank's device is meta"):
        comm.all_gather(torch.zeros(3))  # a CPU tensor: what NCCL would reject
    assert comm.all_gather(torch.zeros(3, device="meta")).shape == (2, 3)
    comm.barrier()
    assert {device for _, device in recorder.devices} == {"meta"}


def test_the_training_loop_hands_collectives_only_rank_device_tensors(recorder):
    plan = build_plan(list(range(4096)), seq_len=16, seed=0, micro_batch=2, grad_accum=2, dp_size=2)
    batches: list[list[dict]] = []
    settings = loop.LoopSettings(steps=7, warmup=2, seq_len=16, dims=ParallelDims(world=2), gather_every=3)
    loop.train_loop(MetaEngine(), plan, META, settings, batches.append)
    kinds = {name for name, _ in recorder.devices}
    assert kinds == {"all_gather", "all_reduce"}  # the per-step gathers and the window's barrier ran
    assert {device for _, device in recorder.devices} == {"meta"}, recorder.devices
    records = [r for batch in batches for r in batch]
    assert [r["step"] for r in records if r["type"] == "step"] == list(range(7))
    assert records[0]["type"] == "model_states" and records[-1]["type"] == "window"
    # one gather at the end of warm-up, then every 3 steps and at the end: 4 batches of records + the window
    assert len(batches) == 4


COLLECTIVE_CALL = re.compile(r"\b(?:dist|torch\.distributed)\.(all_reduce|all_gather\w*|broadcast\w*|barrier|"
                             r"reduce_scatter\w*|all_to_all\w*|send|recv|gather|scatter|reduce)\(")


def test_only_the_dist_module_calls_collectives():
    """One place hands tensors to collectives, so the device rule is checked in one place."""
    offenders = [f"{path.relative_to(ROOT)}: {match.group(0)}"
                 for path in sorted((ROOT / "dsbench").rglob("*.py")) if path.name != "dist.py"
                 for match in COLLECTIVE_CALL.finditer(path.read_text())]
    assert offenders == []
    assert COLLECTIVE_CALL.search(Path(ROOT / "dsbench" / "worker" / "dist.py").read_text())


def test_the_window_record_counts_the_measured_steps_only():
    """8 steps after 2 of warm-up, a global batch of 4 sequences of 128 tokens: 6 steps of 512 tokens, 24 samples;
    one rank's share (here 256 tokens a step) six times."""
    settings = loop.LoopSettings(steps=8, warmup=2, seq_len=128, dims=ParallelDims(world=2))
    window = loop.window_record(settings, 4, 2, 1.5, 256)
    assert window == {**window, "first_step": 2, "last_step": 7, "seconds": 1.5, "tokens": 6 * 512, "samples": 24,
                      "rank_tokens": 6 * 256}
