"""What ``dsbench plan --layout`` prints: one layout's step time, throughput, MFU and memory, with the terms."""

from __future__ import annotations

from typing import Any

from dsbench.units import params_text


def _terms(terms: dict[str, float], unit: str, scale: float = 1.0) -> str:
    """The non-zero terms, largest first: ``matmul 5.20 s, tp_comm 1.10 s``."""
    ordered = sorted(((v, k) for k, v in terms.items() if v * scale >= 0.005), reverse=True)
    return ", ".join(f"{k} {v * scale:,.2f} {unit}" for v, k in ordered)


def print_layout(result: dict[str, Any]) -> None:
    import click

    lay, model, gpu, mem = result["layout"], result["model"], result["gpu"], result["memory_gib"]
    schedule = ""
    if lay["pp"] > 1:
        schedule = f" ({lay['schedule']}" + (f", {lay['virtual_stages']} virtual" if lay["schedule"] == "interleaved"
                                            else "") + ")"
    click.echo(f"model {model['name']}: {params_text(model['params'])} params, {model['layers']} layers x "
               f"{model['hidden']} ({model['arch']}); {lay['gpus']} x {gpu['kind']} ({lay['gpus_per_node']} per node)")
    split = "ulysses" if lay.get("cp_comm") == "a2a" else "cp"  # the sequence split: Ulysses' all-to-all or the ring
    offload = (" + offload (optimizer" + (" and parameters" if lay.get("offload_param") else "") + " on the host)"
               if lay.get("offload") else "")
    click.echo(f"layout {lay['strategy']}{offload}: tp {lay['tp']} x pp {lay['pp']}{schedule} x {split} {lay['cp']} "
               f"x dp {lay['dp']}; micro-batch {lay['micro_batch']} x {lay['micro_batches']} per step = global batch "
               f"{lay['global_batch']} x {lay['seq_len']} tokens; recompute {lay['recompute']}"
               + (", sequence parallel" if lay["sequence_parallel"] else "") + f", {lay['precision']}"
               + (", compiled" if lay["compile"] else ""))
    click.echo(f"step {result['step_s']:,.3f} s   {result['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU   "
               f"MFU {result['mfu']:.1%} (of the {gpu['peak_tflops']:g} TFLOP/s datasheet peak)")
    click.echo(f"  time per step: {_terms(result['terms_s'], 's')}")
    for caveat in result.get("caveats", ()):
        click.echo(f"  note: {caveat}")
    fits = "fits" if result["fits"] else "does NOT fit"
    click.echo(f"peak memory per GPU {mem['allocated']:,.1f} GiB allocated, {mem['reserved']:,.1f} GiB reserved: "
               f"{fits} in {gpu['memory_gib']:g} GiB")
    stage = mem.get("busiest_stage")
    where = "" if stage is None else (f" (pipeline stage {stage + 1} of {lay['pp']}, the busiest: "
                                      + ("its micro-batches in flight)" if stage == 0 else "its blocks' activations "
                                         "and the logits)" if stage == lay["pp"] - 1 else "its activations)"))
    click.echo(f"  memory: {_terms(mem['terms'], 'GiB')}{where}")
    cost = result.get("training")
    if cost:
        click.echo(f"{cost['tokens']:,.3g} tokens: {cost['days']:,.1f} days on {lay['gpus']} GPUs, "
                   f"{cost['gpu_hours']:,.0f} GPU-hours" + (f", {cost['cost']:,.0f} at the given price per GPU-hour"
                                                            if "cost" in cost else ""))
    if result["launchable"]:
        click.echo(f"dsbench runs it as {result['strategy']}:\n  {result['command']}")
    else:
        click.echo(f"dsbench cannot launch it yet: {result['why_not']}")
