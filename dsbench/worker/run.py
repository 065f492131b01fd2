"""One training run on this rank: dist -> model -> data -> engine -> loop -> metrics."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsbench import checkpoints
from dsbench.dataset_files import dataset_files
from dsbench.errors import DsbenchError, UserError
from dsbench.io import atomic_write_json
from dsbench.models import ModelShape
from dsbench.parallel import ParallelDims
from dsbench.records import METRICS, SUMMARY, CheckpointRecord, EndRecord, summarize
from dsbench.run_record import RunSummary
from dsbench.trainspec import TrainSpec
from dsbench.worker import checkpoint, checkpoint_manifest, safe_load, setup, stop
from dsbench.worker.cpuanswer import ask_the_cpu_once
from dsbench.worker.header import header_record
from dsbench.worker.prepared import Prepared, Resumed
from dsbench.worker.resolve import resolve
from dsbench.zero_section import zero_settings

if TYPE_CHECKING:  # the worker's torch-side types, for the annotations only
    from dsbench.worker.data import BatchPlan
    from dsbench.worker.dist import DistInfo
    from dsbench.worker.engines import EngineOptions
    from dsbench.worker.loop import LoopSettings


class Progress:
    """Rank-0 progress: a tqdm bar on a terminal, a line every ~10% otherwise, nothing with --quiet."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total, self.quiet = total, quiet
        self.bar = None
        if not quiet and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="step", dynamic_ncols=True)

    def update(self, record: dict[str, Any]) -> None:
        text = f"loss {record['loss']:.4f}  {record['timed_tokens_per_s']:,.0f} tok/s (timed region)"
        warm = "  (warm-up: not in the run's figures)" if record["warmup"] else ""
        if self.bar is not None:
            self.bar.set_postfix_str(text + warm, refresh=False)
            self.bar.update(1)
        elif not self.quiet and (record["step"] % max(1, self.total // 10) == 0 or record["step"] == self.total - 1):
            print(f"step {record['step'] + 1}/{self.total}  {text}  {record['step_time_s'] * 1e3:.1f} ms/step{warm}",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _run_dir(spec: TrainSpec, strategy: str) -> Path:
    folder = Path(spec.out or f"runs/train-{strategy}-{time.strftime('%Y%m%d-%H%M%S')}")
    if (folder / METRICS).exists():
        raise UserError(f"{folder / METRICS} exists: choose a new --out (dsbench never overwrites measurements)")
    return folder


def prepare(spec: TrainSpec, typed: Mapping[str, Any] | None = None) -> Prepared:
    """Set-up: strategy, config, process group, data plan, model and engine."""
    from dsbench.worker import dist
    from dsbench.worker.data import build_plan, load_tokenizer, token_ids
    from dsbench.worker.engines import build_engine
    from dsbench.worker.model import build_model

    _, world, _ = dist.env_rank()
    # the checkpoint paths and the dataset's files first: read from disk alone (no torch), so a mistyped --resume or
    # an empty --dataset is refused in a fraction of a second rather than after the seconds of importing torch that
    # the steps below take (the data plan reads these files, through `datasets`)
    resumed = _resumed_checkpoint(spec)
    found = dataset_files(spec.dataset) if spec.dataset else None
    run = resolve(spec, world, os.environ, typed)  # the run as it will execute on this rank, checked once
    # every torch.load of this rank (DeepSpeed's resume, ds_to_universal) loads data only; DeepSpeed's own
    # checkpoint classes are imported for DeepSpeed's runs only (importing DeepSpeed costs each rank seconds)
    safe_load.install(deepspeed=run.strategy == "deepspeed")
    strategy, shape, dims, ds_config = run.strategy, run.shape, run.dims, run.ds_config
    micro, accum, precision, fsdp = run.micro_batch, run.grad_accum, run.precision, run.fsdp
    info = _join(strategy, spec.dist_timeout)
    folder = _run_dir(spec, strategy) if info.is_main else None
    hostnames = dist.Collectives(info).all_gather_object(socket.gethostname())  # sync point: where each rank runs
    tokenizer = load_tokenizer(shape.path if shape.source != "preset" else None)
    plan = build_plan(token_ids(tokenizer, spec.dataset, spec.text_field, found), spec.seq_len, spec.seed, micro,
                      accum, dims.dp)
    checkpointing = fsdp["activation_checkpointing"] if fsdp else spec.activation_checkpointing
    model = build_model(shape, spec.seed, spec.trust_remote_code, checkpointing, spec.recompute)
    settings = _loop_settings(spec, dims, resumed)
    universal, options = _check_resume(resumed, strategy, _definition(shape, spec, plan, precision), dims, info,
                                       run.options)
    engine = build_engine(strategy, model, options, info)
    if resumed:
        checkpoint.load(engine, strategy, *resumed, info, universal=universal)
    return Prepared(strategy=strategy, shape=shape, ds_config=ds_config, info=info, plan=plan, engine=engine,
                    precision=precision, dims=dims, fsdp=fsdp, settings=settings, folder=folder, hostnames=hostnames,
                    model=model, tokenizer=tokenizer, resumed=resumed)


def _join(strategy: str, timeout: float) -> DistInfo:
    """This rank in the process group (:func:`dist.init`), DeepSpeed's JIT builds and CPU query set up before."""
    from dsbench.worker import dist
    from dsbench.worker.loop import fault_before_join

    if strategy == "deepspeed":
        setup.guard_jit_builds()  # before init_distributed, which builds DeepSpeed's comm op on CPU
        ask_the_cpu_once()  # before DeepSpeed loads its first op: py-cpuinfo asked once per CPU, not once per call
    fault_before_join(dist.env_rank()[0])
    info = dist.init(strategy, timeout)
    if strategy == "deepspeed" and info.device.startswith("cuda"):
        setup.check_cuda_arch_list()
    return info


def _resumed_checkpoint(spec: TrainSpec) -> Resumed | None:
    """(tag folder, Manifest) of the checkpoint ``--resume`` names, checked (a file naming a callable is refused
    here) against the steps asked for, or None; the ``--checkpoint-dir`` made ready for this run's saves."""
    resumed = checkpoint_manifest.resolve(spec.resume) if spec.resume else None
    if spec.checkpoint_dir:
        checkpoints.prepare_dir(Path(spec.checkpoint_dir), resumed[1] if resumed else None)
    if resumed:
        checkpoints.check_steps(*resumed, spec.steps, spec.warmup)
    return resumed


def _loop_settings(spec: TrainSpec, dims: ParallelDims, resumed: Resumed | None) -> LoopSettings:
    """The loop's steps (from the resumed step on), warm-up and saves; the disk checked for every save due."""
    from dsbench.worker.loop import LoopSettings, saves_after

    settings = LoopSettings(steps=spec.steps, warmup=spec.warmup, seq_len=spec.seq_len, dims=dims,
                            gather_every=spec.gather_every, start=resumed[1].step if resumed else 0,
                            save_every=spec.save_every, save_last=bool(spec.checkpoint_dir))
    if spec.checkpoint_dir:
        checkpoints.check_free(Path(spec.checkpoint_dir), [s + 1 for s in range(settings.start, settings.steps)
                                                          if saves_after(s, settings)])
    return settings


def _check_resume(resumed: Resumed | None, strategy: str, definition: dict[str, Any], dims: ParallelDims,
                  info: DistInfo, options: EngineOptions) -> tuple[Path | None, EngineOptions]:
    """Refuse a resume that could not continue the run; when DeepSpeed needs the checkpoint's universal form,
    convert it and return it with the engine options that load it (``checkpoint.load_universal``, read when the
    engine is built)."""
    if not resumed or not checkpoints.check_resumable(resumed[1], strategy, definition, dims.world, tp=dims.tp,
                                                     pp=dims.pp):
        return None, options
    config = options.ds_config
    return _converted(resumed[0], info), replace(options, ds_config={
        **config, "checkpoint": {**config.get("checkpoint", {}), "load_universal": True}})


def _converted(target: Path, info: DistInfo) -> Path:
    """Rank 0 converts the DeepSpeed checkpoint to its universal form; every rank learns whether it worked."""
    from dsbench.worker.dist import Collectives

    problem = None
    if info.is_main:
        try:
            checkpoint.to_universal(target)
        except DsbenchError as exc:
            problem = exc
    # sync point: rank 0's conversion is complete (or has failed) before any rank loads or gives up
    failed = Collectives(info).all_gather_object(str(problem) if problem else None)[0]
    if problem:
        raise problem
    if failed:
        raise UserError(failed)
    return checkpoint.universal_path(target)


def _definition(shape: ModelShape, spec: TrainSpec, plan: BatchPlan, precision: str) -> dict[str, Any]:
    """What a checkpoint must share with the run resuming it (checkpoints.MUST_MATCH)."""
    return checkpoints.definition(shape.to_dict(), spec.seq_len, spec.seed, plan.global_batch, precision)


def _saver(spec: TrainSpec, run: Prepared) -> Any:
    """The loop's ``save(steps_done)``: a collective checkpoint, timed, as a CheckpointRecord."""
    from dsbench.worker.dist import Collectives

    if not spec.checkpoint_dir:
        return None
    folder, comm = Path(spec.checkpoint_dir), Collectives(run.info)
    zero = zero_settings(run.ds_config).stage if run.ds_config else None
    fields = {"world_size": run.info.world_size, "dp": run.dims.dp, "tp": run.dims.tp, "pp": run.dims.pp,
              "zero_stage": zero, "definition": _definition(run.shape, spec, run.plan, run.precision),
              # a resumed run goes on as the run it continues: its checkpoints are that run's (prepare_dir)
              "run_id": (run.resumed[1].run_id if run.resumed else None) or checkpoints.new_run_id()}
    hf_files = checkpoint.copy_hf_files(run.model, run.tokenizer)

    def save(step: int) -> dict[str, Any]:
        started = time.perf_counter()
        with stop.unwatched():  # a large checkpoint may take longer than --dist-timeout
            target = checkpoint.save(run.engine, run.strategy, folder, step, run.info, fields, comm, hf_files)
        seconds = time.perf_counter() - started
        size = sum(f.stat().st_size for f in target.rglob("*") if f.is_file()) if run.info.is_main else 0
        return CheckpointRecord(step=step, path=str(target), seconds=seconds, bytes=size).to_dict()

    return save


def _interrupted(writer: Any, folder: Path, signal_name: str) -> None:
    """Rank 0, told to stop (the stop watcher's thread): an end record naming the last step written and a summary
    saying the run was interrupted; every line already in metrics.jsonl stays. The end record is written under the
    writer's lock (:meth:`JsonlWriter.close_with`): a gather the training thread writes at the same moment is either
    on disk before it and counted, or not written (until 2026-12-01 the end record could name the step before the
    last one on disk: the training thread had written a gather but not yet listed it)."""
    def end(written: list[dict[str, Any]]) -> list[dict[str, Any]]:
        last = max((r["step"] for r in written if r.get("type") == "step"), default=0)
        return [EndRecord(status="interrupted", signal=signal_name, last_step=last).to_dict()]

    written = writer.close_with(end)
    last_step = end(written)[0]["last_step"]
    atomic_write_json(folder / SUMMARY, {**summarize(written), "status": "interrupted",
                                         "reason": f"stopped by {signal_name} after step {last_step}"})


def _check_replicas(run: Prepared, emit: Any) -> None:
    """Every rank compares its data-parallel copy after the last step (a collective); rank 0 (``emit``) records it."""
    from dsbench.worker.dist import Collectives
    from dsbench.worker.replicas import replica_record

    replicas = replica_record(run.engine, Collectives(run.info))
    if replicas is not None and emit is not None:
        emit([replicas])
        if not replicas["agree"]:
            print(f"warning: the data-parallel replicas differ after the last step (ranks "
                  f"{replicas['differing_ranks']} against their groups' first rank)", file=sys.stderr, flush=True)


def record(spec: TrainSpec, run: Prepared) -> None:
    """Recording: train through the loop; rank 0 writes the header, every gather's records and the summary."""
    from dsbench.worker.loop import train_loop
    from dsbench.worker.metrics import JsonlWriter

    folder = run.folder
    writer = JsonlWriter(folder / METRICS) if folder else None
    progress = Progress(spec.steps, spec.quiet or not run.info.is_main)

    def emit(batch: list[dict[str, Any]]) -> None:
        if writer:
            writer.write_many(batch)  # one flush per gather; the writer keeps what it wrote (writer.written)
        for item in batch:
            if item["type"] == "step":
                progress.update(item)

    if folder:
        emit([header_record(spec, run, folder)])
        stop.on_stop(lambda name: _interrupted(writer, folder, name))
    stop.watch(spec.dist_timeout)
    train_loop(run.engine, run.plan, run.info, run.settings, emit, _saver(spec, run))
    progress.close()
    _check_replicas(run, emit if writer else None)
    if writer and folder:
        writer.close()
        summary = summarize(writer.written)
        atomic_write_json(folder / SUMMARY, summary)
        if spec.prints_summary:  # not under a launch that prints them itself (LaunchSpec.rank_prints_summary)
            record = RunSummary.from_dict(summary, str(folder / SUMMARY))
            print(f"run: {folder}  loss {summary['first_loss']:.4f} -> {record.final_loss:.4f}  {record.measured()}"
                  f"{record.skipped_note()}", file=sys.stderr, flush=True)


def run(spec: TrainSpec, typed: Mapping[str, Any] | None = None) -> int:
    """Set up, train and record; returns the exit code. ``typed``: the worker flags typed on the command line."""
    from dsbench.worker import dist

    record(spec, prepare(spec, typed))
    dist.shutdown()
    return 0
