"""Regenerate dsbench/data/ds_schema.json: the config keys DeepSpeed knows, per JSON path.

Run with the pinned DeepSpeed installed:  python scripts/gen_ds_schema.py

How the key sets are found (no hand-written key list for what DeepSpeed parses itself):
1. ``DeepSpeedConfig`` parses a config whose dicts record every key looked up (``in``, ``get``,
   ``[]``), with ``dist`` patched to a world size of 1. Keys asked for at a path are keys DeepSpeed
   reads there, whether or not they were present.
2. Sections that DeepSpeed hands to pydantic models contribute their field names and aliases,
   recursively for nested models (zero_optimization.offload_param, ...).
3. Sections DeepSpeed reads outside ``DeepSpeedConfig`` (by the engine, the pipeline module, the
   compression/data-efficiency libraries) are listed in ``EXTRA`` with the module that reads them.
Paths in ``open`` are sections whose contents DeepSpeed passes on without checking key names
(optimizer/scheduler params go to the optimizer's constructor), so dsbench does not flag keys there.
"""

from __future__ import annotations

import json
import os
import sys
import typing
from pathlib import Path

import script_args

os.environ.setdefault("DS_ACCELERATOR", "cpu")

OUT = Path(__file__).resolve().parents[1] / "dsbench" / "data" / "ds_schema.json"

# Sections read outside DeepSpeedConfig, with where (deepspeed 0.19.8).
EXTRA: dict[str, list[str]] = {
    "": [
        "optimizer", "scheduler", "amp", "compression_training", "data_efficiency",
        "quantize_training", "fp32_allreduce", "zero_optimization",
        "tensorboard", "wandb", "csv_monitor", "comet", "nebula", "weight_quantization",
        "sequence_parallel_size", "fp16", "bf16", "bfloat16", "zenflow", "aio", "checkpoint",
        "data_types", "compile", "timers", "tensor_parallel", "expert_parallel", "hybrid_engine",
        "autotuning", "flops_profiler", "activation_checkpointing", "comms_logger", "pipeline",
        "datastates", "torch_autocast", "use_data_before_expert_parallelism",
        "memory_breakdown", "dataloader_drop_last", "gradient_allreduce_op",
    ],
    # runtime/pipe/engine.py and runtime/config.py:get_pipeline_config defaults; partition_method is read by
    # dsbench's worker for the PipelineModule it builds (dsbench/worker/engines/pipeline.py)
    "pipeline": [
        "stages", "partition", "partition_method", "seed_layers", "activation_checkpoint_interval",
        "pipe_partitioned", "grad_partitioned", "use_reentrant",
    ],
    "optimizer": ["type", "params", "legacy_fusion"],
    "scheduler": ["type", "params"],
    "amp": ["enabled", "opt_level"],
}
OPEN = ["optimizer.params", "scheduler.params", "compression_training", "data_efficiency",
        "quantize_training", "autotuning", "amp", "nebula"]


class Recorder(dict):
    """A dict that records every key looked up, under its JSON path."""

    seen: dict[str, set[str]] = {}

    def __init__(self, *args, path: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self._path = path
        for key, value in list(self.items()):
            if isinstance(value, dict) and not isinstance(value, Recorder):
                child = f"{path}.{key}" if path else key
                super().__setitem__(key, Recorder(value, path=child))

    def _note(self, key):
        if isinstance(key, str):
            Recorder.seen.setdefault(getattr(self, "_path", ""), set()).add(key)

    def __contains__(self, key):
        self._note(key)
        return super().__contains__(key)

    def __getitem__(self, key):
        self._note(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._note(key)
        return super().get(key, default)


def _from_true(extra: dict):
    """What DeepSpeed writes into the replacing key for a deprecated key set to true (its ``new_param_fn``), as
    JSON; None when it has no such function."""
    from pydantic import BaseModel

    fn = extra.get("new_param_fn")
    value = fn(True) if callable(fn) else None
    if isinstance(value, BaseModel):
        return json.loads(value.model_dump_json(exclude_unset=True, by_alias=True))
    return value


def optimizer_arguments(torch_classes: list[str]) -> dict[str, list[str] | None]:
    """The keyword arguments of each optimizer class DeepSpeed builds by name (runtime/engine.py
    ``_configure_basic_optimizer``), from its signature, less the parameters it is handed first; None for a class
    that takes any (``**kwargs``). The mup classes are left out (mup is not a DeepSpeed dependency)."""
    import inspect

    import torch
    from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad
    from deepspeed.ops.adam import DeepSpeedCPUAdam, FusedAdam
    from deepspeed.ops.lamb import FusedLamb
    from deepspeed.ops.lion import DeepSpeedCPULion, FusedLion

    classes = [FusedAdam, DeepSpeedCPUAdam, FusedLamb, FusedLion, DeepSpeedCPULion, DeepSpeedCPUAdagrad,
               *(getattr(torch.optim, name) for name in torch_classes)]
    out: dict[str, list[str] | None] = {}
    for cls in classes:
        params = list(inspect.signature(cls.__init__).parameters.values())[2:]  # self, then the parameters
        if any(p.kind is p.VAR_KEYWORD for p in params):
            out[cls.__name__] = None
        else:
            out[cls.__name__] = [p.name for p in params if p.kind is not p.VAR_POSITIONAL]
    return dict(sorted(out.items()))


def scheduler_arguments() -> dict[str, dict[str, list[str]]]:
    """The LR schedulers DeepSpeed builds by name (runtime/engine.py ``_scheduler_from_config``: its own
    ``lr_schedules`` classes, else a ``torch.optim.lr_scheduler`` class, called as ``cls(optimizer, **params)``), each
    with the keyword arguments it takes after the one the optimizer fills, those it needs (no default), those
    that must be Python objects a JSON file cannot hold (a Callable or a scheduler, by annotation, or a first argument
    other than the optimizer, which the optimizer would fill), and what its ``step()`` needs that the engine's
    ``lr_scheduler.step()`` does not pass (ReduceLROnPlateau's metric), and the defaults a JSON value can state
    (WarmupDecayLR's ``warmup_max_lr`` 0.001 where WarmupLR's is None, the optimizer's lr)."""
    import inspect

    import torch
    from deepspeed.runtime import lr_schedules

    base = torch.optim.lr_scheduler.LRScheduler
    torch_names = [name for name in dir(torch.optim.lr_scheduler) if not name.startswith("_")
                   and isinstance(getattr(torch.optim.lr_scheduler, name), type)
                   and issubclass(getattr(torch.optim.lr_scheduler, name), base) and name != "LRScheduler"]
    out = {}
    for origin, module, names in (("deepspeed", lr_schedules, lr_schedules.VALID_LR_SCHEDULES),
                                  ("torch", torch.optim.lr_scheduler, torch_names)):
        for name in names:
            cls = getattr(module, name)
            first, *params = list(inspect.signature(cls.__init__).parameters.values())[1:]
            wrong = [first] if first.name != "optimizer" else []  # ChainedScheduler(schedulers, optimizer=None)
            step = list(inspect.signature(cls.step).parameters.values())[1:]
            out[name] = {"origin": origin, "takes": [p.name for p in params],
                         "needs": [p.name for p in wrong + params if p.default is p.empty],
                         "objects": [p.name for p in wrong + params if "Callable" in str(p.annotation)
                                     or "LRScheduler" in str(p.annotation)],
                         "step_needs": [p.name for p in step if p.default is p.empty
                                        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)],
                         "defaults": {p.name: p.default for p in params
                                      if p.default is None or type(p.default) in (bool, int, float, str)}}
    return dict(sorted(out.items()))


def model_keys(model, prefix: str, out: dict[str, set[str]], deprecated: dict[str, dict[str, dict]]) -> None:
    """Add a pydantic model's field names and aliases, recursing into nested models; the fields DeepSpeed marks
    deprecated (``json_schema_extra``, read by ``DeepSpeedConfigModel._process_deprecated_field``) go into
    ``deprecated`` with the key that replaces them and whether DeepSpeed sets that key from them."""
    from pydantic import BaseModel

    keys = out.setdefault(prefix, set())
    for name, field in model.model_fields.items():
        keys.add(name)
        if field.alias:
            keys.add(field.alias)
        extra = field.json_schema_extra or {}
        if isinstance(extra, dict) and extra.get("deprecated"):
            new = extra.get("new_param", "")
            new = (model.model_fields[new].alias or new) if new in model.model_fields else new  # the JSON key
            deprecated.setdefault(prefix, {})[name] = {"new": new, "sets_new": bool(extra.get("set_new_param", True)),
                                                       "from_true": _from_true(extra)}
        for arg in [field.annotation, *typing.get_args(field.annotation)]:
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                model_keys(arg, f"{prefix}.{field.alias or name}", out, deprecated)
                if field.alias and field.alias != name:
                    model_keys(arg, f"{prefix}.{name}", out, deprecated)


def cpu_accelerator_ops() -> list[str]:
    """The op builders DeepSpeed's CPU accelerator implements: every other name it is asked for gives its
    NotImplementedBuilder (accelerator/cpu_accelerator.py ``get_op_builder``), which a rank stops at when it loads
    the op. ALL_OPS lists the builders of the accelerator DS_ACCELERATOR names (cpu, above)."""
    from deepspeed.accelerator.cpu_accelerator import CPU_Accelerator
    from deepspeed.ops.op_builder.all_ops import ALL_OPS

    cpu = CPU_Accelerator()
    names = {type(builder).__name__ for builder in ALL_OPS.values()}
    return sorted(name for name in names if cpu.get_op_builder(name).__name__ != "NotImplementedBuilder")


def main() -> int:
    import deepspeed
    from deepspeed.comm import torch as _  # noqa: F401  (import side effects of dist)
    from deepspeed.comm.config import CommsLoggerConfig
    from deepspeed.compile.config import CompileConfig
    from deepspeed.monitor.config import CometConfig, CSVConfig, TensorBoardConfig, WandbConfig
    from deepspeed.runtime import config as ds_config
    from deepspeed.runtime.config import HybridEngineConfig
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config, DeepSpeedFP16Config
    from deepspeed.runtime.tensor_parallel.config import TPTrainingConfig
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    ds_config.dist.get_world_size = lambda *a, **k: 1
    ds_config.dist.get_rank = lambda *a, **k: 0
    probe = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "scheduler": {"type": "WarmupLR", "params": {}},
        "activation_checkpointing": {},
        "flops_profiler": {},
        "autotuning": {},
        "checkpoint": {},
        "data_types": {},
        "aio": {},
        "datastates": {},
        "torch_autocast": {},
        "pipeline": {},
        "data_efficiency": {},
    }
    ds_config.DeepSpeedConfig(Recorder(probe))
    keys: dict[str, set[str]] = {path: set(found) for path, found in Recorder.seen.items()}
    for path, extra in EXTRA.items():
        keys.setdefault(path, set()).update(extra)
    deprecated: dict[str, dict[str, dict]] = {}
    for section, model in {
        "zero_optimization": DeepSpeedZeroConfig,
        "fp16": DeepSpeedFP16Config,
        "bf16": DeepSpeedBF16Config,
        "bfloat16": DeepSpeedBF16Config,
        "tensorboard": TensorBoardConfig,
        "wandb": WandbConfig,
        "csv_monitor": CSVConfig,
        "comet": CometConfig,
        "tensor_parallel": TPTrainingConfig,
        "compile": CompileConfig,
        "comms_logger": CommsLoggerConfig,
        "hybrid_engine": HybridEngineConfig,
    }.items():
        model_keys(model, section, keys, deprecated)
    removed = {"": dict(ds_config._REMOVED_TOP_LEVEL_CONFIG_KEYS),
               "zero_optimization": dict(ds_config._REMOVED_ZERO_CONFIG_KEYS)}
    for path, gone in removed.items():
        keys[path] = keys.get(path, set()) - set(gone)
    import torch
    from deepspeed.runtime.zero.utils import ZERO_SUPPORTED_OPTIMIZERS

    # the optimizers DeepSpeed builds by name (its own, and torch.optim's classes), and the classes it runs under ZeRO
    # without zero_allow_untested_optimizer (MuonWithAuxAdam joins that list when is_zero_supported_optimizer first
    # imports it, which compiles kernels)
    torch_classes = [name for name in dir(torch.optim) if isinstance(getattr(torch.optim, name), type)
                     and issubclass(getattr(torch.optim, name), torch.optim.Optimizer) and name != "Optimizer"]
    optimizers = {"deepspeed": list(ds_config.DEEPSPEED_OPTIMIZERS), "torch": sorted(torch_classes),
                  "arguments": optimizer_arguments(torch_classes), "schedulers": scheduler_arguments(),
                  "zero_tested": sorted({c.__name__ for c in ZERO_SUPPORTED_OPTIMIZERS} | {"MuonWithAuxAdam"})}
    schema = {
        "deepspeed_version": deepspeed.__version__,
        "optimizers": optimizers,
        "cpu_accelerator_ops": cpu_accelerator_ops(),
        "removed": removed,
        "deprecated": {path: dict(sorted(found.items())) for path, found in sorted(deprecated.items())},
        "generated_by": "scripts/gen_ds_schema.py",
        "open": sorted(OPEN),
        "keys": {path: sorted(found) for path, found in sorted(keys.items())},
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(schema, indent=1) + "\n")
    print(f"wrote {OUT} ({sum(len(v) for v in keys.values())} keys in {len(keys)} sections)")
    return 0


if __name__ == "__main__":
    script_args.parse(__doc__)
    sys.exit(main())
