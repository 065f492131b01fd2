"""DeepSpeed Ulysses' gradients, not only its losses, equal one process's (issue 28).

Adam hides a constant gradient scale (its step is m/sqrt(v)), so a Ulysses run whose gradients were sp times too
large kept the Adam losses of one process to 1e-7 while clipping never changed which steps it clipped. With plain
SGD (torch.optim.SGD through DeepSpeed, no clipping, no scheduler) a scale shows in the first update. Oracle: one
DeepSpeed rank with the same global batch (micro x accumulation x data-parallel ranks: 4) under the same SGD, at
ZeRO-1 (on one rank no stage partitions anything, so one run is the reference of both stages)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration.conftest import dsbench, load_run

pytestmark = pytest.mark.dist


def sgd_config(tmp_path: Path, name: str, render: list[str]) -> Path:
    """A config rendered by dsbench, then stepped by plain SGD (lr 0.5) without clipping or warm-up."""
    path = tmp_path / f"{name}.json"
    done = dsbench("render", *render, "--model", "llama-tiny", "-o", str(path), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    config = json.loads(path.read_text())
    config.update(optimizer={"type": "SGD", "params": {"lr": 0.5}}, gradient_clipping=0.0,
                  zero_allow_untested_optimizer=True)
    config.pop("scheduler", None)
    path.write_text(json.dumps(config))
    return path


def losses(tmp_path: Path, name: str, config: Path, ranks: int) -> list[float]:
    folder = tmp_path / name
    done = dsbench("launch", "--config", str(config), "--model", "llama-tiny", "--num-gpus", str(ranks),
                   "--run-dir", str(folder), "--", "--steps", "5", "--warmup", "1", "--seq-len", "64", "--quiet",
                   cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [step["loss"] for step in load_run(folder)["steps"]]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> list[float]:
    """The reference: one rank, micro-batch 2 x 2 accumulation steps, ZeRO-1, the same SGD. Its config states the
    batch as many users' do, train_batch_size 4 and the micro-batch, leaving the accumulation to DeepSpeed: the rank
    runs the 2 micro-steps a step that DeepSpeed derives (until 2026-11-30 it ran 1, and trained half the batch of
    the Ulysses runs it is the reference of)."""
    folder = tmp_path_factory.mktemp("one")
    config = sgd_config(folder, "one", ["--micro-batch", "2", "--grad-accum", "2", "--zero", "1", "--world-size", "1"])
    stated = json.loads(config.read_text())
    assert stated.pop("gradient_accumulation_steps") == 2 and stated["train_batch_size"] == 4
    config.write_text(json.dumps(stated))
    return losses(folder, "one", config, 1)


@pytest.mark.parametrize(("stage", "ranks", "micro", "accum"), [(1, 2, 2, 2), (3, 4, 1, 2)])
def test_ulysses_gradients_equal_one_process_s(tmp_path, one_process, stage, ranks, micro, accum):
    """ZeRO-1 on 2 ranks (one sequence-parallel group) and ZeRO-3 on 4 (two groups x two replicas): DeepSpeed
    0.19.8 reduces Ulysses' gradients differently by stage, and the worker scales each (engines/deepspeed.py)."""
    shape = ["--micro-batch", str(micro), "--grad-accum", str(accum), "--zero", str(stage)]
    ulysses = sgd_config(tmp_path, f"ulysses-z{stage}", [*shape, "--ulysses", "2", "--world-size", str(ranks)])
    assert micro * accum * ranks // 2 == 4  # the reference's global batch
    got, expected = losses(tmp_path, "ulysses", ulysses, ranks), one_process
    assert len(got) == 5 and expected[0] - expected[-1] > 0.3  # SGD at lr 0.5 moves the loss: a 2x scale shows
    assert max(abs(a - b) / b for a, b in zip(got, expected, strict=True)) < 1e-5, (got, expected)
