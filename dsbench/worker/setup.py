"""Worker set-up: which strategy, which DeepSpeed config ("auto" resolved), and the run header."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from dsbench.configs.autofill import AutoInputs, fill_auto
from dsbench.configs.batch import BATCH_KEYS, config_batch
from dsbench.configs.device_ops import installed, monitor_refusal, op_refusal
from dsbench.configs.findings import has_errors
from dsbench.configs.layout import layout_of
from dsbench.configs.precision import fp16_enabled, run_precision
from dsbench.configs.validate import WARMUP_SCHEDULERS, ValidateContext, validate
from dsbench.envinfo import cuda_arch_list_problem, machine, versions
from dsbench.errors import UserError
from dsbench.parallel import ParallelDims


def resolve_strategy(requested: str, ds_config: str | None, world_size: int) -> str:
    """``auto``: from the launcher's environment (accelerate's DeepSpeed/FSDP variables, a DeepSpeed config)."""
    if requested != "auto":
        return requested
    env = os.environ
    if ds_config or env.get("ACCELERATE_USE_DEEPSPEED") == "true" or env.get("ACCELERATE_DEEPSPEED_CONFIG_FILE"):
        return "deepspeed"
    if env.get("ACCELERATE_USE_FSDP") == "true":
        return "fsdp"
    return "ddp" if world_size > 1 else "single"


def check_cuda_arch_list() -> None:
    """This GPU rank's TORCH_CUDA_ARCH_LIST, which DeepSpeed's JIT builder parses (envinfo.cuda_arch_list_problem),
    said before DeepSpeed starts building."""
    problem = cuda_arch_list_problem(os.environ.get("TORCH_CUDA_ARCH_LIST", ""))
    if problem:
        raise UserError(problem)


def guard_jit_builds() -> None:
    """Before DeepSpeed builds or loads its first op, make this process's builds and waits safe: a lock it holds goes
    when it is told to stop, and a wait on a lock left over ends in one line (dsbench.worker.jitbaton), at once for
    a lock already stale. Only the ops the run loads are waited on, so a lock left in another op's folder (async_io's,
    from an NVMe run stopped mid-build) stops no run that does not load it; until 2026-12-02 every op's folder was
    checked here first, and such a lock refused every DeepSpeed run. ``dsbench doctor`` lists every stale lock."""
    from dsbench.worker import jitbaton, stop

    jitbaton.guard(stop.say)
    stop.on_stop(jitbaton.drop_held)


def complete_ds_config(raw: dict[str, Any], path: str, inputs: AutoInputs,
                       world_size: int) -> tuple[dict[str, Any], ParallelDims]:
    """Fill a config's "auto" values as the HF Trainer would from the worker's own arguments, validate it, and
    check that this rank's DeepSpeed accelerator can run it (:func:`check_on_device`);
    ``path`` names where it came from in errors. Returns it with its layout (AutoTP degree, pipeline stages over the
    world), worked out once here for the whole run."""
    dims = layout_of(raw, world_size)
    if isinstance(dims, str):  # why the degrees cannot lay out the world
        raise UserError(f"{path}: {dims}")
    # the config's own micro-batch and accumulation win over the flags, also inside the "auto" values derived from
    # them (accelerate's Accelerator._prepare_deepspeed: train_batch_size = micro x the plugin's accumulation x ranks)
    given = {name: raw.get(key) for name, key in (("micro_batch", "train_micro_batch_size_per_gpu"),
                                                  ("grad_accum", "gradient_accumulation_steps"))}
    inputs = replace(inputs, **{name: value for name, value in given.items()
                                if isinstance(value, int) and not isinstance(value, bool)})
    # "auto" batch values as DeepSpeed asserts them (AutoTP ranks count, pipeline stages divide)
    config, unresolved = fill_auto(raw, replace(inputs, data_parallel_size=dims.deepspeed_batch_ranks()))
    if unresolved:
        raise UserError(f"{path}: cannot resolve 'auto' at {', '.join(unresolved)}")
    scheduler = config.get("scheduler") or {}
    if scheduler.get("type") in WARMUP_SCHEDULERS and (scheduler.get("params") or {}).get("warmup_num_steps") == 0:
        # DeepSpeed rejects 0 warm-up steps; no warm-up means a constant LR, as dsbench renders it.
        del config["scheduler"]
    # fill_auto changes batch values only: the layout is the one worked out above
    findings = validate(config, ValidateContext(world_size=world_size, layout=dims), deepspeed_check=False)
    if has_errors(findings):
        raise UserError(f"{path}: " + "; ".join(f.line() for f in findings if f.severity == "error"))
    # the batch keys the config leaves out, written as DeepSpeed derives them (configs/batch.py), so that the loop
    # takes as many micro-steps per step as the engine accumulates (train 8 and micro 2 on 2 ranks: 2, not 1)
    batch = config_batch(config, world_size, dims)
    if batch is None:  # validation refuses every config without a definite batch; said in case it ever does not
        raise UserError(f"{path}: no definite batch: set train_micro_batch_size_per_gpu")
    check_on_device(config, world_size)
    check_monitors(config)
    return {**config, **dict(zip(BATCH_KEYS, (batch.train, batch.micro, batch.accum), strict=True))}, dims


def precision_of(config: dict[str, Any] | None, flag: str | None) -> str:
    """Training precision: from the DeepSpeed config when there is one (``bf16`` or its legacy spelling
    ``bfloat16``), else the flag, else accelerate's ``ACCELERATE_MIXED_PRECISION`` (``no`` = fp32)."""
    if config is not None:
        precision = run_precision(config)
        return "fp32" if precision == "auto" else precision  # fill_auto resolved "auto" before; be safe
    if flag:
        return flag
    mixed = os.environ.get("ACCELERATE_MIXED_PRECISION", "no").lower()
    return mixed if mixed in ("bf16", "fp16") else "fp32"


def config_hash(data: Any) -> str:
    """Short stable hash of what defines a run."""
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def git_revision() -> str | None:
    """The dsbench source tree's git revision (None outside a checkout), read from ``.git`` as git stores it (HEAD, a
    loose ref or packed-refs) without starting git: dsbench.runner is the one module that starts processes."""
    root = Path(__file__).resolve().parents[2]
    git = root / ".git"
    try:
        if git.is_file():  # a worktree or submodule: "gitdir: PATH"
            git = (root / git.read_text(encoding="utf-8").split(":", 1)[1].strip()).resolve()
        head = (git / "HEAD").read_text(encoding="utf-8").strip()
        if not head.startswith("ref:"):
            return head or None  # a detached HEAD holds the revision itself
        ref = head[4:].strip()
        common = git / "commondir"
        shared = (git / common.read_text(encoding="utf-8").strip()).resolve() if common.is_file() else git
        for folder in (git, shared):
            if (folder / ref).is_file():
                return (folder / ref).read_text(encoding="utf-8").strip() or None
        packed = shared / "packed-refs"
        lines = packed.read_text(encoding="utf-8").splitlines() if packed.is_file() else []
        return next((line.split()[0] for line in lines if line.endswith(f" {ref}")), None)
    except (OSError, UnicodeDecodeError, IndexError):
        return None


def header(**fields: Any) -> dict[str, Any]:
    """The run header record: what ran, where, with which versions and command."""
    launch = os.environ.get("DSBENCH_LAUNCH_COMMAND")
    return {"type": "header", "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "command": [sys.executable, "-m", "dsbench.train", *sys.argv[1:]], "launch_command": launch,
            "git_rev": git_revision(), "versions": versions(), "machine": machine(), **fields}


def check_on_device(ds_config: dict[str, Any], world_size: int = 1) -> None:
    """What the rank's DeepSpeed accelerator cannot run, refused in dsbench's words before ``deepspeed.initialize``
    (where DeepSpeed says "Type fp16 is not supported on your device" or, of its missing op, "This op had not been
    implemented on CPU backend"). A launch onto CPU ranks refuses the same before they start (configs/device_ops)."""
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    device = accelerator.device_name()
    if fp16_enabled(ds_config) and not accelerator.is_fp16_supported():
        raise UserError(f"fp16: DeepSpeed's {device} accelerator trains no fp16: set fp16.enabled false (fp32) or "
                        "bf16.enabled true in the config (dsbench launch renders either with --precision fp32|bf16)")
    refused = op_refusal(ds_config, device, lambda op: not _missing(accelerator.get_op_builder(op)),
                         world_size // max(accelerator.device_count(), 1))
    if refused is not None:
        raise UserError(refused.line())


def check_monitors(ds_config: dict[str, Any]) -> None:
    """A monitor the config enables whose package this environment lacks, refused in one line before
    ``deepspeed.initialize`` (where DeepSpeed raises ModuleNotFoundError)."""
    refused = monitor_refusal(ds_config, installed)
    if refused is not None:
        raise UserError(refused.line())


def _missing(builder: Any) -> bool:
    """Whether an accelerator's op builder is absent or its stand-in for an op it lacks."""
    return getattr(builder, "__name__", "NotImplementedBuilder") == "NotImplementedBuilder"
