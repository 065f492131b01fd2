"""Library calls behind ``dsbench render``, ``validate`` and ``explain`` (flags -> spec -> result)."""

from __future__ import annotations

import math
import re
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from dsbench.configs import accelerate, accelerate_check, accelerate_explain, accelerate_worker
from dsbench.configs.batch import for_any_world
from dsbench.configs.findings import Finding
from dsbench.configs.layout import DEGREE_KEYS, in_config_keys, int_or_none
from dsbench.configs.loader import load_config
from dsbench.configs.overrides import apply_overrides, get_path
from dsbench.configs.render import render
from dsbench.configs.templates import preset
from dsbench.configs.validate import ValidateContext, validate
from dsbench.errors import UserError
from dsbench.hostfile import read_hostfile, select_slots, world_size_of
from dsbench.io import read_text
from dsbench.model_checks import check_autotp
from dsbench.model_config import resolve_model
from dsbench.models import ModelShape
from dsbench.spec import RenderSpec

_SPEC_FIELDS = {f.name for f in fields(RenderSpec) if f.init} - {"explicit", "sets", "keep_auto", "hidden_size"}


def world_size_from(world_size: int | None, hostfile: str | None, include: str = "", exclude: str = "") -> int | None:
    """World size from ``--world-size`` or a hostfile's selected slots (not both)."""
    if hostfile:
        if world_size is not None:
            raise UserError("give --world-size or --hostfile, not both")
        return world_size_of(select_slots(read_hostfile(hostfile), include, exclude))
    if include or exclude:
        raise UserError("--include/--exclude need --hostfile")
    return world_size


PIPELINE_DEFAULT_ZERO = 1
"""ZeRO stage for a pipeline when none is named: DeepSpeed's pipeline engine takes 0 or 1, and 1 shards the
optimizer states (the default stage 2 would be refused)."""


def make_render_spec(flags: dict[str, Any], preset_name: str | None = None, model: str | None = None,
                     keep_auto: bool = False, sets: tuple[str, ...] = (), check_model: bool = True,
                     defaults: dict[str, Any] | None = None) -> tuple[RenderSpec, ModelShape | None]:
    """Combine preset values, explicit flags (``None`` = not given) and the model into a spec.

    Precedence: explicit flag > preset > ``defaults`` (the caller's, not counted as given: a launch's
    ``train_steps`` is its run's steps) > RenderSpec default. ``check_model=False``: the caller checks the model
    against the layout itself (``dsbench launch``: the one check every rank makes, layout_check.py). No world size:
    the fewest ranks the layout runs on, and ``render_config`` leaves the batch for DeepSpeed to derive."""
    values: dict[str, Any] = preset(preset_name) if preset_name else {}
    unknown = set(values) - _SPEC_FIELDS
    if unknown:
        raise UserError(f"preset {preset_name!r} sets unknown fields {sorted(unknown)}")
    explicit = {name for name, value in flags.items() if value is not None}
    values.update({name: flags[name] for name in explicit})
    set_degrees = degrees_written(sets)
    values.update(set_degrees)  # applied after the flags, as render applies every --set
    chosen = set(values)
    values = {**(defaults or {}), **values}
    if "world_size" not in values:
        values["world_size"] = math.prod(values.get(name) or 1 for name in ("pipeline_stages", "tp", "ulysses"))
    if (values.get("pipeline_stages") or 1) > 1 and "zero" not in values:
        values["zero"] = PIPELINE_DEFAULT_ZERO  # no stage named: one the pipeline engine accepts (render notes it)
    shape = resolve_model(model) if model else None
    try:
        spec = RenderSpec(**values, keep_auto=keep_auto, sets=tuple(sets),
                          hidden_size=shape.hidden if shape else None,
                          explicit=frozenset(explicit | chosen | ({"hidden_size"} if shape else set())))
        if shape and check_model:
            spec.dims().check_model(name=shape.name, heads=shape.heads, kv_heads=shape.kv_heads,
                                    layers=shape.layers)
            if spec.tp > 1:
                check_autotp(shape.arch)
    except UserError as exc:
        message = credit_preset(str(exc), preset_name, from_preset(preset_name, {**flags, **set_degrees}))
        raise UserError(name_sets(message, sets)) from None
    return spec, shape


_ABSENT = object()


def degrees_written(sets: tuple[str, ...]) -> dict[str, int]:
    """The parallel degrees the ``--set`` items write (``pipeline.stages``, ``tensor_parallel.autotp_size``,
    ``sequence_parallel_size``), as RenderSpec fields: the layout the rendered config will have, so that the render's
    batch arithmetic (accumulation for ``--global-batch``) and the launch's one layout use them, not the flags' degrees
    that the ``--set`` replaces. Each is read as the config's layout reads it (:func:`configs.layout.parallel_degrees`:
    a value that is not a whole number, or 0, is 1; validation names it)."""
    written = apply_overrides({}, sets)
    out = {}
    for flag, key in DEGREE_KEYS.items():
        value = get_path(written, key, _ABSENT)
        if value is not _ABSENT:  # the flag's RenderSpec field: --pipeline-stages -> pipeline_stages
            out[flag.removeprefix("--").replace("-", "_")] = int_or_none(value) or 1
    return out


def name_sets(message: str, sets: tuple[str, ...]) -> str:
    """A layout message that names a degree the user gave as a ``--set``: by its config key, after that ``--set``
    (``--set pipeline.stages=2: world size 3 is not divisible by pipeline.stages 2 x --tp 1``)."""
    named = []
    for flag, key in DEGREE_KEYS.items():
        items = [item for item in sets if f"{key}.".startswith(item.partition("=")[0].strip() + ".")]
        renamed = in_config_keys(message, {flag: key})
        if items and renamed != message:
            message, named = renamed, [*named, f"--set {items[-1]}"]
    return f"{', '.join(named)}: {message}" if named else message


def from_preset(preset_name: str | None, flags: dict[str, Any]) -> dict[str, Any]:
    """The values the preset sets that no typed flag replaced (``flags``: ``None`` = not given)."""
    values = preset(preset_name) if preset_name else {}
    return {name: value for name, value in values.items() if flags.get(name) is None}


def credit_preset(message: str, preset_name: str | None, from_preset: dict[str, Any]) -> str:
    """Name the preset beside a flag the user did not type but the preset set (``--offload-param nvme (from
    --preset zero3_nvme)``), so that an error never blames a flag that is not on the command line."""
    for name, value in sorted(from_preset.items()):
        flag = "--" + name.replace("_", "-")
        shown = f"( {re.escape(str(value))})?" if value is not None else ""
        message = re.sub(rf"{re.escape(flag)}{shown}(?![\w-])", lambda m: f"{m.group(0)} (from --preset "
                         f"{preset_name})", message, count=1)
    return message


def render_config(flags: dict[str, Any], preset_name: str | None = None, model: str | None = None,
                  keep_auto: bool = False, sets: tuple[str, ...] = ()) -> tuple[dict[str, Any], list[str]]:
    """Render a config from CLI-style flags; returns the config and notes. The result is validated as
    ``dsbench validate`` would (with DeepSpeed's parser too when ``--set`` changed it): a rendered config that
    validate would reject is refused, naming the ``--set`` that broke it."""
    spec, _ = make_render_spec(flags, preset_name, model, keep_auto, sets)
    config, notes = render(spec)
    if "world_size" not in spec.explicit and not keep_auto:  # no ranks named: a config for any number of them
        config, note = for_any_world(config, spec.explicit, sets)
        notes.append(note)
    check_rendered(config, spec, flags.get("world_size"))
    return config, notes


def check_rendered(config: dict[str, Any], spec: RenderSpec, world: int | None) -> None:
    """A rendered config validated as ``dsbench validate`` would on ``world`` ranks, with DeepSpeed's own parser
    where a ``--set`` wrote into it; its first error in one line naming that ``--set`` (``dsbench render`` and
    ``dsbench launch`` both refuse it so). The spec's layout is the config's (make_render_spec reads the ``--set``
    degrees), so it is not worked out again."""
    context = ValidateContext(world_size=world, allow_auto=spec.keep_auto, layout=spec.dims() if world else None)
    errors = [f for f in validate(config, context, deepspeed_check=bool(spec.sets)) if f.severity == "error"]
    if errors:
        raise UserError(_blame(errors[0], spec.sets))


def _blame(finding: Finding, sets: tuple[str, ...]) -> str:
    """The ``--set`` that wrote (or sits above) the finding's path, else the rendered config as a whole."""
    for item in reversed(sets):
        key = item.partition("=")[0]
        if finding.path == key or finding.path.startswith(key + ".") or key.startswith(finding.path + "."):
            return f"--set {item}: {finding.text()}"  # path: message. Fix: ..., as validate says it
    return f"the rendered config is invalid: {finding.text()}"


def validate_file(path: str, world_size: int | None, allow_auto: bool,
                  deepspeed_check: bool = True) -> tuple[Any, list[Finding]]:
    """Load and validate a config file (DeepSpeed JSON, or an accelerate YAML): ``(config or None, findings)``."""
    if accelerate.looks_like_accelerate(path):
        return validate_accelerate(path, world_size, deepspeed_check)
    config, findings = load_config(path)
    if config is None:
        return None, findings
    return config, findings + validate(config, ValidateContext(world_size=world_size, allow_auto=allow_auto),
                                       deepspeed_check=deepspeed_check)


def load_accelerate(path: str) -> tuple[dict[str, Any] | None, list[Finding]]:
    """Read and parse an accelerate YAML (bounded, regular files only)."""
    return accelerate.parse_yaml(read_text(path, "accelerate config"), path)


def load_accelerate_strict(path: str) -> dict[str, Any]:
    """An accelerate YAML that must parse and check clean (for explain and render): its first error is one line."""
    config, findings = load_accelerate(path)
    accelerate.require_valid(findings, path)
    assert config is not None
    accelerate.require_valid(accelerate_check.check(config), path)
    return config


def ds_file_of(config: dict[str, Any], yaml_path: str) -> tuple[str | None, list[Finding]]:
    """The DeepSpeed file an accelerate YAML names, resolved as accelerate resolves it (from the folder
    ``accelerate launch`` runs in); a file found only beside the YAML is a finding."""
    name = accelerate.ds_config_file(config)
    if not name:
        return None, []
    where = "deepspeed_config.deepspeed_config_file"
    if not isinstance(name, str) or "\0" in name:
        return None, [Finding(severity="error", code="bad-type", path=where, message=f"{str(name)[:80]!r} is not a "
                              "path", fix="give the DeepSpeed JSON's path")]
    if accelerate.looks_like_accelerate(name):
        # read as a DeepSpeed JSON, never as another YAML: a YAML naming itself would be followed without end
        return None, [Finding(severity="error", code="bad-type", path=where, message=f"{name} is a YAML file; "
                              "accelerate reads a DeepSpeed JSON config there", fix="give the DeepSpeed JSON's path")]
    if Path(name).is_file():
        return name, []
    if Path(name).exists():
        return None, [Finding(severity="error", code="missing-file", path=where, message=f"{name} is not a regular "
                              "file", fix="give the DeepSpeed JSON's path")]
    beside = Path(yaml_path).parent / name
    if beside.is_file():
        return str(beside), [Finding(severity="warning", code="relative-path", path=where, message=f"{name} "
                                     f"is not in the current folder, only beside {yaml_path}: accelerate reads it "
                                     "from the folder it is launched in", fix=f"launch from {beside.parent}, or "
                                     "give an absolute path")]
    return None, [Finding(severity="error", code="missing-file", path=where, message=f"{name} does not exist "
                          "(accelerate reads it from the folder it is launched in)", fix="give the DeepSpeed "
                          "JSON's path")]


def validate_accelerate(path: str, world_size: int | None, deepspeed_check: bool = True,
                        overrides: dict[str, Any] | None = None) -> tuple[dict[str, Any] | None, list[Finding]]:
    """An accelerate YAML's findings, then the findings of the DeepSpeed file it names (checked for the
    YAML's process count), under that file's name. ``overrides``: top-level keys replaced as ``accelerate
    launch``'s own flags replace them (``--num_processes`` ...), before any check."""
    config, findings = load_accelerate(path)
    if config is None:
        return None, findings
    config = {**config, **(overrides or {})}
    findings = findings + accelerate_check.check(config)
    hostfile = accelerate.section_keys(config, "deepspeed_config").get("deepspeed_hostfile")
    if hostfile:
        try:
            read_hostfile(str(hostfile))
        except UserError as exc:
            findings.append(Finding(severity="error", code="hostfile", path="deepspeed_config.deepspeed_hostfile",
                                    message=str(exc), fix="`dsbench hostfile check` lists every bad line"))
    ds_path, problems = ds_file_of(config, path)
    findings += problems
    if ds_path:
        world = world_size or accelerate.world_size(config)
        ds_config, ds_findings = validate_file(ds_path, world, allow_auto=True, deepspeed_check=deepspeed_check)
        # accelerate fills "auto" itself (from the script's optimizer, scheduler and batch): not a finding here
        ds_findings = [f for f in ds_findings if f.code != "unresolved-auto"]
        if isinstance(ds_config, dict) and "zero_optimization" not in ds_config:
            # accelerate's DeepSpeedPlugin raises "Please specify the ZeRO optimization config"
            ds_findings.append(Finding(severity="error", code="missing-key", path="zero_optimization",
                                       message="accelerate refuses a DeepSpeed file without zero_optimization",
                                       fix='add "zero_optimization": {"stage": N}'))
        findings += [replace(f, path=f"{ds_path}:{f.path}" if f.path else ds_path) for f in ds_findings]
    return config, findings


def load_valid_config(path: str, world_size: int | None, unread: tuple[str, ...] = ()) -> dict[str, Any]:
    """A DeepSpeed config to describe or use: it must pass what ``dsbench validate --allow-auto`` checks (for
    ``world_size`` when given), else its first error is one line (exit 2), never a wrong description.
    ``unread``: finding codes about keys the caller does not read, which it lets pass."""
    from dsbench.configs.loader import load_config_strict

    config = load_config_strict(path)
    # dsbench's own checks (DeepSpeedConfig's import takes seconds and is validate's; its findings repeat ours)
    errors = [f for f in validate(config, ValidateContext(world_size=world_size, allow_auto=True),
                                  deepspeed_check=False) if f.severity == "error" and f.code not in unread]
    if errors:
        where = f"{errors[0].path}: " if errors[0].path else ""
        raise UserError(f"{path} is invalid ({where}{errors[0].message}); `dsbench validate {path}` lists every "
                        "problem")
    return config


def explain_accelerate(path: str) -> list[str]:
    """``dsbench explain FILE.yaml``: the YAML in plain words, with the DeepSpeed file it names explained in turn.
    A YAML with errors is refused (one line), never explained."""
    from dsbench.configs.explain import explain as explain_ds

    config = load_accelerate_strict(path)
    ds_path, problems = ds_file_of(config, path)
    accelerate.require_valid(problems, path)
    world = accelerate.world_size(config)
    ds_lines = explain_ds(load_valid_config(ds_path, world), world) if ds_path else None
    return accelerate_explain.explain(config, ds_lines)


def from_accelerate_yaml(path: str) -> dict[str, Any]:
    """``render --from-accelerate``: the DeepSpeed config an accelerate YAML's inline settings make, checked by the
    DeepSpeed validator (its "auto" batch sizes are accelerate's to fill). A ``parallelism_config`` sp_size under
    DEEPSPEED is written as ``sequence_parallel_size``: accelerate hands DeepSpeed the degree through its mpu, but a
    ``deepspeed`` launch of the file, and transformers' ZeRO-3 ``zero.Init`` (which builds its config without the
    mpu), divide the world by that key alone (deepspeed 0.19 runtime/config.py, "HF zero.init case")."""
    config = load_accelerate_strict(path)
    out = accelerate_worker.to_deepspeed(config)
    if (sp := accelerate.ulysses_degree(config)) > 1:
        out["sequence_parallel_size"] = sp
    errors = [f for f in validate(out, ValidateContext(world_size=accelerate.world_size(config), allow_auto=True))
              if f.severity == "error"]
    if errors:
        raise UserError(f"{path}: its DeepSpeed config is invalid: {errors[0].path}: {errors[0].message}")
    return out
