"""The torch engines' checkpoints on the ranks of tests/integration/engine_ranks.py: each engine trains 12 steps and
saves after 6 through the worker's own ``checkpoint.save`` (DCP, the rank files with the LR schedule and RNG, the
manifest); a second engine, built from other initial weights, loads it through the worker's own
``checkpoint_manifest.resolve`` and ``checkpoint.load`` and trains steps 6-11 on the same batches. The oracle is the
uninterrupted run: the same losses and learning rates, exactly (CPU fp32: the same data, weights, optimizer moments
and LR step).

Until 2026-12-02 test_checkpoint.py launched a resume of each engine's session run (DDP and FSDP2 on 2 ranks, DTensor
TP on 4, torch's GPipe on 2, torch_3d on 8); the worker's own ``--resume`` of a DCP checkpoint stays launched there
(the torch_3d checkpoint continued under FSDP2 on one rank). DeepSpeed's engines too since 2026-12-02 (night): ZeRO-2
and ZeRO-3 (dp 4) and its pipeline engine (pp 2 x dp 2, ZeRO-0, gpt2-tiny's tied embedding on both stages), saved
and loaded by DeepSpeed's own ``save_checkpoint``/``load_checkpoint`` through the same two functions, with the
worker's weights-only ``torch.load`` installed as on a DeepSpeed rank; the worker's ``--resume`` of a ZeRO checkpoint
stays launched there (ZeRO-2's and ZeRO-3's continued on one rank through DeepSpeed's universal checkpoint).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from engine_common import ds_adamw, engine_options, step_batches, weight_sum  # beside this script

from dsbench.checkpoints import definition, new_run_id
from dsbench.models import PRESETS
from dsbench.parallel import ParallelDims
from dsbench.worker import checkpoint
from dsbench.worker.checkpoint_manifest import resolve
from dsbench.worker.dist import Collectives, DistInfo
from dsbench.worker.engines import build_engine
from dsbench.worker.model import build_model

WORLD = 4
STEPS, SAVE_AT, LR_WARMUP = 12, 6, 8
"""As the session's launched runs (tests/integration/conftest.py): the LR still ramps at the save, so the schedule
must resume too."""
RESUMES: dict[str, tuple[str, str, dict[str, int], dict[str, Any]]] = {
    # name: (engine, model, degrees on 4 ranks, engine options); the session's layouts on 4 ranks
    "ddp": ("ddp", "llama-tiny", {}, {}),
    "fsdp": ("fsdp", "llama-tiny", {}, {}),
    "hsdp": ("fsdp", "llama-tiny", {"dp_shard": 2}, {}),
    "torch_tp": ("torch_tp", "llama-tiny", {"tp": 2}, {"sequence_parallel": True, "loss_parallel": True}),
    # GPipe on gpt2-tiny: its tied embedding on the first stage and the head on the last
    "torch_pp": ("torch_pp", "gpt2-tiny", {"pp": 2}, {"pipeline_schedule": "gpipe"}),
    # tp 2 x pp 2, interleaved: each rank's two chunks of gpt2-mini's 4 blocks, their Conv1D layers split
    "torch_3d": ("torch_3d", "gpt2-mini", {"tp": 2, "pp": 2}, {"pipeline_schedule": "interleaved",
                                                                "virtual_stages": 2}),
    # pp 2 x FSDP2 over 2 ranks
    "torch_3d_fsdp": ("torch_3d", "llama-tiny", {"pp": 2, "dp_shard": 2}, {}),
    # DeepSpeed's engines, as the session's zero2, zero3 and pipe cells on gpt2-tiny (tests/integration/conftest.py)
    "zero2": ("deepspeed", "gpt2-tiny", {}, {}),
    "zero3": ("deepspeed", "gpt2-tiny", {}, {}),
    "pipe": ("deepspeed", "gpt2-tiny", {"pp": 2}, {}),
}
ZERO_STAGE = {"zero2": 2, "zero3": 3, "pipe": 0}
"""The ZeRO stage of each DeepSpeed resume (the pipeline engine runs at ZeRO-0 or 1; the session's pipe cell at 0)."""


def ds_config(name: str, dims: ParallelDims) -> dict[str, Any]:
    """The DeepSpeed config of a DeepSpeed resume, as dsbench renders one (`dsbench render --zero N
    --warmup-steps 8`, its "auto" filled): AdamW (torch's, no JIT op) clipped at 0.3 as the other engines here,
    DeepSpeed's WarmupLR over LR_WARMUP steps, 2 micro-batches of 2 a step; the pipeline's stages by block."""
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2, "train_batch_size": 2 * 2 * dims.dp,
        "gradient_clipping": 0.3, "zero_optimization": {"stage": ZERO_STAGE[name]},
        "optimizer": ds_adamw(),
        "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-3,
                                                     "warmup_num_steps": LR_WARMUP}}}
    if dims.pp > 1:
        config["pipeline"] = {"stages": dims.pp, "partition_method": "type:BlockPipe", "seed_layers": False,
                              "activation_checkpoint_interval": 0}
    return config


def _build(name: str, info: DistInfo, seed: int) -> tuple[Any, ParallelDims]:
    engine, model, degrees, extra = RESUMES[name]
    dims = ParallelDims(world=WORLD, **degrees)
    if engine == "deepspeed":
        extra = {"ds_config": ds_config(name, dims), "seq_len": 16}
    options = engine_options(dims, grad_clip=0.3, warmup_steps=LR_WARMUP, **extra)
    return build_engine(engine, build_model(PRESETS[model], seed=seed), options, info), dims


def _batches(dims: ParallelDims, rank: int) -> list[list[Any]]:
    """Every step's 2 micro-batches of 2 sequences of 16 tokens: each data-parallel replica its own, the ranks of one
    replica (its tensor- and pipeline-parallel ranks) the same."""
    generator = torch.Generator().manual_seed(dims.dp_rank(rank))
    return [step_batches(generator) for _ in range(STEPS)]


def _steps(engine: Any, batches: list[list[Any]], steps: range) -> list[list[float]]:
    """[loss, lr] of each step, the lr the step ran with."""
    done = []
    for step in steps:
        lr = engine.lr()
        done.append([float(engine.train_step(batches[step])), lr])
    return done


def resume(name: str, info: DistInfo, folder: Path) -> dict[str, Any]:
    """The straight run (saving after SAVE_AT) and the resumed one, for the test to compare."""
    with _deepspeed_groups_put_back():
        return _resume(name, info, folder)


@contextmanager
def _deepspeed_groups_put_back() -> Iterator[None]:
    """DeepSpeed's pipeline engine hands its grid to ``deepspeed.utils.groups`` for the process (engine.py: "Pass
    the mpu from here to groups"), whose data-parallel group a later ZeRO engine would then partition by (2 ranks,
    not 4): put back after, as a rank builds one engine."""
    from deepspeed.utils import groups

    saved = groups.mpu
    try:
        yield
    finally:
        groups.mpu = saved


def _resume(name: str, info: DistInfo, folder: Path) -> dict[str, Any]:
    comm = Collectives(info)
    engine, dims = _build(name, info, seed=0)
    batches = _batches(dims, info.rank)
    _steps(engine, batches, range(SAVE_AT))
    # the manifest as the worker writes it (worker/run.py): seq 16, seed 0, micro-batch 2 x 2 micro-steps per replica
    fields = {"world_size": WORLD, "dp": dims.dp, "tp": dims.tp, "pp": dims.pp, "zero_stage": ZERO_STAGE.get(name),
              "definition": definition({"name": RESUMES[name][1]}, 16, 0, 2 * 2 * dims.dp, "fp32"),
              "run_id": new_run_id() if info.is_main else None}
    target = checkpoint.save(engine, RESUMES[name][0], folder, SAVE_AT, info, fields, comm, lambda hf: None)
    saved_rng, saved_weights = torch.get_rng_state(), weight_sum(engine)
    straight = _steps(engine, batches, range(SAVE_AT, STEPS))
    again, _ = _build(name, info, seed=1)  # other initial weights: a load that missed a tensor shows
    fresh = weight_sum(again)
    torch.manual_seed(12345)  # and another RNG state, which the rank file restores
    located, manifest = resolve(target)
    checkpoint.load(again, RESUMES[name][0], located, manifest, info)
    rng_restored, loaded = torch.equal(torch.get_rng_state(), saved_rng), weight_sum(again)
    return {"straight": straight, "resumed": _steps(again, batches, range(SAVE_AT, STEPS)),
            "rng_restored": rng_restored, "weights": {"fresh": fresh, "saved": saved_weights, "loaded": loaded},
            "storage": manifest.storage, "strategy": manifest.strategy, "engine": RESUMES[name][0]}
