"""The worker's command line: the one parser of its flags into :class:`~dsbench.trainspec.TrainSpec` fields.

Every rank parses its own argv here (``python -m dsbench.train``: a ``--run-json`` file first, then the flags typed
beside it, which win), and ``dsbench launch`` parses the user's flags after ``--`` here too, once, before any
process starts. Every default is suppressed, so only what was typed reaches the spec; the defaults are the
dataclass's.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any

from dsbench import __version__
from dsbench.errors import UserError
from dsbench.trainspec import RECOMPUTE, SCHEDULES, STRATEGIES, TrainSpec, from_dict, load


def parser() -> argparse.ArgumentParser:
    """The worker's flags; every default is suppressed so that only what was given reaches the spec."""
    p = _Parser(prog="python -m dsbench.train", argument_default=argparse.SUPPRESS,
                description="The dsbench training worker (started on every rank by a launcher).")
    p.add_argument("--run-json", metavar="FILE", help="a run description written by `dsbench launch` (flags override)")
    p.add_argument("--strategy", choices=STRATEGIES, help=_doc("strategy"))
    p.add_argument("--deepspeed_config", "--deepspeed-config", dest="deepspeed_config", help=_doc("deepspeed_config"))
    p.add_argument("--local_rank", "--local-rank", type=int, help=argparse.SUPPRESS)  # set by the launchers
    p.add_argument("--model", help=_doc("model"))
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--dataset", help=_doc("dataset"))
    p.add_argument("--text-field")
    for name in ("seq_len", "micro_batch", "grad_accum", "steps", "warmup", "lr_warmup_steps", "seed",
                 "gather_every", "pipeline_stages", "tp", "save_every", "virtual_stages", "dp_shard"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, help=_doc(name))
    for name in ("lr", "weight_decay", "grad_clip", "peak_tflops", "dist_timeout"):
        p.add_argument(f"--{name.replace('_', '-')}", type=float, help=_doc(name))
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], help=_doc("precision"))
    p.add_argument("--pipeline-schedule", choices=SCHEDULES, help=_doc("pipeline_schedule"))
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument("--recompute", choices=RECOMPUTE, help=_doc("recompute"))
    p.add_argument("--sequence-parallel", action="store_true", help=HELP["sequence_parallel"])
    p.add_argument("--loss-parallel", action="store_true", help=HELP["loss_parallel"])
    p.add_argument("--compile", action="store_true", help=HELP["compile"])
    p.add_argument("--fused-optimizer", action="store_true", help=HELP["fused_optimizer"])
    p.add_argument("--fsdp-reshard", action=argparse.BooleanOptionalAction, help=_doc("fsdp_reshard"))
    p.add_argument("--fsdp-cpu-offload", action="store_true")
    p.add_argument("--out", help=_doc("out"))
    p.add_argument("--checkpoint-dir", help=_doc("checkpoint_dir"))
    p.add_argument("--resume", metavar="CHECKPOINT", help=_doc("resume"))
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.add_argument("--summary-line", action=argparse.BooleanOptionalAction, help=_doc("summary_line"))
    p.add_argument("--version", action="version", version=f"dsbench {__version__}")
    return p


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are dsbench's one-line errors (exit 2), in the worker and in `launch`."""

    def error(self, message: str) -> Any:
        raise UserError(message)


HELP = {
    "strategy": "auto: deepspeed when a DeepSpeed config is given (or by accelerate), else ddp/single",
    "deepspeed_config": "DeepSpeed JSON config (its batch, optimizer and precision win)",
    "model": "preset, local dir with config.json, or cached hub id",
    "dataset": "local text/json/jsonl/parquet/csv file or folder (default: embedded corpus)",
    "micro_batch": "samples per rank per micro-step (a DeepSpeed config's value wins)",
    "grad_accum": "micro-steps per optimizer step (a DeepSpeed config's value wins)",
    "warmup": "steps excluded from the summary",
    "precision": "native strategies, and 'auto' in a DeepSpeed config (default: accelerate's mixed_precision, else "
                 "fp32)",
    "fsdp_reshard": "FSDP2 reshard_after_forward",
    "summary_line": "rank 0 prints the run's figures in one line at its end",
    "peak_tflops": "per-rank peak for MFU (default: detected)",
    "out": "run directory for metrics.jsonl and summary.json",
    "gather_every": "steps between gathers of per-step metrics across ranks (each is one host-device sync)",
    "pipeline_stages": "pipeline stages of --strategy torch_pp or torch_3d",
    "pipeline_schedule": "torch_pp schedule",
    "virtual_stages": "model chunks per rank with --pipeline-schedule interleaved or interleaved-zb",
    "recompute": "what the backward recomputes: none, full (every block), selective (the attention core), "
                 "selective-op (torch's selective checkpointing: matmul outputs saved)",
    "tp": "tensor-parallel degree of --strategy torch_tp or torch_3d",
    "dp_shard": "fsdp, torch_3d: data-parallel ranks in one FSDP2 shard group (0: all; between: HSDP; 1: replicas)",
    "sequence_parallel": "torch_tp: norms on a sequence shard; TP's all-reduces become reduce-scatter + all-gather",
    "loss_parallel": "torch_tp: logits split by vocabulary into the loss (untied output layer)",
    "save_every": "save a checkpoint every N steps into --checkpoint-dir (0: only after the last step)",
    "compile": "torch.compile every transformer block (deepspeed: engine.compile()); compiles in the warm-up steps",
    "fused_optimizer": "torch AdamW fused=True (not deepspeed: its optimizer is its config's)",
    "checkpoint_dir": "checkpoint folder (DeepSpeed's layout: latest + global_stepN/)",
    "resume": "continue from a checkpoint folder (its latest) or one global_stepN folder",
}


def _doc(name: str) -> str:
    """--help text for a field, with its default."""
    default = next(f.default for f in fields(TrainSpec) if f.name == name)
    return HELP.get(name, "") + (f" [{default}]" if default is not None else "")


def from_argv(argv: list[str]) -> TrainSpec:
    """The spec from worker flags: ``--run-json FILE`` first if given, then every flag given on the command line."""
    return worker_run(argv)[0]


def worker_run(argv: list[str]) -> tuple[TrainSpec, dict[str, Any]]:
    """The spec from worker flags (:func:`from_argv`) and the flags typed on the command line beside ``--run-json``
    (:func:`given_flags`' form, which the rank checks against its config), from one parse."""
    given, run_json = _typed(argv)
    base = load(run_json) if run_json is not None else {}
    return from_dict({**base, **given}, "the worker's flags"), given


def _typed(argv: tuple[str, ...] | list[str]) -> tuple[dict[str, Any], str | None]:
    """The worker flags as typed (the parser's defaults are suppressed, so only what was given), less the
    launchers' ``--local_rank``, and the ``--run-json`` file apart."""
    given = vars(parser().parse_args(list(argv)))
    given.pop("local_rank", None)
    return given, given.pop("run_json", None)


def for_launch(given: dict[str, Any], decided: dict[str, Any]) -> TrainSpec:
    """The run ``dsbench launch`` hands every rank: the fields it decided (``decided``: run folder, model, strategy,
    config, the native engines' flags) under the worker flags the user gave after ``--`` (``given``: parsed once,
    by :func:`given_flags`), which win where both say; the ranks read the result from run.json."""
    return from_dict({**decided, **given}, "the worker's flags")


def given_flags(user_args: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """The worker flags the user typed after ``--``, as TrainSpec fields (the parser's defaults are suppressed, so
    only what was typed); a ``--run-json`` is refused by launch before it gets here (launch_request.check_request)."""
    return _typed(user_args)[0]
