"""Run DeepSpeed's own config parser (``DeepSpeedConfig`` and its pydantic sections) offline.

``DeepSpeedConfig(dict)`` asks ``torch.distributed`` for the world size; here
``deepspeed.runtime.config.dist.get_world_size``/``get_rank`` are patched to return the
data-parallel size being checked and 0 for the duration of the call, so a config can be checked
for N ranks without starting N processes. Problems dsbench already reported (unknown keys,
"auto", batch arithmetic) are taken out of the copy handed to DeepSpeed so each is reported once.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import os
from collections.abc import Iterator
from typing import Any

from dsbench.configs.autofill import auto_paths
from dsbench.configs.findings import Finding
from dsbench.configs.overrides import get_path
from dsbench.parallel import ParallelDims

# pydantic model title -> the config section DeepSpeed builds it from
_SECTIONS = {
    "DeepSpeedZeroConfig": "zero_optimization",
    "DeepSpeedZeroOffloadParamConfig": "zero_optimization.offload_param",
    "DeepSpeedZeroOffloadOptimizerConfig": "zero_optimization.offload_optimizer",
    "DeepSpeedFP16Config": "fp16",
    "DeepSpeedBF16Config": "bf16",
    "TPTrainingConfig": "tensor_parallel",
    "CompileConfig": "compile",
    "CommsLoggerConfig": "comms_logger",
    "DeepSpeedThroughputTimerConfig": "timers.throughput",
    "HybridEngineConfig": "hybrid_engine",
    "DeepSpeedMonitorConfig": "",
}


@contextlib.contextmanager
def _cpu_accelerator_unless_named() -> Iterator[None]:
    """DeepSpeed's CPU accelerator for the import and the parse where none is named (it picks one at its first
    ``get_accelerator()``), without leaving ``DS_ACCELERATOR`` set: every process this one starts inherits its
    environment (runner.py), and until 2026-12-04 a launch that had parsed a user's accelerate YAML's DeepSpeed
    file handed ``DS_ACCELERATOR=cpu`` to its ranks, on GPUs too."""
    named = "DS_ACCELERATOR" in os.environ
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        yield
    finally:
        if not named:
            os.environ.pop("DS_ACCELERATOR", None)


def _quiet_import() -> Any:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        from deepspeed.runtime import config as ds_config
    logging.getLogger("DeepSpeed").setLevel(logging.ERROR)
    return ds_config


def _delete(config: dict[str, Any], path: str) -> None:
    *parents, last = path.split(".")
    node: Any = config
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(last, None)


def sanitized(config: dict[str, Any], reported: list[Finding]) -> dict[str, Any]:
    """A copy without what dsbench already reported, so DeepSpeed's verdict is about the rest."""
    out = copy.deepcopy(config)
    for path in auto_paths(out):
        _delete(out, path)
    for finding in reported:
        if finding.code in ("unknown-key", "removed-key", "batch-type", "value-type"):
            _delete(out, finding.path)
        if finding.code in ("batch-mismatch", "batch-missing"):
            out.pop("train_batch_size", None)
            out.setdefault("train_micro_batch_size_per_gpu", 1)
    if get_path(out, "train_batch_size") is None and get_path(out, "train_micro_batch_size_per_gpu") is None:
        out["train_micro_batch_size_per_gpu"] = 1  # all batch keys were "auto": DeepSpeed needs one
    return out


def _world_for(config: dict[str, Any], world_size: int | None, layout: Any = None) -> int:
    """The world size to report to DeepSpeedConfig: its batch ranks, times the Ulysses degree it divides by again
    (runtime/config.py: with ``sequence_parallel_size`` and no mpu, world / sequence_parallel_size). ``layout``: the
    config's :class:`ParallelDims` on ``world_size`` ranks where the caller worked it out."""
    from dsbench.configs.layout import data_parallel_size, ulysses_degree

    sp = ulysses_degree(config)
    if isinstance(layout, ParallelDims):
        return layout.deepspeed_batch_ranks() * sp
    if world_size is not None:
        return (data_parallel_size(config, world_size) or 1) * sp
    tb, mb, ga = (get_path(config, k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                                 "gradient_accumulation_steps"))
    if isinstance(tb, int) and isinstance(mb, int) and tb % (mb * (ga if isinstance(ga, int) else 1)) == 0:
        return tb // (mb * (ga if isinstance(ga, int) else 1)) * sp
    return sp


def deepspeed_findings(config: dict[str, Any], world_size: int | None, reported: list[Finding],
                       layout: Any = None) -> list[Finding]:
    """Findings from DeepSpeed's own parser; an empty list when it accepts the config. ``layout``: the config's
    layout on ``world_size`` ranks, where validation worked it out (else it is worked out here)."""
    with _cpu_accelerator_unless_named():
        return _parsed(config, world_size, reported, layout)


def _parsed(config: dict[str, Any], world_size: int | None, reported: list[Finding], layout: Any) -> list[Finding]:
    try:
        ds_config = _quiet_import()
    except Exception as exc:  # deepspeed missing or broken: say so, don't fail validation on it
        return [Finding(severity="warning", code="deepspeed-unavailable", path="",
                        message=f"DeepSpeed's own parser was not run ({type(exc).__name__}: {exc})",
                        fix="pip install deepspeed to check with DeepSpeed's classes too")]
    checked = sanitized(config, reported)
    dp = _world_for(checked, world_size, layout)
    saved = ds_config.dist.get_world_size, ds_config.dist.get_rank
    ds_config.dist.get_world_size = lambda *a, **k: dp
    ds_config.dist.get_rank = lambda *a, **k: 0
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            ds_config.DeepSpeedConfig(checked)
    except Exception as exc:
        return _from_exception(exc)
    finally:
        ds_config.dist.get_world_size, ds_config.dist.get_rank = saved
    return []


def config_error(exc: BaseException) -> str | None:
    """The first problem of a pydantic ValidationError DeepSpeed's config raised, by its key (a rank that reaches
    ``deepspeed.initialize`` with a value DeepSpeed's parser refuses said only "ValidationError: 1 validation error
    for DeepSpeedZeroConfig"); None for any other exception."""
    title = getattr(exc, "title", None)
    if not (callable(getattr(exc, "errors", None)) and isinstance(title, str)
            and (title in _SECTIONS or title.startswith("DeepSpeed"))):  # another library's pydantic model: not this
        return None
    findings = _from_exception(exc)
    return findings[0].text() if findings else None


def _from_exception(exc: BaseException) -> list[Finding]:
    errors = getattr(exc, "errors", None)
    if callable(errors) and hasattr(exc, "title"):  # pydantic.ValidationError
        section = _SECTIONS.get(exc.title, "")
        out = []
        for err in errors():
            loc = ".".join(str(p) for p in err.get("loc", ()))
            path = ".".join(p for p in (section, loc) if p)
            # a field's error quotes its value; a model validator's (no loc: an assertion across fields, such as
            # "Partial offloading only supported for ZeRO Stage 3") has the whole section as its input, which says
            # nothing the message does not (until 2026-12-01 its repr filled the line and the message was cut off)
            what = f"{err.get('input')!r}" if loc else "the section"
            out.append(Finding(severity="error", code="deepspeed-rejects", path=path,
                               message=f"DeepSpeed's {exc.title} rejects {what}: {err.get('msg')}",
                               fix=f"correct {path or 'the value'} (see DeepSpeed's config docs)"))
        return out
    text = " ".join(str(exc).split()) or type(exc).__name__
    return [Finding(severity="error", code="deepspeed-rejects", path="",
                    message=f"DeepSpeedConfig raised {type(exc).__name__}: {text}",
                    fix="correct the setting the message names")]
