"""``dsbench plan --write DIR``: the recommendation's DeepSpeed config and the accelerate YAML that runs it, in a new
folder (the command to launch it is the recommendation's own)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsbench.errors import UserError
from dsbench.strategies import Strategy


def _write_ds_config(folder: Path, how: Strategy, work: dict[str, Any], accum: int, world: int,
                     model: str | None) -> str:
    """The recommendation's DeepSpeed config, rendered from its strategy and workload, as FOLDER/ds_config.json."""
    from dsbench.configs.api import render_config
    from dsbench.io import atomic_write_text, dumps_json

    flags = {"zero": how.zero, "offload": None if how.offload == "none" else how.offload,
             "offload_param": None if how.offload_param == "none" else how.offload_param,
             "tp": how.tp if how.tp > 1 else None, "pipeline_stages": how.pp if how.pp > 1 else None,
             "precision": work["precision"], "micro_batch": work["micro_batch"], "grad_accum": accum,
             "world_size": world}
    config, _ = render_config(flags, None, model, False, ())
    path = str(folder / "ds_config.json")
    atomic_write_text(path, dumps_json(config))
    return path


def write_recommendation(directory: str, result: dict[str, Any], model: str | None) -> list[str]:
    """The recommendation's DeepSpeed config (DeepSpeed strategies) and the accelerate YAML that runs it, in a new
    folder; the command to launch it is the recommendation's."""
    from dsbench.io import atomic_write_text
    from dsbench.launchers.accelerate import ACCELERATE_PRECISION, MAIN_NODE_IP, accelerate_yaml, yaml_text
    from dsbench.plan.candidate import Candidate
    from dsbench.strategies import RENDERED_ENGINES

    rec = result["recommendation"]
    if rec is None or not rec["launchable"]:
        raise UserError("--write: " + ("nothing fits, so there is no recommendation to write" if rec is None else
                                       f"dsbench cannot launch the recommendation ({rec['name']}) yet"))
    folder = Path(directory)
    if folder.exists():
        raise UserError(f"--write {directory}: exists; plan writes a new folder and never replaces one")
    row = next(c for c in result["candidates"] if c["rank"] == 1)
    how, cluster, work = Candidate.from_dict(row).runs_as, result["cluster"], result["workload"]
    world = cluster["nodes"] * cluster["gpus_per_node"]
    accum = how.dims(world).accumulation_for(work["grad_accum"])
    folder.mkdir(parents=True)
    written, ds_config = [], None
    if how.engine == "deepspeed":
        ds_config = _write_ds_config(folder, how, work, accum, world, model)
        written.append(ds_config)
    if how.engine in RENDERED_ENGINES and how.tp == how.pp == 1:  # accelerate runs no AutoTP or pipeline engine
        yaml_path = str(folder / "accelerate.yaml")
        yaml = accelerate_yaml(how.engine, processes=world, machines=cluster["nodes"],
                               main_ip="127.0.0.1" if cluster["nodes"] == 1 else MAIN_NODE_IP, port=29500,
                               ds_config=ds_config, mixed_precision=ACCELERATE_PRECISION[work["precision"]],
                               dp_shard=how.dp_shard)
        atomic_write_text(yaml_path, yaml_text(yaml, yaml_path, by="dsbench plan --write"))
        written.append(yaml_path)
    return written
