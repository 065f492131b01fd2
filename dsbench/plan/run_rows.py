"""dsbench's own GPU runs as rows of the oracle schema (plan/replay.py), so that the GPU model predicts them and
fits the host's constant on them: ``scripts/runs_to_oracle.py`` for stored runs, ``dsbench calibrate --check`` for
its check cells (pure: it reads run folders, starts nothing).

Step time is the wall clock over the measured window divided by its steps; peak memory is the run's
``torch.cuda.max_memory_allocated`` (the replay compares dsbench's rows with the model's allocated peak). Runs the
schema cannot describe (NVMe offload, CPU runs, a GPU the profiles do not know) have none: the reason is returned.
"""

from __future__ import annotations

from pathlib import Path

from dsbench.models import shape_of_record
from dsbench.plan.gpu_calibration import kind_of_device
from dsbench.plan.gpu_layout import OFFLOADED, PRICED, shape_of_model
from dsbench.plan.oracle_csv import COLUMNS, OPTIONAL, OracleRow, typed_row
from dsbench.records import header_of, read_records
from dsbench.run_record import RunHeader, read_summary
from dsbench.strategy_match import name_of_run
from dsbench.zero_section import zero_settings

REPLAYED_RECOMPUTE = ("none", "full", "selective")
"""The worker's ``--recompute`` values the replay prices as they are (plan/gpu_layout.RECOMPUTE): its
``selective`` is the attention core, as Korthikanti et al.'s and the replay's."""


def run_row(folder: Path, gpu_name: str, index: int, kind: str | None = None) -> dict[str, object] | str:
    """The oracle row of one run folder, or why it has none."""
    header = RunHeader.from_record(header_of(read_records(folder / "metrics.jsonl")), str(folder / "metrics.jsonl"))
    summary = read_summary(folder)
    if summary is None or not summary.ok or summary.throughput is None or header.shape is None:
        return "not a finished run"
    strategy = _strategy(header)
    if strategy not in PRICED:
        return strategy
    if header.recompute not in REPLAYED_RECOMPUTE:
        return (f"recompute {header.recompute}: dsbench's op policy saves every matmul output, the replay's 'op' "
                "(torchtitan's) every second one")
    kind = kind or kind_of_device(gpu_name)  # a calibrated profile names its own kind (gpu_calibration)
    if kind is None or not header.device.startswith("cuda"):
        return f"not on a GPU the profiles know ({gpu_name or header.device})"
    model = header.shape
    shape = shape_of_model(shape_of_record(model))  # the GPU model's reading of it, as the ranking's
    window = summary.throughput
    # dsbench's single and DDP engines train fp32 weights under torch.autocast (worker/engines/native.py); the
    # replay reads the word from the note
    native = header.engine in ("single", "ddp") and header.precision != "fp32"
    autocast = "; autocast over fp32 weights" if native else ""
    return {"source": f"dsbench-{kind.split('-')[0]}", "row": index, "model": model["name"],
            # the schema's optional columns (plan/replay.OPTIONAL): a stated head width, Qwen3's q/k norms
            "head_dim": shape.head_dim or None, "qk_norm": 1 if shape.qk_norm else None,
            "arch": shape.arch, "layers": shape.layers, "hidden": shape.hidden, "heads": shape.heads,
            "kv_heads": shape.kv_heads, "ffn": shape.ffn, "vocab": shape.vocab, "seq_len": header.seq_len,
            "gpu": kind, "gpus": header.world_size,
            "gpus_per_node": header.world_size, "strategy": strategy,
            "tp": header.tp, "pp": 1, "cp": 1, "micro_batch": header.micro_batch,
            "global_batch": header.global_batch,
            "recompute": header.recompute, "sequence_parallel": 0,
            "precision": header.precision, "compile": int(bool(header.speed.compile)),
            "measured_step_s": round(window.step_s, 6),
            "measured_tokens_per_s_per_gpu": round(window.tokens_per_s_per_rank or window.tokens_per_s
                                                   / header.world_size, 1),
            "measured_peak_mem_gib": round(max(summary.peak_memory_bytes_per_rank) / 2**30, 3),
            "note": f"dsbench run {folder.name} of {(header.started_at or '')[:10]} (wall clock"
                    f" over {window.steps} measured steps; peak = "
                    f"torch.cuda.max_memory_allocated){autocast}; {gpu_name}"}


def _strategy(header: RunHeader) -> str:
    """The run's strategy as the oracle schema spells it (compare's name for an offloaded ZeRO run), or why it has
    none."""
    if header.engine in ("single", "ddp"):  # the single loop is DDP's data parallelism at world size 1
        return "ddp"
    if header.engine == "fsdp":
        return "fsdp"
    zero = zero_settings(header.ds_config or {})
    stage, offload, params = zero.stage, zero.offload, zero.offload_param
    if offload == "none":
        return f"zero{stage}" if stage else "ddp"  # stage 0: DeepSpeed's data parallelism, priced as DDP's
    name = name_of_run("deepspeed", zero=stage, offload=offload, offload_param=params)
    if name not in OFFLOADED or OFFLOADED[name][1] != (params != "none"):
        return (f"offload_optimizer {offload}, offload_param {params}: the GPU model prices compare's "
                f"{' and '.join(OFFLOADED)} only")
    return name


def oracle_row(folder: Path, gpu_name: str, index: int, kind: str | None = None) -> OracleRow | str:
    """:func:`run_row` typed as the replay reads a CSV row, or why the run has none."""
    values = run_row(folder, gpu_name, index, kind)
    if isinstance(values, str):
        return values
    text = {column: "" if values.get(column) is None else str(values[column]) for column in (*COLUMNS, *OPTIONAL)}
    return OracleRow(typed_row(folder, index, text), str(folder))
