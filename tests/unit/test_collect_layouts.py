"""Runs of one strategy in other layouts are other rows (report.collect.told_apart)."""

from __future__ import annotations

from dsbench.report.collect import told_apart
from dsbench.rows import Run
from dsbench.run_record import RunHeader


def _run(micro: int, accum: int, recompute: str = "none") -> Run:
    return Run(folder="f", id=f"{micro}-{accum}-{recompute}", strategy="ddp+fused", base_strategy="ddp", status="ok",
               model="gpt2-tiny", world_size=2, micro_batch=micro,
               header=RunHeader(micro_batch=micro, grad_accum=accum, recompute=recompute, seq_len=128))


def test_a_tunes_layouts_are_told_apart_and_a_lone_layout_keeps_its_label():
    """A tune's cells (ddp at mb1 x2 and mb2 x1, each with and without checkpointing) merged as repeats of one
    "ddp+fused" row until 2026-12-03 (measured: `dsbench tune --strategies ddp --exhaustive`, then `report`)."""
    runs = [_run(1, 2), _run(1, 2, "full"), _run(2, 1), _run(2, 1, "full")]
    assert [run.strategy for run in told_apart(runs)] == [
        "ddp+fused mb1 x2", "ddp+fused mb1 x2 ckpt", "ddp+fused mb2 x1", "ddp+fused mb2 x1 ckpt"]
    assert [run.strategy for run in told_apart([_run(2, 1), _run(2, 1)])] == ["ddp+fused", "ddp+fused"]  # repeats
