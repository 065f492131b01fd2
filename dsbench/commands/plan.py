"""``dsbench plan``: memory, communication and step time per strategy, before any GPU hour."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from click.core import ParameterSource

from dsbench.commands.base import Command
from dsbench.commands.options import (
    COUNT,
    POSITIVE,
    Finite,
    PerZeroStage,
    checked_profile,
    wide_option,
)
from dsbench.errors import UserError
from dsbench.plan.gpu_layout import ARCHS, KERNELS, PRICED, RECOMPUTE, SCHEDULES
from dsbench.plan.memory import ACCOUNTINGS
from dsbench.plan.request import DEFAULTS, LAYOUT_DEFAULTS


@click.command(cls=Command)
@click.option("--model", help="Model preset, local dir with config.json, or cached hub id.")
@click.option("--params", type=float, help="Parameter count instead of a model (a Llama-like shape is assumed).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="Explain this DeepSpeed config too.")
@click.option("--gpus", type=COUNT, help="Total GPUs (one node unless --nodes).")
@click.option("--nodes", type=COUNT, default=DEFAULTS.nodes, show_default=True)
@click.option("--gpus-per-node", type=COUNT, help="[--gpus over --nodes, else 8]")
@click.option("--gpu", default=DEFAULTS.gpu, show_default=True, help="GPU kind (sets peak TFLOPS and memory), or "
              "custom with --peak-tflops, --gpu-mem and --hbm-tbs.")
@click.option("--gpu-mem", type=POSITIVE, help="Memory per GPU, GiB, as datasheets give it (80 for an 80GB H100) "
              "[from --gpu].")
@click.option("--hbm-tbs", type=POSITIVE, help="With --gpu custom: HBM bandwidth, TB/s (and --peak-tflops, --gpu-mem "
              "as its datasheet gives them; --intra names the link within a node [pcie4]).")
@click.option("--peak-tflops", type=POSITIVE, help="Dense peak per GPU [from --gpu].")
@click.option("--efficiency", type=Finite(0, low_open=True, high=1), default=DEFAULTS.efficiency, show_default=True,
              help="Achievable fraction of peak.")
@click.option("--interconnect", help="Between nodes [the GPU profile's usual network: InfiniBand NDR, 50 GB/s per "
              "GPU, for h100/h200, HDR, 25, for a100; else infiniband].")
@click.option("--intra", help="Within a node [the --gpu's: nvlink4 for h100/h200 SXM, pcie4 for l4/l40s, ...].")
@click.option("--bandwidth", type=POSITIVE, help="Custom inter-node bandwidth, GB/s per GPU.")
@click.option("--latency", type=Finite(0), help="Custom latency, µs (with --layout: per collective ring step).")
@click.option("--zero-host-us", type=PerZeroStage(), help="Your host's DeepSpeed ZeRO-1,2,3 host time per parameter "
              "tensor, µs, for the GPU model (fit it: scripts/fit_gpu_constants.py) [the fastest host measured].")
@click.option("--cpu-adam-rate", type=Finite(0, low_open=True, high=1e13), help="Your host's ZeRO-Offload CPU Adam "
              "rate, parameters per second that a node's ranks share, for the GPU model (fit it: "
              "scripts/fit_gpu_constants.py) [4.79e9, a lent H100's host with one rank].")
@click.option("--seq-len", type=COUNT, help="[min(model max positions, 2048)]")
@click.option("--micro-batch", type=COUNT, default=DEFAULTS.micro_batch, show_default=True)
@click.option("--grad-accum", type=COUNT, default=DEFAULTS.grad_accum, show_default=True)
@click.option("--precision", type=click.Choice(["bf16", "fp16", "fp32", "fp8"]), default=DEFAULTS.precision,
              show_default=True, help="fp8: torchao's Float8 linears (tensorwise), with --layout on a GPU kind that "
              "has an fp8 peak.")
@click.option("--accounting", type=click.Choice(list(ACCOUNTINGS)),
              help="Bytes/param accounting [mixed16 = ZeRO paper's 16; mixed12 = seeds' 12].")
@click.option("--host-mem", type=POSITIVE, default=DEFAULTS.host_mem, show_default=True,
              help="CPU RAM per node, GiB (as `free -g` shows it).")
@click.option("--top", type=COUNT, default=12, show_default=True, help="Rows to show.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@wide_option
@click.option("--verify", is_flag=True, help="Run the top candidates for a few steps and compare with measurements.")
@click.option("--profile", type=click.Path(dir_okay=False), callback=checked_profile,
              help="A machine profile from `dsbench calibrate`: measured compute rate and links instead of datasheet "
              "figures.")
@click.option("--layout", type=click.Choice(PRICED),
              help="Price this one layout on GPUs (the GPU time and memory model) instead of ranking candidates.")
@click.option("--tp", type=COUNT, default=LAYOUT_DEFAULTS.tp, show_default=True, help="With --layout: tensor "
              "parallel degree.")
@click.option("--pipeline-stages", type=COUNT, default=LAYOUT_DEFAULTS.pipeline_stages, show_default=True,
              help="With --layout: pipeline stages.")
@click.option("--pipeline-schedule", type=click.Choice(SCHEDULES), default=LAYOUT_DEFAULTS.pipeline_schedule,
              show_default=True, help="With --layout.")
@click.option("--virtual-stages", type=COUNT, default=LAYOUT_DEFAULTS.virtual_stages, show_default=True,
              help="With --layout and an interleaved --pipeline-schedule: model chunks per stage.")
@click.option("--cp", type=COUNT, default=LAYOUT_DEFAULTS.cp, show_default=True,
              help="With --layout: context parallel degree (ring attention).")
@click.option("--ulysses", type=COUNT, default=LAYOUT_DEFAULTS.ulysses, show_default=True,
              help="With --layout: DeepSpeed Ulysses' sequence-parallel degree (all-to-all around attention).")
@click.option("--global-batch", type=COUNT, help="With --layout: sequences per optimizer step [data parallel x "
              "micro-batch x --grad-accum].")
@click.option("--recompute", type=click.Choice(RECOMPUTE), default=LAYOUT_DEFAULTS.recompute, show_default=True,
              help="With --layout: activation recompute (selective: the attention core; op: per-op checkpointing).")
@click.option("--sequence-parallel", is_flag=True, help="With --layout and --tp: shard norms along the sequence.")
@click.option("--compile", "compiled", is_flag=True, help="With --layout: torch.compile fuses the element-wise ops.")
@click.option("--kernels", type=click.Choice(KERNELS), default=LAYOUT_DEFAULTS.kernels, show_default=True,
              help="With --layout: the non-matmul ops as dsbench's HF modules (hf), torchtitan's (eager), Megatron's.")
@click.option("--attention", type=click.Choice(["flash", "eager"]), default=LAYOUT_DEFAULTS.attention,
              show_default=True, help="With --layout: the attention kernel.")
@click.option("--arch", type=click.Choice(ARCHS), help="With --layout: model family of the shape flags [llama].")
@click.option("--layers", type=COUNT, help="With --layout: transformer blocks (or override the model's).")
@click.option("--hidden", type=COUNT, help="With --layout: hidden size.")
@click.option("--heads", type=COUNT, help="With --layout: attention heads.")
@click.option("--kv-heads", type=COUNT, help="With --layout: key/value heads [--heads].")
@click.option("--head-dim", type=COUNT, help="With --layout: one head's width, where it is not hidden / heads "
              "(Mistral-Nemo: 128 on 5120 / 32) [the model's, else hidden / heads].")
@click.option("--ffn", type=COUNT, help="With --layout: MLP width [4 x hidden for gpt, Llama's 8/3 rule].")
@click.option("--vocab", type=COUNT, help="With --layout: vocabulary size.")
@click.option("--tokens", type=POSITIVE, help="Tokens to train: days and GPU-hours (of the layout, or of the "
              "recommendation and the runner-up).")
@click.option("--price-per-gpu-hour", type=POSITIVE, help="With --tokens: the cost.")
@click.option("--write", "write_dir", type=click.Path(file_okay=False), metavar="DIR",
              help="Write the recommendation's DeepSpeed config and accelerate YAML into DIR (a new folder).")
@click.option("--replay", is_flag=True,
              help="Predict the published runs in FILE.csv ... (the oracle schema, docs/planner.md) and print "
              "predicted vs measured step time and memory.")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False), metavar="[FILE.csv]...")
def plan(top: int, as_json: bool, wide: bool, verify: bool, config_file: str | None, replay: bool,
         files: tuple[str, ...], write_dir: str | None, **opts: Any) -> None:
    """Estimate memory, communication, bubble and step time per strategy, and recommend one; with --layout,
    price one explicit layout on GPUs; with --replay, predict published GPU-cluster runs and compare."""
    if replay or files:
        _replay(replay, files, as_json, wide, opts.get("profile"))
        return
    _one_gpu_source(opts.get("profile"))
    _refuse_conflicts(opts, write_dir, config_file, verify)
    layout_opts = {name: opts.pop(name) for name in LAYOUT_ONLY}
    if opts["layout"] is not None:
        _layout(opts, layout_opts, as_json)
        return
    opts.pop("layout")
    _no_layout_flags(layout_opts)
    if verify and not opts.get("model"):
        raise UserError("--verify runs the candidates: give --model (a model the worker can build), not --params")
    _rank(opts, config_file, verify, write_dir, top, as_json, wide)


def _refuse_conflicts(opts: dict[str, Any], write_dir: str | None, config_file: str | None, verify: bool) -> None:
    """Flags that belong to another kind of plan: a custom GPU's, the ranking's (beside --layout)."""
    if opts["hbm_tbs"] is not None and opts["gpu"] != "custom":
        raise UserError("--hbm-tbs is a custom GPU's figure: add --gpu custom (with --peak-tflops and --gpu-mem), or "
                        "drop it")
    if write_dir and opts["layout"] is not None:
        raise UserError("--write writes the ranking's recommendation: drop --layout (its command is printed)")
    if opts["layout"] is not None and (config_file or verify):
        raise UserError(f"--{'config' if config_file else 'verify'} does not apply to --layout (it prices one "
                        "layout on GPUs; --verify runs the ranking's candidates here)")


CONFIG_SETS = {"micro_batch": ("--micro-batch", "micro-batch", "train_micro_batch_size_per_gpu"),
               "grad_accum": ("--grad-accum", "accumulation", "its batch keys"),
               "precision": ("--precision", "precision", "its fp16/bf16 sections")}
"""The flags a --config's own batch and precision replace: the flag, what it sets, and where the config sets it."""


def _config_wins(config_file: str, opts: dict[str, Any], workload: dict[str, Any]) -> None:
    """A batch or precision flag typed beside a --config that sets another value is refused, as ``dsbench launch``
    refuses it: the plan prices the config's (until 2026-12-01 it ignored the flag without a word)."""
    ctx = click.get_current_context()
    for name, (flag, what, where) in CONFIG_SETS.items():
        typed = ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
        if typed and opts[name] != workload[name]:
            raise UserError(f"--config {config_file} gives {what} {workload[name]} ({where}), so {flag} {opts[name]} "
                            f"would be ignored: drop {flag}, or change the config")


def _rank(opts: dict[str, Any], config_file: str | None, verify: bool, write_dir: str | None, top: int,
          as_json: bool, wide: bool) -> None:
    """The ranking: every candidate priced, the best recommended; with --verify the top ones run here, with
    --write the recommendation's files written."""
    from dsbench.plan.api import plan as make_plan
    from dsbench.plan.request import PlanRequest
    from dsbench.report.tables import print_plan

    make_request = PlanRequest(config=config_file, **opts)
    result = make_plan(make_request)
    if config_file:
        _config_wins(config_file, opts, result["workload"])
    if verify:
        from dsbench.bench.verify import verify as run_verify

        verified = run_verify(result, opts)
        result["verify"] = [row.to_dict() for row in verified]
    if write_dir:
        from dsbench.commands.plan_write import write_recommendation

        result["written"] = write_recommendation(write_dir, result, make_request.model)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        print_plan(result, top, wide)
        for path in result.get("written", []):
            click.echo(f"wrote {path}")
        if verify:
            from dsbench.report.tables import print_verify

            print_verify(verified, result["cluster"]["profile"], wide)
    if result["recommendation"] is None:  # an answer, but not one to launch: exit 1, as a script's `plan && ...` reads
        sys.exit(1)


def _one_gpu_source(profile: Any) -> None:
    """A profile calibrated on a GPU names the GPU: refuse a --gpu beside it (one line)."""
    ctx = click.get_current_context()
    given = ctx.get_parameter_source("gpu") is click.core.ParameterSource.COMMANDLINE
    if profile is not None and profile.data.get("gpu") and given:
        raise UserError(f"--gpu and --profile {profile.path} (measured on {profile.data['gpu'].get('name')}) both "
                        "name the GPU: drop one")


LAYOUT_ONLY = ("tp", "pipeline_stages", "pipeline_schedule", "virtual_stages", "cp", "ulysses", "global_batch",
               "recompute",
               "sequence_parallel", "compiled", "kernels", "attention", "arch", "layers", "hidden", "heads",
               "kv_heads", "head_dim", "ffn", "vocab")


def _no_layout_flags(layout_opts: dict[str, Any]) -> None:
    """Refuse a layout flag given without --layout (one line naming it)."""
    ctx = click.get_current_context()
    for name in LAYOUT_ONLY:
        if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE:
            flag = "--compile" if name == "compiled" else f"--{name.replace('_', '-')}"
            raise UserError(f"{flag} goes with --layout NAME (the explicit layout); the ranking of candidates "
                            "chooses its own")
    if ctx.params.get("precision") == "fp8":
        raise UserError("--precision fp8 prices torchao's Float8 linears in one --layout NAME on the GPU model; the "
                        "ranking plans bf16, fp16 or fp32")


def _layout(opts: dict[str, Any], layout_opts: dict[str, Any], as_json: bool) -> None:
    from dataclasses import fields

    from dsbench.plan.explicit import predict_layout
    from dsbench.plan.request import LayoutRequest

    ctx = click.get_current_context()
    given_accum = ctx.get_parameter_source("grad_accum") is click.core.ParameterSource.COMMANDLINE
    accum = opts["grad_accum"] if given_accum else None  # its default (8) is the ranking's, not a layout's
    profile = opts.get("profile")
    if profile is not None and not profile.data.get("gpu"):
        raise UserError(f"--profile {profile.path} measured CPU ranks; --layout prices GPUs (give a profile that "
                        "dsbench calibrate wrote on a CUDA GPU, or drop --profile)")
    custom = ("peak_tflops", "gpu_mem") if opts["gpu"] == "custom" else ()
    for name in ("peak_tflops", "efficiency", "gpu_mem", "accounting", "host_mem", "top"):
        if name not in custom and ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE:
            raise UserError(f"--{name.replace('_', '-')} does not apply to --layout (the GPU model takes its figures "
                            "from the --gpu profile; --interconnect, --intra, --bandwidth and --latency override its "
                            "links)")
    known = {f.name for f in fields(LayoutRequest)}
    given = {**{k: v for k, v in opts.items() if k in known}, **layout_opts, "grad_accum": accum,
             "compile": layout_opts["compiled"]}
    request = LayoutRequest(**{k: v for k, v in given.items() if k in known and v is not None})
    result = predict_layout(request)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        from dsbench.report.layout_table import print_layout

        print_layout(result)


REPLAY_FLAGS = ("replay", "files", "as_json", "wide", "profile")
"""What --replay reads; every other plan option is refused beside it (each row carries its own inputs)."""


def _replay(flag: bool, files: tuple[str, ...], as_json: bool, wide: bool, profile: Any) -> None:
    if not flag:
        raise UserError(f"{files[0]}: a file is read only with --replay (dsbench plan --replay FILE.csv ...)")
    if not files:
        raise UserError("--replay needs one or more CSV files in the oracle schema (docs/planner.md)")
    ctx = click.get_current_context()
    for param in ctx.command.params:
        if param.name not in REPLAY_FLAGS and ctx.get_parameter_source(param.name) is ParameterSource.COMMANDLINE:
            raise UserError(f"{param.opts[0]} does not apply to --replay (each row names its model, GPU and layout):"
                            " drop it")
    calibrated = None
    if profile is not None:
        if not profile.data.get("gpu"):
            raise UserError(f"--profile {profile.path} measured CPU ranks; --replay prices GPUs (give a profile that "
                            "dsbench calibrate wrote on a CUDA GPU, or drop --profile)")
        from dsbench.plan.gpu_calibration import calibrated_gpu

        calibrated = calibrated_gpu(profile.data["gpu"], profile.path)
    from dsbench.plan.replay import as_json as replay_json
    from dsbench.plan.replay import replay

    result = replay_json(replay(list(files), calibrated))
    if calibrated is not None:
        result["profile"] = {"path": profile.path, "kind": calibrated.kind}
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        from dsbench.report.replay_table import print_replay

        if calibrated is not None:
            click.echo(f"Rows on {calibrated.kind} priced with {profile.path}'s measured constants; other rows with "
                       "the shipped profiles.")
        print_replay(result, wide)


COMMAND = plan
