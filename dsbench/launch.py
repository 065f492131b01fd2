"""``dsbench launch``: render (or read) the config, build the launcher's command, run or print it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dsbench import trainflags, trainspec
from dsbench.configs import accelerate, accelerate_worker
from dsbench.configs.api import (
    check_rendered,
    credit_preset,
    ds_file_of,
    from_preset,
    make_render_spec,
    name_sets,
    validate_accelerate,
)
from dsbench.configs.autofill import RULES as AUTO_RULES
from dsbench.configs.autofill import auto_paths
from dsbench.configs.findings import has_errors, launch_notes, refused_for_launch
from dsbench.configs.layout import in_config_keys, layout_of
from dsbench.configs.loader import load_config_strict
from dsbench.configs.render import render
from dsbench.configs.validate import ValidateContext, validate
from dsbench.configs.worker_flags import check_worker_flags
from dsbench.errors import InvalidConfig, UserError
from dsbench.hostfile import read_hostfile
from dsbench.io import atomic_write_json, atomic_write_text, check_output_path, read_text
from dsbench.launch_checks import check_hostfile_overrides, check_layout, check_yaml_layout
from dsbench.launch_request import (
    DEEPSPEED_ONLY,
    WORKER_ONLY,
    LaunchRequest,
    check_paths_here,
    check_request,
    check_yaml_here,
    nvme_folders,
)
from dsbench.launchers import LaunchCommand, LaunchSpec, build
from dsbench.launchers.accelerate import ACCELERATE_PRECISION
from dsbench.parallel import ParallelDims
from dsbench.run_dir import check_run_dir
from dsbench.strategies import SPLIT_ENGINES, TORCH_TP_ONLY


@dataclass(frozen=True, slots=True)
class PreparedLaunch:
    """The command to run and what was written for it (the DeepSpeed config: ``spec.ds_config``)."""

    spec: LaunchSpec
    command: LaunchCommand
    notes: list[str]
    train: trainspec.TrainSpec  # what every rank reads from run.json


# Render flags that the native strategies take as worker flags (deepspeed reads them from its config) -> TrainSpec.
_NATIVE_FIELDS = {"micro_batch": "micro_batch", "grad_accum": "grad_accum", "lr": "lr", "grad_clip": "grad_clip",
                  "precision": "precision", "warmup_steps": "lr_warmup_steps"}

# --pipeline-stages / --tp: each degree's render flag and its spelling. They are the torch engines' own worker flags
# (DeepSpeed reads them from its config).
_DEGREE_FLAGS = {"pp": ("pipeline_stages", "--pipeline-stages"), "tp": ("tp", "--tp")}


def launch_fields(req: LaunchRequest, strategy: str, ds_config: Path | None, summary_line: bool) -> dict[str, Any]:
    """The launch's part of the worker's run, as TrainSpec fields: run folder, model, strategy, DeepSpeed config,
    whether rank 0 prints its figures (``LaunchSpec.rank_prints_summary``), and the render flags the native engines
    take (a DeepSpeed config wins over them on its ranks). The user's flags after ``--`` win over these."""
    fields: dict[str, Any] = {"out": str(req.run_dir), "strategy": strategy, "summary_line": summary_line}
    if req.model:
        fields["model"] = req.model
    if ds_config is not None:
        fields["deepspeed_config"] = str(ds_config)
    degrees = [_DEGREE_FLAGS[degree][0] for degree in SPLIT_ENGINES.get(strategy, ())]  # torch_pp/_tp/_3d take them
    native = _NATIVE_FIELDS | {name: name for name in (*degrees, *WORKER_ONLY)}  # and the worker's own (it checks them)
    fields.update({field: req.render_flags[name] for name, field in native.items()
                   if req.render_flags.get(name) is not None})
    return fields


def _as_typed(message: str, req: LaunchRequest, world_size: int) -> str:
    """A layout error in the words of the command line: a degree that came from ``--config`` is named by its key in
    that file, one that a ``--set`` wrote by that ``--set``, and a flag the preset set as the preset's."""
    if req.config:
        named = in_config_keys(message)
        return message if named == message else f"{req.config}: {named}"
    return credit_preset(name_sets(message, req.sets), req.preset, from_preset(req.preset,
                                                                              _render_flags(req, world_size)))


def _checked_config(req: LaunchRequest, world: int, model: str, steps: int
                    ) -> tuple[Path, dict[str, Any], Any, list[str]]:
    """The DeepSpeed config as given (--config) or rendered from the flags for the ``model`` and ``steps`` the ranks
    train (a decaying schedule ends there), valid for this launch's world; the run folder's file for it, written once
    every check passed (a refused launch leaves nothing in its folder); its layout (worked out once: validation and
    :func:`check_layout`, which each rank makes again and where the model is checked, read it); the render's notes."""
    if req.config:
        config = load_config_strict(req.config)
        layout = layout_of(config, world) if isinstance(config, dict) else None
        # "auto" is the HF Trainer's to fill, and each rank fills it so from the worker's flags
        # (worker/setup.complete_ds_config), as a config passed to `deepspeed --deepspeed_config` is filled
        findings = validate(config, ValidateContext(world_size=world, layout=layout, allow_auto=True, cpu_ranks=req.cpu,
                                                    ranks_here=req.ranks_here))  # DeepSpeed's parser too
        if has_errors(findings):
            raise InvalidConfig(refused_for_launch(req.config, findings))
        notes = launch_notes(req.config, findings)
        unfilled = [path for path in auto_paths(config) if path not in AUTO_RULES]
        if unfilled:  # a rank would stop at "cannot resolve 'auto'"
            raise UserError(f"{req.config}: {unfilled[0]} is \"auto\", which neither the HF Trainer nor dsbench's "
                            "worker fills: set a value")
    else:  # the render's layout is the config's: make_render_spec takes the degrees a --set writes
        spec, _ = make_render_spec(_render_flags(req, world), req.preset, model, False, req.sets,
                                   check_model=False, defaults={"train_steps": steps})
        (config, notes), layout = render(spec), spec.dims()
        check_rendered(config, spec, world)  # refused as `dsbench render` refuses it: the --set that broke it
    return check_output_path(req.run_dir / "ds_config.json"), config, layout, notes


def _render_flags(req: LaunchRequest, world_size: int) -> dict[str, Any]:
    return {k: v for k, v in req.render_flags.items() if k not in WORKER_ONLY} | {"world_size": world_size}


def _base_spec(req: LaunchRequest) -> LaunchSpec:
    """The launch's processes as the request describes them, before any config is written."""
    hosts = tuple(read_hostfile(req.hostfile)) if req.hostfile else ()
    base = LaunchSpec(launcher=req.launcher, strategy=req.strategy, nproc_per_node=req.num_gpus,
                      hostfile=req.hostfile, hosts=hosts, include=req.include, exclude=req.exclude,
                      num_nodes=req.num_nodes, master_addr=req.master_addr, master_port=req.master_port,
                      cpu=req.cpu, script_args=req.script_args, extra_env=req.extra_env,
                      accelerate_config=str(req.run_dir / "accelerate_config.yaml"),
                      launch_script=str(req.run_dir / "launch_nodes.sh"), python=req.python, cwd=req.cwd,
                      launcher_backend=req.launcher_backend, slurm=req.slurm, as_root=req.as_root,
                      mixed_precision=ACCELERATE_PRECISION.get(req.render_flags.get("precision") or "fp32", "no"),
                      dp_shard=req.render_flags.get("dp_shard") or 0,
                      deepspeed_env_file=str((req.run_dir / ".deepspeed_env").absolute()))
    return with_inherited_env(base, req)


def prepare(req: LaunchRequest) -> PreparedLaunch:
    """Render/validate the config, write it into the run folder, and build the command."""
    if req.accelerate_config:
        return _prepare_user_yaml(req)
    check_request(req)
    check_run_dir(req.run_dir, req.config)
    _refuse_ignored_degrees(req)
    base = _base_spec(req)
    # torchrun and accelerate run the same ranks on every node: uneven slots are refused before anything is written
    world = base.even_world() if req.launcher in ("torchrun", "accelerate") else base.world_size()
    given = trainflags.given_flags(req.script_args)  # the user's flags after --, parsed once
    # the model the ranks train (one after -- wins, as in run.json) sizes ZeRO's buckets, as the HF Trainer does
    typed_model = given.get("model") or req.model
    model = typed_model or trainspec.DEFAULT_MODEL
    steps = max(1, given.get("steps", trainspec.DEFAULT_STEPS))  # a decaying LR schedule ends there (--steps 0: below)
    config_path, config, layout, notes = (_checked_config(req, world, model, steps) if req.strategy == "deepspeed"
                                          else (None, None, None, []))
    notes += _default_model_note(typed_model)
    # The worker's whole input as one typed description, built here from the launch's own values and the user's
    # flags after --, checked now rather than on every rank later; the ranks read it back from run.json.
    train = trainflags.for_launch(given, launch_fields(req, req.strategy, config_path, base.rank_prints_summary()))
    if config is not None:  # each flag's value checked above; whether the config would ignore it, here
        check_worker_flags(given, config, req.config)
    nvme = nvme_folders(config, typed=None if req.config else req.render_flags.get("nvme_path"))  # as typed
    notes += check_paths_here(train.dataset, nvme, req.cwd, local=req.ranks_here)
    try:
        notes += check_layout(train, config, world, resume=True,
                              dims=layout if isinstance(layout, ParallelDims) else None)
    except UserError as exc:
        raise UserError(_as_typed(str(exc), req, world)) from None
    if config_path is not None:
        atomic_write_json(config_path, config)
    # absolute: the per-node ssh script stops a failed job by this path (pkill -f), and nodes cd elsewhere
    run_file = trainspec.write(train, (Path(req.cwd) / req.run_dir / "run.json").resolve())
    spec = replace(base, ds_config=str(config_path) if config_path else None, run_file=str(run_file))
    return PreparedLaunch(spec=spec, command=build(spec), notes=notes, train=train)


def _default_model_note(typed: str | None) -> list[str]:
    """A launch that names no model trains the worker's default: said, as nothing else on the command line says it."""
    return [] if typed else [f"no --model given: the ranks train {trainspec.DEFAULT_MODEL}, the worker's default "
                             "(--model picks another)"]


def _refuse_ignored_degrees(req: LaunchRequest) -> None:
    """--pipeline-stages / --tp above 1 under a strategy that would ignore them."""
    for degree, (name, flag) in _DEGREE_FLAGS.items():
        takers = ("deepspeed", *(engine for engine, splits in SPLIT_ENGINES.items() if degree in splits))
        if (req.render_flags.get(name) or 1) > 1 and req.strategy not in takers:
            raise UserError(f"{flag} needs --strategy {' or '.join(takers)}; --strategy {req.strategy} would "
                            "ignore it")


# Flags that would be ignored beside a user's accelerate YAML, with what decides instead.
_YAML_DECIDES = {**DEEPSPEED_ONLY, "pipeline_stages": "--pipeline-stages", "tp": "--tp", **TORCH_TP_ONLY,
                 "pipeline_schedule": "--pipeline-schedule", "virtual_stages": "--virtual-stages"}
# The inline DeepSpeed settings of an accelerate YAML that fix a worker flag (accelerate's DeepSpeedPlugin writes
# them into the config it builds; the worker fills the rest from its flags).
_INLINE_FIXES = ("gradient_accumulation_steps", "gradient_clipping")


def with_inherited_env(spec: LaunchSpec, req: LaunchRequest) -> LaunchSpec:
    """Ranks on other nodes also get the launching shell's variables (:func:`inherited_env`), after the user's
    ``--env`` pairs, which win; local ranks inherit them anyway."""
    given = {key for key, _ in req.extra_env}
    inherited = tuple((k, v) for k, v in req.inherited_env if k not in given)
    return replace(spec, extra_env=req.extra_env + inherited) if spec.multinode() and inherited else spec


def check_user_yaml_request(req: LaunchRequest, config: dict[str, Any], ds_file: dict[str, Any] | None,
                            given: dict[str, Any]) -> None:
    """Flags that the YAML (or the DeepSpeed file it names) would override are refused by name: dsbench launch's
    own, and the worker's after ``--`` (``given``: trainflags.given_flags)."""
    typed = [flag for name, flag in _YAML_DECIDES.items() if req.render_flags.get(name) is not None]
    typed += ["--config"] * bool(req.config) + ["--preset"] * bool(req.preset) + ["--set"] * bool(req.sets)
    if typed:
        raise UserError(f"--accelerate-config: the YAML decides what {typed[0]} would set: drop {typed[0]} (or drop "
                        "--accelerate-config and let dsbench render the config)")
    inline = (accelerate.section_keys(config, "deepspeed_config") if config.get("distributed_type") == "DEEPSPEED"
        else {})
    where = accelerate.ds_config_file(config) if ds_file is not None else f"{req.accelerate_config}"
    # the settings that decide the worker's flags: the DeepSpeed file, or the inline plugin's accumulation and
    # clipping (the rest of the inline settings the worker completes from its flags: script_completes)
    settled = ds_file if ds_file is not None else {key: inline[key] for key in _INLINE_FIXES if key in inline}
    # dsbench launch's own flags that become worker fields (launch_fields), then the worker's after --, each value
    # checked first (as the run description checks it): whether the settings would win over them
    passed = {field: req.render_flags[name] for name, field in _NATIVE_FIELDS.items()
              if req.render_flags.get(name) is not None}
    check_worker_flags(passed, settled, where, accelerate=True, after=None, inline=ds_file is None)
    trainflags.for_launch(given, {})
    check_worker_flags(given, settled, where, accelerate=True, inline=ds_file is None)


def _prepare_user_yaml(req: LaunchRequest) -> PreparedLaunch:
    """``--accelerate-config``: check the user's YAML (and the DeepSpeed file it names) for the process count that
    will run, refuse what the worker cannot honour, and run ``accelerate launch --config_file`` on it as is."""
    assert req.accelerate_config
    path = req.accelerate_config
    check_run_dir(req.run_dir)
    overrides = {key: value for key, value in (("num_processes", req.num_processes),
                                               ("num_machines", req.num_machines)) if value is not None}
    hosts = tuple(read_hostfile(req.hostfile)) if req.hostfile else ()
    if hosts:
        selected = LaunchSpec(hosts=hosts, hostfile=req.hostfile, include=req.include, exclude=req.exclude,
                              num_nodes=req.num_nodes)
        overrides = check_hostfile_overrides(overrides, selected.even_world(), selected.nodes(), req.hostfile)
        # what the per-node commands pass (launchers/accelerate.py build): machine 0 is the first host
        overrides |= {"main_process_ip": selected.first_host(), "machine_rank": 0}
    given = trainflags.given_flags(req.script_args)  # the user's flags after --, parsed once
    config, processes, nvme = _checked_user_yaml(req, path, overrides, given)
    machines = accelerate.machine_count(config)
    args = [item for key, value in overrides.items() if not hosts for item in (f"--{key}", str(value))]
    if req.render_flags.get("precision"):
        args += ["--mixed_precision", ACCELERATE_PRECISION[req.render_flags["precision"]]]
    if req.port_given or (machines == 1 and config.get("main_process_port") is None and not hosts):
        args += ["--main_process_port", str(req.master_port)]  # one machine: dsbench's free port, not 29500
    base = LaunchSpec(launcher="accelerate", strategy="auto", nproc_per_node=max(1, processes // machines),
                      hostfile=req.hostfile, hosts=hosts, include=req.include, exclude=req.exclude,
                      num_nodes=req.num_nodes, master_addr=req.master_addr, master_port=req.master_port,
                      cpu=req.cpu, script_args=req.script_args, extra_env=req.extra_env, python=req.python,
                      cwd=req.cwd, launch_script=str(req.run_dir / "launch_nodes.sh"), as_root=req.as_root,
                      user_accelerate_config=path, accelerate_args=tuple(args))
    base = with_inherited_env(base, req)
    train = trainflags.for_launch(given, launch_fields(req, "auto", None, base.rank_prints_summary()))
    notes = (check_paths_here(train.dataset, nvme, req.cwd, local=not req.hostfile)
             + check_yaml_layout(train, config, processes, path) + _default_model_note(given.get("model") or req.model))
    req.run_dir.mkdir(parents=True, exist_ok=True)
    copy = req.run_dir / "accelerate_config.yaml"
    if not (copy.exists() and copy.resolve() == Path(path).resolve()):
        atomic_write_text(copy, read_text(path, "accelerate config"))  # the YAML as it was, beside its results
    run_file = trainspec.write(train, (Path(req.cwd) / req.run_dir / "run.json").resolve())
    spec = replace(base, run_file=str(run_file))
    return PreparedLaunch(spec=spec, command=build(spec), notes=notes, train=train)


def _checked_user_yaml(req: LaunchRequest, path: str, overrides: dict[str, Any], given: dict[str, Any]
                       ) -> tuple[dict[str, Any], int, list[tuple[str, str]]]:
    """The user's YAML with the counts this launch gives it, valid, runnable by the worker, and not contradicted
    by the flags typed beside it; its process count; and the NVMe folders it swaps to, by the key that names each."""
    config, findings = validate_accelerate(path, None, overrides=overrides)
    if config is None or has_errors(findings):
        raise InvalidConfig(refused_for_launch(path, findings))
    processes = accelerate.world_size(config)
    if processes is None:
        raise UserError(f"{path} has no num_processes: give --num-processes N")
    refusal = accelerate_worker.worker_refusal(config, processes)
    if refusal:
        raise UserError(f"{path}: {refusal}")
    ds_path, _ = ds_file_of(config, path)
    ds_config = load_config_strict(ds_path) if ds_path else None
    check_yaml_here(req, config, processes, accelerate.machine_count(config), (ds_path, ds_config))
    check_user_yaml_request(req, config, ds_config, given)
    return config, processes, (nvme_folders(ds_config, f"{ds_path}: ") if ds_path else accelerate.nvme_folders(config))


def materialize(prepared: PreparedLaunch) -> None:
    """Write the files the command needs (e.g. the accelerate YAML) atomically."""
    for path, text in prepared.command.files.items():
        atomic_write_text(path, text)
