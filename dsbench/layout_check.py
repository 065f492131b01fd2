"""The one check of a run's layout against its model and options (stdlib only): ``dsbench launch`` makes it before any
process starts (dsbench/launch_checks.py), and every rank makes it again when it resolves its run
(dsbench/worker/resolve.py), from the same function, so a launch and a rank started by hand refuse the same runs in
the same words."""

from __future__ import annotations

from dsbench import trainspec
from dsbench.errors import UserError
from dsbench.model_checks import check_loss_parallel, check_tensor_parallel, check_ulysses
from dsbench.models import ModelShape
from dsbench.parallel import ParallelDims


def check_run_layout(train: trainspec.TrainSpec, strategy: str, shape: ModelShape, dims: ParallelDims) -> None:
    """The model splits as ``dims`` asks (whole heads per TP rank, a layer per stage), its family takes the tensor
    and sequence parallelism asked for, the interleaved chunks divide its layers, and --compile fits the layout.
    ``strategy`` is the run's (a rank resolves accelerate's ``auto``). Before it, the sequence fits the model's
    positions."""
    if train.seq_len > shape.max_positions:
        raise UserError(f"--seq-len {train.seq_len} exceeds {shape.name}'s {shape.max_positions} positions")
    dims.check_model(name=shape.name, heads=shape.heads, kv_heads=shape.kv_heads, layers=shape.layers)
    if train.compile and strategy == "deepspeed" and dims.model_parallel > 1:
        what = ("pipeline engine (pipeline.stages)" if dims.pp > 1 else "AutoTP (tensor_parallel.autotp_size)"
                if dims.tp > 1 else "Ulysses (sequence_parallel_size)")
        raise UserError(f"--compile is not supported with DeepSpeed's {what}: dsbench compiles the ZeRO engine "
                        "only; drop --compile")
    megatron = strategy if strategy in trainspec.TENSOR_SPLIT else None
    check_tensor_parallel(shape.arch, dims.tp, megatron)
    if megatron and dims.tp > 1:
        check_loss_parallel(train.loss_parallel, shape.tied_embeddings, shape.name)
    check_ulysses(dims.sp, train.seq_len, shape.sliding_window())
    if train.pipeline_schedule in trainspec.INTERLEAVED:
        check_chunks(shape, dims.pp, train.virtual_stages)


def check_chunks(shape: ModelShape, stages: int, virtual_stages: int) -> None:
    """An interleaved schedule gives each of the ``stages`` ranks ``virtual_stages`` equal chunks of the layers."""
    if shape.layers % (stages * virtual_stages):
        raise UserError(f"--virtual-stages {virtual_stages} does not divide {shape.name}'s {shape.layers} layers into "
                        f"{stages} stages x {virtual_stages} equal chunks")
