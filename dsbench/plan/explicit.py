"""``dsbench plan --layout``: one explicit layout on GPUs priced with the GPU time and memory model (pure).

The layout is spelled as ``dsbench launch`` spells it (``--tp``, ``--pipeline-stages``, ``--pipeline-schedule``)
with the degrees and options the GPU model knows beyond what dsbench runs today (``--cp``, ``--virtual-stages``,
``--recompute``, ``--sequence-parallel``); the answer says whether dsbench can launch it, and how.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from dsbench.errors import UserError
from dsbench.model_checks import AUTOTP_TEXT, MEGATRON_TEXT, splitting_families, unsplit_why
from dsbench.model_config import heads_problem, resolve_model
from dsbench.models import ModelShape
from dsbench.parallel import interleaved_accepts
from dsbench.plan.caveats import caveats, node_note
from dsbench.plan.gpu_calibration import calibrated_gpu
from dsbench.plan.gpu_layout import ARCHS, OFFLOADED, Layout, Shape, runs_autocast, shape_of_model
from dsbench.plan.gpu_memory import peak_memory
from dsbench.plan.gpu_profiles import CUSTOM, GpuProfile, custom_profile, profile_for, with_host, with_links
from dsbench.plan.gpu_time import step_time
from dsbench.plan.recommend import launch_argv
from dsbench.plan.request import LayoutRequest
from dsbench.plan.training import training_cost
from dsbench.strategies import Strategy, lookup, with_options
from dsbench.strategy_match import name_for

SHAPE_FLAGS = ("arch", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab")


def _llama_ffn(hidden: int) -> int:
    """Llama's MLP width for a hidden size: 8h/3 rounded up to a multiple of 256 (Llama 2 ``multiple_of``)."""
    return -(-(8 * hidden // 3) // 256) * 256


def shape_of(req: LayoutRequest) -> tuple[Shape, str, int]:
    """The model's shape (a preset or local config.json, ``--params``, or the shape flags, which also override
    single dimensions of a model), its name for the launch command, and its longest sequence."""
    if req.model and req.params:
        raise UserError("give at most one of --model NAME and --params N")
    given = {flag: getattr(req, flag) for flag in SHAPE_FLAGS if getattr(req, flag) is not None}
    base: ModelShape | None = None
    if req.model:
        base = resolve_model(req.model)
    elif req.params:
        from dsbench.plan.api import synthetic_shape

        base = synthetic_shape(float(req.params))
    if base is not None:
        values = {**asdict(shape_of_model(base)), **given}
        name = base.name if base.source != "synthetic" and not given else "PATH_TO_MODEL"
        longest = base.max_positions
    else:
        missing = [f"--{flag}" for flag in ("layers", "hidden", "heads", "vocab") if flag not in given]
        if missing:
            raise UserError(f"--layout needs --model, --params or the shape flags: {', '.join(missing)} missing")
        values = {"arch": "llama", **given}
        values.setdefault("kv_heads", values["heads"])
        values.setdefault("ffn", 4 * values["hidden"] if values["arch"] == "gpt" else _llama_ffn(values["hidden"]))
        name, longest = "PATH_TO_MODEL", 1 << 20
    if values["arch"] not in ARCHS:
        raise UserError(f"--arch {values['arch']!r}: use one of {', '.join(ARCHS)}")
    # any head width prices (arch None): transformers' Llama-only rule is the config reader's (model_config.py)
    problem = heads_problem(values["hidden"], values["heads"], values["kv_heads"], values.get("head_dim") or None)
    if problem:
        raise UserError(f"the shape: {problem}")
    return Shape(**values), name, longest


def layout_of(req: LayoutRequest) -> tuple[Layout, GpuProfile, str]:
    """The checked layout, its hardware profile and the model's name for the launch command."""
    shape, name, longest = shape_of(req)
    if req.profile:  # measured on the GPU by calibrate
        hw = with_links(calibrated_gpu(req.profile.data["gpu"], req.profile.path), req)
    else:  # a custom profile carries the link flags already
        hw = custom_profile(req) if req.gpu == CUSTOM else with_links(profile_for(req.gpu), req)
    hw = with_host(hw, req.zero_host_us, req.cpu_adam_rate)
    gpn = req.per_node()
    gpus = req.nodes * gpn
    seq = req.seq_len or min(longest, 2048)
    if seq > longest:
        raise UserError(f"--seq-len {seq} is longer than the model's {longest} positions")
    if req.precision not in hw.peak_tflops:
        raise UserError(f"--precision {req.precision}: the {hw.kind} profile has no {req.precision} peak "
                        f"(it has {', '.join(hw.peak_tflops)})")
    if req.cp > 1 and req.ulysses > 1:
        raise UserError(f"--cp {req.cp} and --ulysses {req.ulysses} both split the sequence: give one (ring "
                        "attention or Ulysses' all-to-all)")
    cp, comm = (req.ulysses, "a2a") if req.ulysses > 1 else (req.cp, "p2p")
    split = req.tp * req.pipeline_stages * cp
    dp = gpus // split if gpus % split == 0 else 0
    global_batch = req.global_batch or dp * req.micro_batch * (req.grad_accum or 1)
    if req.global_batch and req.grad_accum and dp and req.global_batch != dp * req.micro_batch * req.grad_accum:
        raise UserError(f"--global-batch {req.global_batch} and --grad-accum {req.grad_accum} disagree: data parallel "
                        f"{dp} x micro-batch {req.micro_batch} x {req.grad_accum} = "
                        f"{dp * req.micro_batch * req.grad_accum}; give one of them")
    strategy, offload_param = OFFLOADED.get(req.layout, (req.layout, False))
    layout = Layout(shape, seq, hw.kind, gpus, gpn, strategy, req.tp, req.pipeline_stages, cp,
                    req.pipeline_schedule, req.virtual_stages, req.micro_batch, max(global_batch, 1), req.recompute,
                    req.sequence_parallel, req.precision, req.compile, req.kernels, req.attention,
                    req.intra_bandwidth, req.bandwidth, cp_comm=comm,
                    autocast=runs_autocast(req.layout, req.kernels), offload=req.layout in OFFLOADED,
                    offload_param=offload_param)
    if req.virtual_stages > 1 and not req.pipeline_schedule.startswith("interleaved"):
        raise UserError("--virtual-stages goes with --pipeline-schedule interleaved or interleaved-zb")
    return layout.check(), hw, name


def runner(lay: Layout) -> tuple[Strategy | None, str | None]:
    """The compare strategy that runs the layout today, or why none does (one line)."""
    if lay.precision == "fp8":
        return None, "dsbench's worker trains in fp32, bf16 or fp16: fp8 (torchao's Float8 linears) is priced only"
    if lay.offload:
        if lay.tp * lay.pp * lay.cp > 1:
            return None, ("dsbench runs ZeRO-Offload with data parallelism only (no --tp, --pipeline-stages, --cp or "
                          "--ulysses)")
        return lookup(name_for(lay.strategy, offload="cpu", offload_param="cpu" if lay.offload_param else "none")
                      or ""), None
    if lay.cp > 1 and lay.cp_comm == "a2a":
        return _ulysses_runner(lay)
    why = _not_run(lay)
    if why is not None:
        return None, why
    if lay.tp == lay.pp == 1:
        strategy, hybrid = _as_run(lay)
        how = lookup(strategy) or lookup(name_for(strategy, **hybrid) or "")
        return (how, None) if how else (None, f"{lay.strategy} on {lay.gpus_per_node} GPU(s) per node: no "
                                                "strategy of dsbench's runs it")
    return _model_parallel_runner(lay)


def _as_run(lay: Layout) -> tuple[str, dict[str, int]]:
    """The planner strategy dsbench runs for the layout, with HSDP's shard group (``--dp-shard``) for fsdp_hybrid;
    a shard group of every data-parallel rank (one node) is plain FSDP, run and named as ``fsdp``."""
    if lay.strategy != "fsdp_hybrid":
        return lay.strategy, {}
    return ("fsdp", {}) if lay.hybrid_shard >= lay.dp else ("fsdp_hybrid", {"dp_shard": lay.hybrid_shard})


def _not_run(lay: Layout) -> str | None:
    """Why the worker runs no strategy of the layout's options (ring attention, torchtitan's op policy, sequence
    parallelism or the interleaved schedule outside the engines that take them), or None."""
    if lay.cp > 1:
        return "context parallelism (--cp) is priced but dsbench's worker does not run it yet"
    if lay.recompute == "op":
        return ("recompute op is torchtitan's policy (every second matmul output saved); dsbench's --recompute "
                "selective-op saves every matmul output: price that with --recompute selective")
    if lay.sequence_parallel and not (lay.tp > 1 and lay.pp == 1 and lay.strategy == "ddp"):
        return "dsbench runs sequence parallelism with torch_tp (--layout ddp --tp N, no pipeline)"
    interleaved = lay.pp > 1 and lay.schedule.startswith("interleaved")
    if interleaved and not (lay.strategy == "ddp" or (lay.tp > 1 and lay.strategy in ("fsdp", "fsdp_hybrid"))):
        return ("dsbench runs the interleaved schedule with torch_pp (--layout ddp --pipeline-stages P) or torch_3d "
                "(--layout fsdp|ddp --tp T --pipeline-stages P)")
    if interleaved and not interleaved_accepts(lay.micro_batches, lay.pp):
        return f"torch's interleaved 1F1B cannot split {lay.micro_batches} micro-batches into rounds of {lay.pp}"
    if lay.tp > 1 and lay.pp > 1 and lay.strategy not in ("fsdp", "ddp", "fsdp_hybrid"):
        return (f"{lay.strategy} with tp and pp: dsbench runs 3D as torch_3d (--layout fsdp, fsdp_hybrid for a "
                "node's shard group, or ddp for --dp-shard 1)")
    return None


def _model_parallel_runner(lay: Layout) -> tuple[Strategy | None, str | None]:
    """The strategy of a layout with tensor or pipeline parallelism: AutoTP or DeepSpeed's pipeline engine under
    ZeRO-1, torch_tp or torch_pp under DDP, torch_3d under FSDP (or DDP)."""
    engine = "deepspeed" if lay.strategy.startswith("zero") else "torch"
    strategy, hybrid = _as_run(lay)
    name = name_for(strategy, tp=lay.tp, pp=lay.pp, engine=engine, virtual_stages=lay.chunks,
                    zero_bubble=lay.schedule == "interleaved-zb", **hybrid)
    if name is not None and lay.sequence_parallel:  # torch_tp's option is in its name
        name = with_options(name, sequence_parallel=True)
    if name is None:
        return None, (f"{lay.strategy} with tp/pp: dsbench runs tensor and pipeline parallelism under zero1 "
                      "(DeepSpeed AutoTP, its pipeline engine), ddp (torch_tp, torch_pp) or fsdp with both "
                      "(torch_3d)")
    how = lookup(name)
    if how is not None and how.engine == "deepspeed" and lay.pp > 1 and lay.schedule != "1f1b":
        return None, "DeepSpeed's pipeline engine runs its own 1F1B schedule only (use --pipeline-schedule 1f1b)"
    family = lay.shape.launch_family
    autotp = how is not None and how.engine == "deepspeed"
    if how is not None and how.tp > 1 and family not in splitting_families(how.tp, autotp):
        return None, (f"tensor parallelism splits {AUTOTP_TEXT if autotp else MEGATRON_TEXT}, not {family}: "
                      f"{unsplit_why(family)}")
    return how, None


def _ulysses_runner(lay: Layout) -> tuple[Strategy | None, str | None]:
    """DeepSpeed Ulysses: ZeRO-1 or ZeRO-3 with data parallelism only (any family: model_checks.splitting_families)."""
    how = lookup(name_for(lay.strategy, ulysses=lay.cp) or "")
    if lay.tp * lay.pp > 1 or how is None:
        return None, "dsbench runs Ulysses under --layout zero1 or zero3 without --tp or --pipeline-stages"
    return how, None


def predict_layout(req: LayoutRequest) -> dict[str, Any]:
    """Step time, tokens/s per GPU, MFU and peak memory per GPU with the terms behind each, whether it fits and
    whether (and how) dsbench can launch it."""
    lay, hw, model = layout_of(req)
    time, memory = step_time(lay, hw), peak_memory(lay)
    how, why_not = runner(lay)
    command = None
    if how is not None:
        worker = ("--pipeline-schedule", "gpipe") if how.engine == "torch_pp" and lay.schedule == "gpipe" else ()
        worker += ("--recompute", "selective") if lay.recompute == "selective" else ()
        command = launch_argv(how, model, lay.precision, lay.micro_batch, lay.micro_batches, -(-lay.gpus //
                              lay.gpus_per_node), lay.gpus_per_node, lay.seq_len, lay.recompute == "full", worker)
    tokens = lay.global_batch * lay.seq_len
    shape = asdict(lay.shape)
    return {"layout": {**{k: v for k, v in asdict(lay).items() if k != "shape"}, "dp": lay.dp,
                       "micro_batches": lay.micro_batches},
            "model": {**shape, "params": lay.shape.params(), "name": model},
            "gpu": {"kind": hw.kind, "memory_gib": hw.memory_gib, "peak_tflops": hw.peak_tflops[lay.precision]},
            "step_s": time.seconds, "tokens_per_s_per_gpu": tokens / time.seconds / lay.gpus,
            "mfu": time.model_flops / (time.seconds * hw.peak_tflops[lay.precision] * 1e12),
            "terms_s": time.terms, "memory_gib": {"allocated": memory.allocated_gib, "reserved": memory.reserved_gib,
                                                  "terms": memory.terms, "busiest_stage": memory.busiest_stage},
            "fits": memory.reserved_gib <= hw.memory_gib, "launchable": how is not None,
            "strategy": how.name if how else None, "why_not": why_not, "command": command,
            "training": training_cost(tokens / time.seconds, lay.gpus, req.tokens, req.price_per_gpu_hour),
            "caveats": [*node_note(lay.gpus // lay.gpus_per_node, lay.gpus_per_node),
                        *caveats(lay, time.terms, time.seconds, calibrated=req.profile is not None,
                                cpu_adam_rate=hw.offload_adam_params_per_s)]}
