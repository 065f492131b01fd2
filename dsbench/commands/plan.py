"""``dsbench plan``: memory, communication and step time per strategy, before any GPU hour."""

from __future__ import annotations

import json
from typing import Any

import click

from dsbench.commands.base import Command
from dsbench.commands.options import (
    COUNT,
    POSITIVE,
    Finite,
    checked_profile,
)
from dsbench.plan.request import DEFAULTS


@click.command(cls=Command)
@click.option("--model", help="Model preset, local dir with config.json, or cached hub id.")
@click.option("--params", type=float, help="Parameter count instead of a model (a Llama-like shape is assumed).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="Explain this DeepSpeed config too.")
@click.option("--gpus", type=COUNT, help="Total GPUs (one node unless --nodes).")
@click.option("--nodes", type=COUNT, default=DEFAULTS.nodes, show_default=True)
@click.option("--gpus-per-node", type=COUNT, help="[--gpus on one node, else 8]")
@click.option("--gpu", default=DEFAULTS.gpu, show_default=True, help="GPU kind (sets peak TFLOPS and memory).")
@click.option("--gpu-mem", type=POSITIVE, help="GB per GPU [from --gpu].")
@click.option("--peak-tflops", type=POSITIVE, help="Dense peak per GPU [from --gpu].")
@click.option("--efficiency", type=Finite(0, low_open=True, high=1), default=DEFAULTS.efficiency, show_default=True,
              help="Achievable fraction of peak.")
@click.option("--interconnect", default=DEFAULTS.interconnect, show_default=True, help="Between nodes.")
@click.option("--intra", help="Within a node [nvlink4 for h100/h200, else nvlink].")
@click.option("--bandwidth", type=POSITIVE, help="Custom inter-node bandwidth, GB/s per GPU.")
@click.option("--latency", type=Finite(0), help="Custom latency, µs.")
@click.option("--seq-len", type=COUNT, help="[min(model max positions, 2048)]")
@click.option("--micro-batch", type=COUNT, default=DEFAULTS.micro_batch, show_default=True)
@click.option("--grad-accum", type=COUNT, default=DEFAULTS.grad_accum, show_default=True)
@click.option("--precision", type=click.Choice(["bf16", "fp16", "fp32"]), default=DEFAULTS.precision,
              show_default=True)
@click.option("--accounting", type=click.Choice(["mixed16", "mixed12", "fp32", "fp32_deepspeed"]),
              help="Bytes/param accounting [mixed16 = ZeRO paper's 16; mixed12 = seeds' 12].")
@click.option("--host-mem", type=POSITIVE, default=DEFAULTS.host_mem, show_default=True, help="CPU RAM per node, GB.")
@click.option("--top", type=COUNT, default=12, show_default=True, help="Rows to show.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--verify", is_flag=True, help="Run the top candidates for a few steps and compare with measurements.")
@click.option("--profile", type=click.Path(dir_okay=False), callback=checked_profile,
              help="A machine profile from `dsbench calibrate`: measured compute rate and links instead of datasheet "
              "figures.")
@click.option("--replay", is_flag=True,
              help="Predict the published runs in FILE.csv ... (the oracle schema, docs/planner.md) and print "
              "predicted vs measured step time and memory.")
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False), metavar="[FILE.csv]...")
def plan(top: int, as_json: bool, verify: bool, config_file: str | None, replay: bool, files: tuple[str, ...],
         **opts: Any) -> None:
    """Estimate memory, communication, bubble and step time per strategy, and recommend one; with --replay,
    predict published GPU-cluster runs and compare."""
    if replay or files:
        _replay(replay, files, as_json)
        return
    from dsbench.plan.api import plan as make_plan
    from dsbench.plan.request import PlanRequest
    from dsbench.report.tables import print_plan

    result = make_plan(PlanRequest(config=config_file, **opts))
    if verify:
        from dsbench.bench.verify import verify as run_verify

        result["verify"] = run_verify(result, opts)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        print_plan(result, top)
        if verify:
            from dsbench.report.tables import print_verify

            print_verify(result["verify"])


def _replay(flag: bool, files: tuple[str, ...], as_json: bool) -> None:
    from dsbench.errors import UserError

    if not flag:
        raise UserError(f"{files[0]}: a file is read only with --replay (dsbench plan --replay FILE.csv ...)")
    if not files:
        raise UserError("--replay needs one or more CSV files in the oracle schema (docs/planner.md)")
    from dsbench.plan.replay import as_json as replay_json
    from dsbench.plan.replay import replay

    result = replay_json(replay(list(files)))
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        from dsbench.report.replay_table import print_replay

        print_replay(result)


COMMAND = plan
