"""``dsbench plan``: inputs -> workload and cluster -> ranked estimates -> table / JSON."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from dsbench.errors import UserError
from dsbench.gpus import BY_KEY
from dsbench.model_config import resolve_model
from dsbench.models import ModelShape
from dsbench.parallel import ParallelDims
from dsbench.plan.caveats import node_note
from dsbench.plan.config_row import config_estimate, unpriced
from dsbench.plan.estimate import Estimate
from dsbench.plan.gpu_calibration import calibrated_gpu
from dsbench.plan.gpu_profiles import ALIASES, CUSTOM, KINDS, GpuProfile, custom_profile, with_host
from dsbench.plan.hardware import INTERCONNECTS, Link, link
from dsbench.plan.inputs import Cluster, Workload
from dsbench.plan.machine_profile import with_profile
from dsbench.plan.recommend import Ranked, config_launch_argv, family_notes, launch_command, rank, reason
from dsbench.plan.request import DEFAULTS, PlanRequest
from dsbench.plan.training import check_cost_flags, training_cost
from dsbench.strategies import lookup
from dsbench.zero_section import zero_settings


def _llama_params(vocab: int, hidden: int, layers: int, ff: int) -> int:
    """Parameters of a Llama block stack with full multi-head attention (see ModelShape.num_params)."""
    return 2 * vocab * hidden + layers * (4 * hidden * hidden + 3 * hidden * ff + 2 * hidden) + hidden


def synthetic_shape(num_params: float) -> ModelShape:
    """A Llama-style shape with ``num_params`` parameters (to well under 1%).

    Depth and width follow the usual ratio hidden ≈ 128·layers with 12·L·h² ≈ N (7B: 32 layers x 4096);
    the vocabulary is 32,000, or smaller where the embeddings would exceed an eighth of the model; the MLP
    width is then solved so the exact count (:meth:`ModelShape.num_params`) matches N, rounded up to a multiple of
    8 as published models' are: a 16-bit GEMM with a dimension that is not one runs without tensor cores (NVIDIA's
    Matrix Multiplication Background guide, "Tensor Core Requirements"), which the GPU time model prices at an
    eighth of their rate (until 2026-12-01 the exact width made every ``--params`` plan on a GPU 3-4x slow).
    """
    if not num_params >= 1e6:  # also refuses NaN
        raise UserError(f"--params {num_params:g} is too small to plan for (give a parameter count like 7e9)")
    if num_params > 1e15:
        raise UserError(f"--params {num_params:g} is beyond any model dsbench can plan (at most 1e15)")
    layers = max(2, round((num_params / (12 * 128**2)) ** (1 / 3)))
    # heads of 128 dimensions; from 1024 wide on a multiple of 8 heads, as published models have (TP splits them)
    hidden = 128 * (max(8, round(layers / 8) * 8) if layers >= 8 else layers)
    while True:
        vocab = 32000 if 2 * 32000 * hidden <= num_params / 8 else max(64, int(num_params / 16 / hidden) // 64 * 64)
        fixed = _llama_params(vocab, hidden, layers, 0)
        ff = 8 * math.ceil((num_params - fixed) / (3 * hidden * layers) / 8)
        if ff >= hidden or hidden <= 64:
            break
        hidden -= 64  # attention alone would exceed the budget: narrower
    if ff < 1:
        raise UserError(f"--params {num_params:g}: no Llama-like shape of that size (give a larger count)")
    head_dim = 128 if hidden % 128 == 0 else 64
    return ModelShape(name=f"~{num_params / 1e9:g}B (assumed shape)", arch="llama", vocab_size=vocab, hidden=hidden,
                      layers=layers, heads=hidden // head_dim, kv_heads=hidden // head_dim, intermediate=ff,
                      max_positions=4096, tied_embeddings=False, source="synthetic")


def build(req: PlanRequest) -> tuple[Workload, Cluster, dict[str, Any] | None]:
    """Workload and cluster from the request (and the DeepSpeed config when one is given)."""
    if (req.model is None) == (req.params is None):
        raise UserError("give exactly one of --model NAME and --params N")
    shape = resolve_model(req.model) if req.model else synthetic_shape(float(req.params or 0))
    calibrated = calibrated_profile(req)
    gpn = req.per_node()
    micro, accum, precision, config = _batch_and_precision(req, gpn * req.nodes)
    peak, mem = _peak_and_memory(req, calibrated, precision)
    if min(micro, accum, gpn, req.nodes) < 1 or req.efficiency <= 0 or req.efficiency > 1:
        raise UserError("--micro-batch, --grad-accum, --nodes, --gpus-per-node must be >= 1; --efficiency in (0, 1]")
    # the GPU's own link within a node (dsbench/gpus.py: PCIe on the cards without NVLink; until 2026-12-02 every
    # kind but h100/h200 was priced over NVLink 3)
    intra = req.intra or (BY_KEY[req.gpu].intra if req.gpu in BY_KEY else "nvlink")
    zero = zero_settings(config or {})
    if req.model and req.seq_len and req.seq_len > shape.max_positions:  # as calibrate and tune refuse it
        raise UserError(f"--seq-len {req.seq_len} exceeds {shape.name}'s {shape.max_positions} positions")
    wl = Workload(shape=shape, seq_len=req.seq_len or min(shape.max_positions, 2048), micro_batch=micro,
                  grad_accum=accum, precision=precision, accounting=req.accounting,
                  reduce_bucket=zero.reduce_bucket, prefetch_bucket=zero.prefetch_bucket)
    cl = Cluster(nodes=req.nodes, gpus_per_node=gpn, gpu_mem_gib=req.gpu_mem or mem,
                 peak_tflops=req.peak_tflops or peak, efficiency=req.efficiency, intra=link(intra, flag="--intra"),
                 inter=link(req.interconnect or "infiniband", req.bandwidth, req.latency),
                 host_link=INTERCONNECTS["pcie5"],
                 host_mem_gib=req.host_mem)
    return wl, _time_model(cl, req, calibrated, precision), config


def _batch_and_precision(req: PlanRequest, world: int) -> tuple[int, int, str, dict[str, Any] | None]:
    """Micro-batch, accumulation and precision: the flags', or the --config's where it sets them (and the config,
    valid on ``world`` ranks)."""
    if not req.config:
        return req.micro_batch, req.grad_accum, req.precision, None
    from dsbench.configs.api import load_valid_config
    from dsbench.configs.batch import config_batch
    from dsbench.configs.precision import run_precision

    # refused as `dsbench explain` refuses it (a plan of a config DeepSpeed would not run is no plan), but for keys
    # that DeepSpeed 0.19.8 does not know, which the plan does not read either
    config = load_valid_config(req.config, world, unread=("unknown-key", "removed-key"))
    # the batch DeepSpeed derives on this world (train 64 and micro 2 on 8 ranks: 4 accumulation steps); the flags'
    # where the config leaves it to the Trainer ("auto")
    batch = config_batch(config, world)
    micro, accum = (batch.micro, batch.accum) if batch else (req.micro_batch, req.grad_accum)
    found = run_precision(config)
    return micro, accum, req.precision if found == "auto" else found, config  # "auto": the Trainer decides


def _time_model(cl: Cluster, req: PlanRequest, calibrated: GpuProfile | None, precision: str) -> Cluster:
    """The cluster with what prices its step: a GPU calibrated by calibrate, a CPU machine's profile, or the
    GPU kind's datasheet profile."""
    if calibrated is not None:
        if precision not in calibrated.peak_tflops:
            raise UserError(f"--precision {precision}: the {calibrated.kind} profile has no {precision} peak")
        return _usual_network(replace(cl, gpu_model=with_host(calibrated, req.zero_host_us, req.cpu_adam_rate)), req)
    if req.profile:
        if host := _host_flags(req):
            flags, verb = host
            raise UserError(f"{flags} {verb} the GPU model's: a --profile from calibrate measures its own engine "
                            "costs")
        return with_profile(cl, req.profile.data)
    return _usual_network(replace(cl, gpu_model=gpu_model(req, precision)), req)


def _peak_and_memory(req: PlanRequest, calibrated: GpuProfile | None, precision: str) -> tuple[float, float]:
    """The GPU's dense peak and memory: measured by calibrate, a custom GPU's flags, or --gpu's datasheet, whose
    peak is the precision's: the 16-bit tensor cores', or for fp32 the plain FP32 units' (PyTorch leaves TF32 off
    for matmuls, ``torch.backends.cuda.matmul.allow_tf32``, and dsbench's worker does not turn it on; until
    2026-12-01 an fp32 plan was priced at the 16-bit peak, 15x the H100's 67 TFLOP/s)."""
    if calibrated is not None:  # measured on this GPU by calibrate: its kind, peak and memory
        return calibrated.peak_tflops.get("bf16") or max(calibrated.peak_tflops.values()), calibrated.memory_gib
    if req.gpu == CUSTOM:  # its figures from the flags
        custom = custom_profile(req)
        return custom.peak_tflops["bf16"], custom.memory_gib
    if req.gpu not in BY_KEY:
        raise UserError(f"--gpu {req.gpu!r} is unknown; choose one of {', '.join(BY_KEY)}, or custom with its figures "
                        "(--peak-tflops, --gpu-mem, --hbm-tbs)")
    gpu = BY_KEY[req.gpu]
    return gpu.peak_tflops(precision), gpu.memory_gib


def _usual_network(cl: Cluster, req: PlanRequest) -> Cluster:
    """Under the GPU model, without --interconnect or --bandwidth, the network across nodes is the GPU profile's
    usual one (one NIC per GPU), as ``plan --layout`` and the replay price it."""
    hw = cl.gpu_model
    if hw is None or req.interconnect is not None or req.bandwidth is not None:
        return cl
    latency = req.latency if req.latency is not None else cl.inter.latency_us
    return replace(cl, inter=Link(f"{hw.kind} network", hw.network_gbs, latency,
                                  f"the {hw.kind} profile's usual network, {hw.network_gbs:g} GB/s per GPU"))


def calibrated_profile(req: PlanRequest) -> GpuProfile | None:
    """The GPU model's profile measured by ``dsbench calibrate`` on a CUDA rank (the ``--profile``'s ``gpu``
    section), or None for a profile of CPU ranks and without ``--profile``."""
    if req.profile is None or not req.profile.data.get("gpu"):
        return None
    if req.peak_tflops is not None or req.efficiency != DEFAULTS.efficiency:
        raise UserError("--peak-tflops and --efficiency are the datasheet model's; the --profile measured this GPU "
                        "(drop them, or the --profile)")
    return calibrated_gpu(req.profile.data["gpu"], req.profile.path)


def gpu_model(req: PlanRequest, precision: str) -> GpuProfile | None:
    """The GPU time model's profile of ``--gpu``: used unless the user set the older model's figures
    (--peak-tflops, --efficiency) or the kind or precision has no profile (then peak x efficiency prices it)."""
    kind = ALIASES.get(req.gpu, req.gpu)
    custom = kind == CUSTOM
    profile = custom_profile(req) if custom else KINDS.get(kind)
    # peak x efficiency asked for (a custom GPU's --peak-tflops is its datasheet figure, not that request)
    older = (req.peak_tflops is not None and not custom) or req.efficiency != DEFAULTS.efficiency
    if older or profile is None or precision not in profile.peak_tflops:
        if host := _host_flags(req):
            flags, _ = host
            raise UserError(f"{flags} price{'s' if ' and ' not in flags else ''} DeepSpeed's host time in the GPU "
                            "model, which this plan does not use: drop --peak-tflops/--efficiency, or use a GPU kind "
                            "with a profile in bf16/fp16")
        return None
    return with_host(profile, req.zero_host_us, req.cpu_adam_rate)


def _host_flags(req: PlanRequest) -> tuple[str, str] | None:
    """The GPU model's host flags the request gives, as typed, and their verb; None without any."""
    given = [flag for flag, value in (("--zero-host-us", req.zero_host_us), ("--cpu-adam-rate", req.cpu_adam_rate))
             if value]
    return (" and ".join(given), "is" if len(given) == 1 else "are") if given else None


def plan(req: PlanRequest) -> dict[str, Any]:
    """Everything ``dsbench plan`` prints, as a JSON-ready dict."""
    wl, cl, config = build(req)
    ranked: list[Ranked] = rank(wl, cl)
    top = next((r for r in ranked if r.rank), None)
    if config is not None:  # beside the ranking, compared with its top choice (until 2026-12-01 it took rank 1)
        e = config_estimate(config, wl, cl, req.config)
        missing = unpriced(config)
        said = f"; priced without {', '.join(missing)}" if missing else ""
        why = reason(e, cl, top and top.estimate, ranked=False)
        ranked = [Ranked(e, None, f"the given --config: {why}{said}", given=True), *ranked]
    check_cost_flags(req.tokens, req.price_per_gpu_hour)  # also when nothing is ranked
    shape = wl.shape
    return {
        "model": {"name": shape.name, "params": shape.num_params(), "layers": shape.layers, "hidden": shape.hidden,
                  "heads": shape.heads, "vocab": shape.vocab_size, "source": shape.source,
                  "notes": family_notes(shape)},
        "cluster": {"nodes": cl.nodes, "gpus_per_node": cl.gpus_per_node, "gpu_mem_gib": cl.gpu_mem_gib,
                    "peak_tflops": cl.peak_tflops, "efficiency": cl.efficiency, "intra": cl.intra.note,
                    "inter": cl.inter.note if cl.nodes > 1 else None, "compute_tflops": cl.compute_tflops,
                    "profile": req.profile.path if req.profile else None, "step_scale": dict(cl.step_scale),
                    "step_residual_ms": {family: seconds * 1e3 for family, seconds in cl.step_residual},
                    "gpu_model": cl.gpu_model.kind if cl.gpu_model else None,
                    # a CPU profile's ranks per node are the machine's own
                    "notes": [] if cl.compute_tflops else node_note(cl.nodes, cl.gpus_per_node)},
        "workload": {"seq_len": wl.seq_len, "micro_batch": wl.micro_batch, "grad_accum": wl.grad_accum,
                     # fixed across candidates: --grad-accum is per rank of pure data parallelism
                     "global_batch": ParallelDims(world=cl.world).samples_per_step(wl.micro_batch, wl.grad_accum),
                     "precision": wl.precision},
        "candidates": [{**r.estimate.to_dict(), "rank": r.rank, "reason": r.reason, "given": r.given,
                        **(_config_launch(req.config, shape, wl, cl) if r.given
                           else _launch(r.estimate, shape, wl, cl)),
                        **_training(r, cl.world, req)} for r in ranked],
        "recommendation": None if top is None else {"name": top.estimate.candidate.name,
                                                    **_launch(top.estimate, shape, wl, cl)},
    }


def _training(r: Ranked, gpus: int, req: PlanRequest) -> dict[str, Any]:
    """``--tokens``: the recommendation's and the runner-up's days, GPU-hours and cost at their predicted global
    tokens/s (plan.training.training_cost, as ``--layout`` gives them)."""
    if r.rank not in (1, 2):
        return {}
    cost = training_cost(r.estimate.tokens_per_s, gpus, req.tokens, req.price_per_gpu_hour)
    return {"training": cost} if cost else {}


def _config_launch(path: str | None, shape: ModelShape, wl: Workload, cl: Cluster) -> dict[str, Any]:
    """The given config's row: ``dsbench launch --config`` runs any config plan prices (its layout passed the
    launch's own check in :func:`dsbench.plan.config_row.config_estimate`)."""
    return {"launchable": True, "command": config_launch_argv(
        str(path), shape.name if shape.source != "synthetic" else "PATH_TO_MODEL", cl.nodes, cl.gpus_per_node,
        wl.seq_len)}


def _launch(e: Estimate, shape: ModelShape, wl: Workload, cl: Cluster) -> dict[str, Any]:
    """Whether dsbench runs the candidate today (compare has its strategy) and, when it does, the command."""
    launchable = lookup(e.candidate.runs_as.name) is not None
    return {"launchable": launchable, "command": launch_command(e, shape, wl, cl) if launchable else None}
