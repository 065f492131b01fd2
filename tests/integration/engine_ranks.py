"""One rank of tests/integration/test_engine_ranks.py, started by torchrun on 4 CPU ranks (gloo): the torch engines
built directly, for what a launch adds nothing to (one torchrun instead of a launch per engine).

- The fp16 loss scale: each torch engine (and FSDP as HSDP: 2 shard groups of 2) trains llama-tiny three steps
  with the scale off, then on (fp32: the scale, a power of two, changes no bit), then on with an inf put into one
  gradient of the last rank at step 1.
- The families a launch test does not train: one process (single) against torch_tp (tp 2 x dp 2), torch_3d
  (tp 2 x pp 2) and FSDP's HSDP (dp_shard 2) on qwen2-tiny (its q/k/v biases split with their matrices), and
  against torch_pp (pp 2 x dp 2) and DeepSpeed's AutoTP (tp 2 x dp 2, ZeRO-1) too on gemma-tiny (its scaled
  embedding, tied to the head across the first and last stage); and phi3-tiny's fused q|k|v and gate|up under
  ddp, fsdp, torch_pp (pp 2 x dp 2), DeepSpeed's ZeRO-3, torch_tp (also with sequence parallelism) and torch_3d
  (engines/fused_parallel.py; DeepSpeed's AutoTP refuses it: model_checks.py),
  olmo2-tiny's projection-wide q/k norms
  under fsdp, torch_pp, ZeRO-3, torch_tp (also with sequence parallelism) and torch_3d, and neox-tiny (GPT-NeoX:
  biased LayerNorms, each head's q, k and v together, a quarter of each head rotated, the parallel residual) under
  fsdp, torch_pp, ZeRO-3, AutoTP, torch_tp (also with sequence parallelism and the vocabulary-parallel loss) and
  torch_3d; gpt2-tiny's Conv1D layers under torch_tp (also with sequence parallelism) and torch_3d, and under
  DeepSpeed's ZeRO-0 and ZeRO-1 (dp 4), with the model states each rank holds, and ZeRO-2 with DeepSpeed's CPU
  Adam stepping the optimizer on the host (``--offload cpu``); and gpt2-tiny and
  neox-tiny under DeepSpeed's Ulysses (sp 2 x dp 2, ZeRO-1; last, since it takes over
  the process's SDPA); every rank is given the same batches, so that each replica's gradient is the one process's
  (the averaged gradient of equal batches is theirs).
- DeepSpeed Ulysses' gradients, not only its losses: llama-tiny under plain SGD at ZeRO-1 and ZeRO-3 (sp 2 x dp 2)
  against plain torch's SGD on one rank (since 2026-12-01; test_ulysses.py launched 3 runs for it before).

- The torch engines' checkpoints (tests/integration/engine_resume.py): 12 steps straight against 6, a save, and
  6 more in a second engine that loaded it (since 2026-12-02: test_checkpoint.py launched these resumes before).

- The autocast weight casts each rank keeps in bf16 (since 2026-12-05): torch_tp (also with the vocabulary-parallel
  head) and torch_pp under 1F1B and GPipe, llama-tiny, 4 micro-batches (engine_common.saved_casts_peak).

- The replica check (worker/replicas.py) on real copies: after the unscaled run, every engine's verdict; then
  again with one weight of the last rank nudged by 1e-3, a copy that differs.

It writes this rank's losses, gradient norms, a checksum of its weights after each step, the scale's state and the
replica verdicts as JSON for the test to compare.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from engine_common import (
    ds_adamw,
    engine_options,
    gathered_after_forward,
    saved_casts_peak,
    step_batches,
    weight_sum,
)
from engine_resume import RESUMES, resume  # beside this script (torchrun puts its folder on sys.path)

from dsbench.models import PRESETS
from dsbench.parallel import ParallelDims
from dsbench.worker import safe_load
from dsbench.worker.dist import Collectives, DistInfo, init
from dsbench.worker.engines import build_engine
from dsbench.worker.engines.loss_scale import LossScale
from dsbench.worker.header import optimizer_kind
from dsbench.worker.model import build_model
from dsbench.worker.replicas import replica_record
from dsbench.worker.state_bytes import local_shard

WORLD = 4
LAYOUTS = {"ddp": {}, "fsdp": {}, "torch_tp": {"tp": 2}, "torch_pp": {"pp": 2}, "torch_3d": {"tp": 2, "pp": 2},
           "hsdp": {"dp_shard": 2}}
ENGINE = {"hsdp": "fsdp", "torch_tp_sp_lp": "torch_tp", "torch_tp_sp": "torch_tp", "fsdp_offload": "fsdp",
          "fsdp_no_reshard": "fsdp", "torch_pp_interleaved": "torch_pp", "torch_pp_zb": "torch_pp",
          "torch_tp_fused": "torch_tp", "torch_tp_lp": "torch_tp", "torch_pp_gpipe": "torch_pp"}
"""The engine of a layout or option set named apart: HSDP is the FSDP engine on 2 shard groups of 2 (--dp-shard 2)."""
SPOILED_STEP = 1


def _engine(strategy: str, model: str, info: DistInfo, dims: ParallelDims, recompute: str = "none",
            **extra: Any) -> Any:
    options = engine_options(dims, **extra)
    module = build_model(PRESETS[model], seed=0, recompute=recompute)
    return build_engine(ENGINE.get(strategy, strategy), module, options, info)


def _train(strategy: str, info: DistInfo, mode: str) -> dict:
    dims = ParallelDims(world=WORLD, **LAYOUTS[strategy])
    engine = _engine(strategy, "llama-tiny", info, dims)
    engine.loss_scale = LossScale("fp16" if mode != "off" else "fp32", Collectives(info))
    unscale, step = engine.loss_scale.unscale_, {"n": 0}

    def spoiled(grads: list) -> bool:  # an overflow on the last rank only: every rank must skip the step
        if mode == "spoiled" and step["n"] == SPOILED_STEP and info.rank == WORLD - 1 and grads:
            local_shard(grads[0]).view(-1)[0] = float("inf")
        return unscale(grads)

    engine.loss_scale.unscale_ = spoiled
    generator = torch.Generator().manual_seed(dims.dp_rank(info.rank))  # each replica its own samples
    losses, sums = [], []
    for n in range(3):
        step["n"] = n
        batches = [torch.randint(0, 256, (2, 16), generator=generator) for _ in range(2)]
        losses.append(float(engine.train_step(batches)))
        sums.append(weight_sum(engine))
    scale = engine.loss_scale
    out = {"losses": losses, "weight_sums": sums, "scale": scale.scale, "skipped": scale.skipped_steps}
    if mode == "off":
        out["replicas"] = replica_record(engine, Collectives(info))
        if info.rank == WORLD - 1:  # one copy drifts: a bug no loss curve shows yet
            with torch.no_grad():
                local_shard(next(engine.model.parameters())).view(-1)[0] += 1e-3
        out["replicas_nudged"] = replica_record(engine, Collectives(info))
    return out


FAMILIES = {
            # first: no DeepSpeed engine has run yet, so no model-parallel group of AutoTP's is left in the process
            # (below) for ZeRO-0, ZeRO-1 and the offloaded ZeRO-2 and ZeRO-3 to partition by. Against its Ulysses run
            # too (ULYSSES_FAMILIES); since 2026-12-01 torch_tp (also with sequence parallelism) and torch_3d split its
            # Conv1D layers, c_attn's q, k and v apart (engines/conv1d_parallel.py)
            "gpt2-tiny": ("single", "zero0", "zero1", "zero2_offload", "zero3_offload_optimizer", "torch_tp",
                          "torch_tp_sp", "torch_3d"),
            "qwen2-tiny": ("single", "torch_tp", "torch_3d", "hsdp", "fsdp_offload",  # the last two since 2026-12-01
                           "torch_tp_fused",  # since 2026-12-01 (18:40): a 2-rank launch of test_model_parallel before
                           "fsdp_no_reshard"),  # since 2026-12-03: compare's strategy, trained nowhere before
            # before AutoTP: DeepSpeed keeps its model-parallel groups for the process (deepspeed.utils.groups), so
            # a ZeRO-3 engine built after an AutoTP one would read its tensor-parallel degree of 2
            # torch_tp (also with sequence parallelism) and torch_3d since 2026-12-01: its fused q|k|v split by
            # key/value head (2 query heads each: grouped-query attention) and gate|up block by block
            "phi3-tiny": ("single", "ddp", "fsdp", "torch_pp", "torch_tp", "torch_tp_sp", "torch_3d", "zero3"),
            # torch_tp (also with sequence parallelism: its norms after attention and the MLP on sequence shards) and
            # torch_3d since 2026-12-01: q_norm and k_norm on each rank's columns, the mean square over every head
            "olmo2-tiny": ("single", "fsdp", "torch_pp", "zero3", "torch_tp", "torch_tp_sp", "torch_3d"),
            # its ZeRO-3 before its AutoTP; torch_tp and torch_3d since 2026-12-01, torch_tp with sequence parallelism
            # and the vocabulary-parallel loss too (GPTNeoXLayer hands its attention the hidden states by position)
            "neox-tiny": ("single", "fsdp", "torch_pp", "torch_tp", "torch_tp_sp_lp", "torch_3d", "zero3", "autotp"),
            "gemma-tiny": ("single", "torch_tp", "torch_pp", "torch_3d", "autotp"),
            # torch's interleaved schedules (pp 2 x dp 2, 2 chunks per rank of its 4 blocks: the tied embedding on
            # rank 0's first chunk and rank 1's last), 1F1B with the attention core recomputed, and zero bubble
            # (each backward split into input- and weight-gradient halves); since 2026-12-01 (launched by
            # test_model_parallel.py before, with a one-process launch of their own)
            "gpt2-mini": ("single", "torch_pp_interleaved", "torch_pp_zb")}
AUTOTP = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
          # DeepSpeed asserts the batch over every rank, tensor-parallel ones included (docs/parallelism.md)
          "train_batch_size": 2 * 2 * WORLD, "zero_optimization": {"stage": 1}, "tensor_parallel": {"autotp_size": 2},
          "gradient_clipping": 0.5, "optimizer": ds_adamw()}
"""DeepSpeed AutoTP (tp 2 x dp 2) at ZeRO-1, stepping torch's AdamW as the torch engines do (no JIT op)."""
ZERO1 = {**{k: v for k, v in AUTOTP.items() if k != "tensor_parallel"}, "train_batch_size": 2 * 2 * WORLD // 2}
ZERO3 = {**{k: v for k, v in AUTOTP.items() if k != "tensor_parallel"}, "zero_optimization": {"stage": 3}}
"""DeepSpeed ZeRO-3 over the 4 ranks, the same optimizer: each rank gathers Phi-3's fused matrices whole."""
ULYSSES = {**ZERO1, "sequence_parallel_size": 2}
"""DeepSpeed Ulysses (sp 2 x dp 2) at ZeRO-1: DeepSpeed asserts the batch over the data-parallel ranks only."""
SGD = {"optimizer": {"type": "SGD", "params": {"lr": 0.5}}, "gradient_clipping": 0.0,
       "zero_allow_untested_optimizer": True}
"""Plain SGD (torch.optim.SGD through DeepSpeed) at lr 0.5, no clipping: Adam's m/sqrt(v) hides a constant gradient
scale, SGD's first update shows it (until 2026-12-01 test_ulysses.py launched these)."""
ULYSSES_SGD = {f"ulysses_sgd_z{stage}": {**ULYSSES, **SGD, "zero_optimization": {"stage": stage}}
               for stage in (1, 3)}
"""DeepSpeed Ulysses (sp 2 x dp 2) under :data:`SGD` at ZeRO-1 and ZeRO-3, which reduce its gradients differently
(engines/deepspeed.UlyssesEngine.gradient_scale)."""
ZERO_STAGES = {f"zero{stage}": {**ZERO3, "zero_optimization": {"stage": stage}} for stage in (0, 1)}
"""DeepSpeed ZeRO-0 and ZeRO-1 over the 4 ranks (dp 4), the same optimizer: their losses against one process, and the
model states each rank holds (since 2026-12-02; test_launch_strategies.py launched a 2-rank run of each before)."""
OFFLOADED = {name: {**ZERO3, "zero_optimization": {"stage": stage, "offload_optimizer": {"device": "cpu",
                                                                                    "pin_memory": True}},
                    "optimizer": ds_adamw(torch_adam=False)}
             for name, stage in (("zero2_offload", 2), ("zero3_offload_optimizer", 3))}
"""DeepSpeed ZeRO-2 and ZeRO-3 over the 4 ranks with the optimizer on the host, as ``--zero 2 --offload cpu`` and
``--zero 3 --offload cpu`` render it (the parameters stay on the ranks: ``--offload-param`` is another flag): the
config's AdamW, which DeepSpeed builds as DeepSpeedCPUAdam (its JIT op) on the offloaded partitions. ZeRO-2's since
2026-12-02 (test_launch_strategies.py launched a 2-rank run of it before; test_accelerate_yaml.py launches ZeRO-2
offloaded through `dsbench launch --offload cpu` and through accelerate), ZeRO-3's since 2026-12-03 (the launched
ZeRO-3 cells offload the parameters too: the zero3_offload preset, a user's Trainer config)."""
DEEPSPEED = {"autotp": (AUTOTP, 2), "zero3": (ZERO3, 1), "ulysses": (ULYSSES, 1),
             **{name: (config, 1) for name, config in {**ULYSSES_SGD, **ZERO_STAGES, **OFFLOADED}.items()}}
"""The DeepSpeed engines of :data:`FAMILIES`: their config and tensor-parallel degree."""
OPTIONS = {"torch_tp_sp_lp": {"sequence_parallel": True, "loss_parallel": True},
           "torch_tp_sp": {"sequence_parallel": True}, "fsdp_offload": {"fsdp_cpu_offload": True},
           "torch_pp_interleaved": {"pipeline_schedule": "interleaved", "virtual_stages": 2, "recompute": "selective"},
           "torch_pp_zb": {"pipeline_schedule": "interleaved-zb", "virtual_stages": 2},
           "torch_tp_fused": {"fused_optimizer": True}, "fsdp_no_reshard": {"fsdp_reshard": False}}
"""torch_tp (tp 2 x dp 2) with its options, as ``--sequence-parallel`` and ``--loss-parallel`` give them
(olmo2-tiny ties its head to its embedding, which the vocabulary-parallel loss refuses), FSDP2 over the 4 ranks
with ``--fsdp-cpu-offload`` (on CPU ranks its shards unpinned: run since 2026-12-01) and with ``--no-fsdp-reshard``
(compare's fsdp_no_reshard: the gathered parameters kept from the forward to the backward; since 2026-12-03), and
torch_pp (pp 2 x dp 2)
under ``--pipeline-schedule interleaved`` (with ``--recompute selective``) and ``interleaved-zb``, ``--virtual-stages
2``; and torch_tp stepping torch AdamW's fused kernel (``--fused-optimizer``: the DTensor and the plain parameters as
separate groups)."""


ULYSSES_FAMILIES = {"gpt2-tiny": "none", "neox-tiny": "selective"}
"""The multi-head families DeepSpeed's Ulysses splits since 2026-12-01 (their configs name no key/value heads:
worker/engines/deepspeed.stated_kv_heads), sp 2 x dp 2 at ZeRO-1, with what each recomputes: GPT-NeoX's attention
core under --recompute selective (DeepSpeed wraps dsbench's checkpointed SDPA; refused on the ranks until
2026-12-01); gpt2-tiny's one-process run is in FAMILIES."""


@contextmanager
def ulysses_of_its_own() -> Iterator[None]:
    """One Ulysses engine's worth of DeepSpeed's process-wide state: ``register_with_transformers`` puts its wrapper
    in transformers' attention table under the model's attention ("sdpa", or dsbench's checkpointed SDPA) and
    builds the sequence-parallel groups once a process (it asserts they are new:
    parallel_state_sp.initialize_sequence_parallel); both are put back after, for the next model."""
    import deepspeed.runtime.sequence_parallel.parallel_state_sp as groups
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from dsbench.worker.model import RECOMPUTED_SDPA

    keys = [key for key in ("sdpa", RECOMPUTED_SDPA) if key in ALL_ATTENTION_FUNCTIONS]
    saved = {key: ALL_ATTENTION_FUNCTIONS[key] for key in keys}
    try:
        yield
    finally:
        for key, function in saved.items():
            ALL_ATTENTION_FUNCTIONS[key] = function
        groups._SEQUENCE_PARALLEL_GROUP = groups._SEQUENCE_DATA_PARALLEL_GROUP = None


def _family(model: str, strategy: str, info: DistInfo, recompute: str = "none") -> dict:
    """Three steps of ``model``, the same batches on every rank; single runs on one rank's world of its own."""
    if strategy in DEEPSPEED:
        config, tp = DEEPSPEED[strategy]
        options = engine_options(ParallelDims(world=WORLD, tp=tp, sp=config.get("sequence_parallel_size", 1)),
                                 ds_config=config, seq_len=16)
        engine = build_engine("deepspeed", build_model(PRESETS[model], seed=0, recompute=recompute), options, info)
    else:
        layout = LAYOUTS.get(strategy, LAYOUTS.get(ENGINE.get(strategy, ""))) if strategy != "single" else None
        dims = ParallelDims(world=1) if layout is None else ParallelDims(world=WORLD, **layout)
        engine = _engine(strategy, model, info, dims, **OPTIONS.get(strategy, {}))
    generator = torch.Generator().manual_seed(7)
    losses, norms, states = [], [], None
    for n in range(3):
        engine.measure_states = strategy in ZERO_STAGES and n == 0  # the first step's, as the worker's loop counts
        losses.append(float(engine.train_step(step_batches(generator))))
        norms.append(float(engine.grad_norm) if strategy not in DEEPSPEED else None)  # DeepSpeed clips inside
        if engine.measure_states:  # this rank's model states (worker/state_bytes.py), as a run records them
            states = engine.model_state_bytes()
    gathered = (gathered_after_forward(engine, step_batches(generator)[0])
                if ENGINE.get(strategy, strategy) == "fsdp" else None)  # after the steps: the losses are recorded
    # the optimizer's implementation as the run header names it (worker/header.optimizer_kind)
    return {"losses": losses, "grad_norms": norms, "optimizer": optimizer_kind(engine, info.device),
            "gathered_after_forward": gathered,
            "states": states, "num_params": PRESETS[model].num_params() if states else None,  # the header's count
            "step_counter_bytes": _step_counter_bytes(engine) if states else None}


CASTS = {"torch_tp": ({"tp": 2}, {}), "torch_tp_lp": ({"tp": 2}, {"sequence_parallel": True, "loss_parallel": True}),
         "torch_pp": ({"pp": 2}, {}), "torch_pp_gpipe": ({"pp": 2}, {"pipeline_schedule": "gpipe"})}
"""The layouts whose autocast weight casts each rank measures in bf16 (llama-tiny, 4 micro-batches of one 40-token
sequence): DTensor TP (also with the vocabulary-parallel head), torch's pipeline under 1F1B and GPipe."""


def _casts(name: str, info: DistInfo) -> int:
    layout, extra = CASTS[name]
    engine = _engine(name, "llama-tiny", info, ParallelDims(world=WORLD, **layout), precision="bf16", grad_accum=4,
                     **extra)
    batch = torch.randint(0, 4096, (1, 40), generator=torch.Generator().manual_seed(0))
    return saved_casts_peak(engine, [batch] * 4)


def _step_counter_bytes(engine: Any) -> int:
    """The bytes of torch AdamW's step counters (a float32 scalar tensor per tensor it steps), which the worker counts
    among the optimizer states; DeepSpeed's FusedAdam, which a launch steps, keeps its count as an int."""
    optimizer = engine.engine.optimizer
    inner = getattr(optimizer, "optimizer", optimizer)  # ZeRO-1's wrapper steps torch's AdamW on its partitions
    return sum(t.numel() * t.element_size() for state in inner.state.values() for key, t in state.items()
               if key == "step" and torch.is_tensor(t))


def _sgd_one_process(model: str, scale: float = 1.0) -> dict:
    """The oracle of :data:`ULYSSES_SGD`: plain torch on this rank alone, the same model, batches and SGD; the loss
    of each micro-batch over the accumulation count, as DeepSpeed's backward scales it. ``scale``: the gradient
    scaled so (as the learning rate), the run a wrongly scaled reduction would give."""
    module = build_model(PRESETS[model], seed=0)
    optimizer = torch.optim.SGD(module.parameters(), lr=SGD["optimizer"]["params"]["lr"] * scale)
    generator = torch.Generator().manual_seed(7)
    losses = []
    for _ in range(3):
        total = 0.0
        for batch in step_batches(generator):
            loss = module(input_ids=batch, labels=batch).loss / 2
            loss.backward()
            total += float(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(total)
    return {"losses": losses, "grad_norms": [None] * 3}


def main() -> None:
    info = init("deepspeed")  # the worker's own start: gloo through DeepSpeed, its CPU workspace released
    rank = info.rank
    safe_load.install(deepspeed=True)  # every torch.load weights-only, as on a DeepSpeed rank (the resumes load)
    out = {s: {mode: _train(s, info, mode) for mode in ("off", "on", "spoiled")} for s in LAYOUTS}
    out["casts"] = {name: _casts(name, info) for name in CASTS}
    out["resume"] = {name: resume(name, info, Path(sys.argv[1], "checkpoints", name)) for name in RESUMES}
    out["families"] = {model: {s: _family(model, s, info) for s in strategies}
                       for model, strategies in FAMILIES.items()}
    for model, recompute in ULYSSES_FAMILIES.items():  # last: DeepSpeed's Ulysses takes over the process's SDPA
        with ulysses_of_its_own():
            out["families"].setdefault(model, {})["ulysses"] = _family(model, "ulysses", info, recompute)
    sgd = out["families"].setdefault("llama-tiny", {})
    sgd["sgd_single"] = _sgd_one_process("llama-tiny")
    sgd["sgd_single_x2"] = _sgd_one_process("llama-tiny", scale=2.0)
    for name in ULYSSES_SGD:
        with ulysses_of_its_own():
            sgd[name] = _family("llama-tiny", name, info)
    Path(sys.argv[1], f"rank{rank}.json").write_text(json.dumps(out))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
