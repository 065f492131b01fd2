"""The comparison matrix: strategies x world sizes x micro-batches x models, repeated (pure).

A cell is one real launch. Its id is readable and unique (``zero2-w2-mb2-gpt2-tiny-r0``); the
full definition lives in the cell's ``cell.json``, never only in folder names.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dsbench import strategies as registry
from dsbench.errors import UserError
from dsbench.layout_check import check_chunks
from dsbench.model_checks import check_tensor_parallel, check_ulysses
from dsbench.model_config import resolve_model
from dsbench.spec import DEFAULT_MICRO_BATCH, check_warmup
from dsbench.strategy_match import did_you_mean

DEFAULTS: dict[str, Any] = {
    "strategies": list(registry.DEFAULT_COMPARE), "world_sizes": [2], "micro_batches": [DEFAULT_MICRO_BATCH],
    "models": ["gpt2-mini"], "repeats": 1, "steps": 20, "warmup": 5, "seq_len": 128, "precision": "fp32",
    "compile": "off", "fused_optimizer": "auto"}
"""compare's matrix when neither flags nor a matrix file say otherwise (stated once: the cell, expand, the matrix
file's reader and compare's --help read it)."""
ACCEL = "accel:"
"""``accel:PATH.yaml`` in --strategies: a user's own accelerate YAML, run by ``launch --accelerate-config``."""


def accelerate_yaml_of(strategy: str) -> str | None:
    """The YAML path of an ``accel:PATH`` strategy (None for dsbench's own strategies)."""
    return strategy[len(ACCEL):] if strategy.startswith(ACCEL) else None


def label_of(strategy: str) -> str:
    """How a strategy is labelled in cells and reports: a user's YAML by its file name."""
    path = accelerate_yaml_of(strategy)
    return f"{ACCEL}{Path(path).name}" if path is not None else strategy


def _rank_multiple(strategy: str) -> int:
    """The world sizes a strategy runs on are multiples of this (:attr:`Strategy.rank_multiple`; a YAML's, 1)."""
    return 1 if accelerate_yaml_of(strategy) is not None else registry.get(strategy).rank_multiple


@dataclass(frozen=True, kw_only=True, slots=True)
class Cell:
    """One measured launch."""

    strategy: str
    world_size: int
    micro_batch: int
    model: str
    repeat: int = 0
    steps: int = DEFAULTS["steps"]
    warmup: int = DEFAULTS["warmup"]
    seq_len: int = DEFAULTS["seq_len"]
    precision: str = DEFAULTS["precision"]
    launcher: str | None = None
    """Override the strategy's default launcher (deepspeed strategies can also use accelerate)."""
    hostfile: str | None = None
    """Run across the hosts of this hostfile (``world_size`` = their slots) instead of this machine's ranks."""
    accelerate_config: str | None = None
    """A user's accelerate YAML (``accel:PATH``); ``strategy`` is then its label, ``accel:FILE_NAME``."""
    grad_accum: int = 1
    """Micro-steps per step on each rank of pure data parallelism (``dsbench tune`` varies it at a fixed global
    batch; model-parallel strategies accumulate their degree times more)."""
    checkpointing: bool = False
    """Activation checkpointing (the worker's --activation-checkpointing)."""
    compile: bool = False
    """torch.compile (the worker's --compile); the report labels the cell ``STRATEGY+compile``."""
    fused_optimizer: bool = False
    """torch AdamW's fused kernel (the worker's --fused-optimizer); the report labels the cell ``STRATEGY+fused``."""

    @property
    def id(self) -> str:
        model = self.model.replace("/", "_").replace(".", "_")
        strategy = re.sub(r"[^A-Za-z0-9_.-]", "-", self.strategy)
        layout = ((f"-ga{self.grad_accum}" if self.grad_accum != 1 else "") + ("-ckpt" if self.checkpointing else "")
            + ("-compiled" if self.compile else "") + ("-fused" if self.fused_optimizer else ""))
        return f"{strategy}-w{self.world_size}-mb{self.micro_batch}{layout}-{model}-r{self.repeat}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PRECISIONS = ("fp32", "bf16", "fp16")
"""compare's --precision (and a matrix file's precision)."""
MAX_CELLS = 10_000
"""The most cells one compare runs: each is a real launch of ten seconds or more, so 10,000 are over a day."""


def check_matrix(names: list[str], world_sizes: list[int], micro_batches: list[int], repeats: int,
                 steps: int, warmup: int, models: list[str], seq_len: int, precision: str) -> None:
    for flag, given in (("--strategies", names), ("--world-sizes", world_sizes), ("--micro-batches", micro_batches),
                        ("--models", models)):
        if not given:  # a comma alone, or an empty list in the matrix file: no cell at all
            raise UserError(f"{flag} is empty: give at least one")
        twice = next((value for value in given if given.count(value) > 1), None)
        if twice is not None and flag != "--strategies":  # a strategy twice: by its label, below
            raise UserError(f"{flag} names {twice} twice: name it once (--repeats runs each cell again)")
    if seq_len < 1:
        raise UserError(f"--seq-len must be >= 1, got {seq_len}")
    if precision not in PRECISIONS:
        raise UserError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if any(accelerate_yaml_of(s) == "" for s in names):
        raise UserError(f"{ACCEL} needs the YAML's path: {ACCEL}PATH.yaml")
    unknown = [s for s in names if not registry.known(s) and accelerate_yaml_of(s) is None]
    if unknown:
        raise UserError(f"unknown strategy {unknown[0]!r}{did_you_mean(unknown[0])}; choose from: "
                        f"{registry.choices()}, or {ACCEL}PATH.yaml (your accelerate YAML)")
    labels = [label_of(s) for s in names]
    twice = next((label for label in labels if labels.count(label) > 1), None)
    if twice:
        yamls = [s for s in names if label_of(s) == twice and accelerate_yaml_of(s) is not None]
        fix = ("give each YAML its own file name (a YAML's label is its file name)" if yamls
               else "name it once")
        raise UserError(f"--strategies names {twice} twice: {fix}")
    if any(w < 1 for w in world_sizes) or any(m < 1 for m in micro_batches) or repeats < 1:
        raise UserError("--world-sizes, --micro-batches and --repeats must be >= 1")
    if steps < 1:
        raise UserError(f"--steps must be >= 1, got {steps}")
    check_warmup(warmup, steps)


SPEED_MODES = {"off": (False,), "on": (True,), "both": (False, True)}
"""``--compile`` / ``--fused-optimizer``: without the option, with it, or each strategy both ways side by side."""
FUSED_MODES = {**SPEED_MODES, "auto": (True,)}
"""``--fused-optimizer auto`` (compare's default): the fused kernel wherever it applies, so that every strategy steps
with a fused Adam (DeepSpeed's strategies step its FusedAdam, or DeepSpeedCPUAdam under offload, by default)."""


def takes(strategy: str, option: str) -> bool:
    """Whether the worker applies a speed option to a strategy: ``compile`` all but the pipeline and tensor-parallel
    ones; ``fused-optimizer`` the ones stepping torch AdamW (not DeepSpeed's, which step its config's optimizer);
    neither a user's accelerate YAML (its own settings stand)."""
    if accelerate_yaml_of(strategy) is not None:
        return False
    how = registry.get(strategy)
    return how.compiles if option == "compile" else how.steps_torch_adamw


def fused_by_default(strategy: str) -> bool:
    """Whether a cell of ``strategy`` steps torch AdamW's fused kernel under compare's default (``auto``): the one
    rule that compare, tune, ``plan --verify`` and what-if share."""
    return takes(strategy, "fused-optimizer")


def _check_mode(strategies: list[str], option: str, mode: str) -> None:
    """A speed option's mode is known, and ``on`` names no strategy that cannot take it (``both`` and ``auto`` run
    those without it)."""
    modes = FUSED_MODES if option == "fused-optimizer" else SPEED_MODES
    if mode not in modes:
        raise UserError(f"--{option} must be one of {', '.join(modes)}, got {mode!r}")
    cannot = [s for s in strategies if not takes(s, option)]
    if mode == "on" and cannot:
        reason = "is not compiled by dsbench" if option == "compile" else "steps with DeepSpeed's optimizer"
        raise UserError(f"--{option} on: {label_of(cannot[0])} {reason}; use --{option} both, or leave it out of "
                        "--strategies")


def check_models(names: list[str], models: list[str], seq_len: int) -> None:
    """Every model resolves and has positions for ``seq_len``, and the model-parallel strategies get models they
    can split, as the launch checks them (model_checks.py: the family each split takes, heads and key/value heads
    divisible by tp, a layer per stage), before any cell runs."""
    for model in models:
        shape = resolve_model(model)
        if seq_len > shape.max_positions:
            raise UserError(f"--seq-len {seq_len} exceeds {shape.name}'s {shape.max_positions} positions")
        arch = shape.arch
        for name in names:
            how = registry.lookup(name)
            if how is not None and how.model_parallel > 1:
                try:  # the split the launch checks (layout_check.py), in its words, for every cell of the strategy
                    dims = how.dims(how.rank_multiple)
                    dims.check_model(name=shape.name, heads=shape.heads, kv_heads=shape.kv_heads, layers=shape.layers)
                    check_tensor_parallel(arch, how.tp, how.engine if how.engine in registry.SPLIT_ENGINES else None)
                    check_ulysses(how.ulysses, seq_len, shape.sliding_window())
                    check_chunks(shape, dims.pp, how.virtual_stages)
                except UserError as exc:
                    raise UserError(f"--strategies {name}: {exc}") from None


def variants(strategy: str, compile: str, fused_optimizer: str) -> list[tuple[bool, bool]]:
    """The (compile, fused optimizer) pairs a strategy runs under the two modes: each option's values where the
    worker applies it to the strategy, off where it does not."""
    compiled = SPEED_MODES[compile] if takes(strategy, "compile") else (False,)
    fused = FUSED_MODES[fused_optimizer] if takes(strategy, "fused-optimizer") else (False,)
    return list(itertools.product(compiled, fused))


def expand(strategies: list[str], world_sizes: list[int], micro_batches: list[int], models: list[str],
           repeats: int = 1, steps: int = DEFAULTS["steps"], warmup: int = DEFAULTS["warmup"],
           seq_len: int = DEFAULTS["seq_len"], precision: str = DEFAULTS["precision"], compile: str = "off",
           fused_optimizer: str = "off", hostfile: str | None = None, ranks_from: str | None = None) -> list[Cell]:
    """All cells, in run order. ``single`` only runs at world size 1 (and always there, as the baseline); with a
    ``hostfile`` every other cell runs across its hosts. ``ranks_from`` names what gave the world sizes in a refusal
    (default: ``--world-sizes``, or the hostfile's slots)."""
    check_matrix(strategies, world_sizes, micro_batches, repeats, steps, warmup, models, seq_len, precision)
    yaml = next((s for s in strategies if accelerate_yaml_of(s) is not None), None)
    if hostfile and yaml:
        raise UserError(f"--strategies {yaml}: a user's accelerate YAML runs on this machine's ranks here; drop it "
                        "or --hostfile")
    _check_mode(strategies, "compile", compile)
    _check_mode(strategies, "fused-optimizer", fused_optimizer)
    if compile != "off" and warmup < 1:
        raise UserError("--compile needs --warmup >= 1: compilation must stay out of the measured window")
    check_models(strategies, models, seq_len)
    placed = _placed(strategies, world_sizes, hostfile, ranks_from)
    count = len(models) * len(micro_batches) * repeats * sum(
        len(variants(strategy, compile, fused_optimizer)) for strategy, _ in placed)
    if count > MAX_CELLS:  # counted before any is built: --repeats 100000000 would fill the memory first
        raise UserError(f"the matrix has {count:,} cells: at most {MAX_CELLS:,} in one compare")
    cells = [Cell(strategy=label_of(strategy), world_size=world, micro_batch=micro, model=model, repeat=repeat,
                  steps=steps, warmup=warmup, seq_len=seq_len, precision=precision,
                  accelerate_config=accelerate_yaml_of(strategy), compile=compiled, fused_optimizer=fused,
                  hostfile=hostfile if world > 1 else None)
             for model, micro, (strategy, world), repeat in itertools.product(models, micro_batches, placed,
                                                                              range(repeats))
             for compiled, fused in variants(strategy, compile, fused_optimizer)]
    # a strategy's variants (eager/compiled, fused or not) side by side, so that drift of the machine falls on all
    return sorted(cells, key=lambda c: (c.model, c.micro_batch, c.world_size, c.repeat))


def _placed(strategies: list[str], world_sizes: list[int], hostfile: str | None, ranks_from: str | None
            ) -> list[tuple[str, int]]:
    """Each strategy at each world size it can run at; one it cannot place at any is refused."""
    placed = [(strategy, world) for strategy in strategies for world in sorted(set(world_sizes))
              # single runs at 1 rank; model-parallel strategies need a multiple of their degree (and of the shard
              # group: HSDP's replicas each a whole number of groups)
              if not (strategy == "single" and world != 1 or world % _rank_multiple(strategy))]
    if "single" in strategies and 1 not in world_sizes:
        placed.append(("single", 1))  # the baseline of scaling efficiency
    unplaced = [s for s in strategies if s not in {strategy for strategy, _ in placed}]
    if unplaced:
        given = ",".join(map(str, world_sizes))
        source = ranks_from or (f"--hostfile {hostfile} ({given} slots)" if hostfile else f"--world-sizes {given}")
        raise UserError(f"--strategies {unplaced[0]} runs on a multiple of {_rank_multiple(unplaced[0])} ranks; "
                        f"{source} gives it no cell")
    return placed


def cell_launch_args(cell: Cell, run_dir: Path, nvme_path: str | None = None, for_user: bool = False) -> list[str]:
    """``dsbench launch`` arguments for a cell (the same command a user would type). ``for_user``: the command a
    user is shown to run it again (tune's winner), with the launch's own run folder and its progress lines (until
    2026-12-03 it carried the cell's ``--run-dir`` and ``--quiet``)."""
    worker = ["--steps", str(cell.steps), "--warmup", str(cell.warmup), "--seq-len", str(cell.seq_len),
              *([] if for_user else ["--quiet"])]
    folder = [] if for_user else ["--run-dir", str(run_dir)]
    if cell.accelerate_config:  # the YAML on this machine's ranks, in the matrix's precision like every cell
        return ["--accelerate-config", cell.accelerate_config, "--num-processes", str(cell.world_size),
                "--num-machines", "1", "--micro-batch", str(cell.micro_batch), "--model", cell.model,
                "--precision", cell.precision, *(["--grad-accum", str(cell.grad_accum)] if cell.grad_accum > 1 else []),
                *folder, "--", *worker]
    how = registry.get(cell.strategy)
    ranks = ["--hostfile", cell.hostfile] if cell.hostfile else ["--num-gpus", str(cell.world_size)]
    args = ["--strategy", how.engine, "--launcher", cell.launcher or how.launcher, *ranks,
            "--micro-batch", str(cell.micro_batch), "--model", cell.model, *folder, *how.launch_flags]
    if how.model_parallel * cell.grad_accum > 1:
        args += ["--grad-accum", str(how.model_parallel * cell.grad_accum)]
    if cell.checkpointing:
        worker.append("--activation-checkpointing")
    if cell.compile:
        worker.append("--compile")
    if cell.fused_optimizer:
        worker.append("--fused-optimizer")
    if cell.precision != "fp32":
        args += ["--precision", cell.precision]
    if "nvme" in (how.offload, how.offload_param):
        args += ["--nvme-path", nvme_path or str(run_dir / "nvme")]
    return [*args, "--", *worker, *how.worker_flags]
