"""What the engines add beyond their collectives, measured by ``dsbench calibrate`` (see dsbench/worker/calibrate.py):
FSDP2 per shard unit and DeepSpeed ZeRO-1/2/3 on the calibration stack, ZeRO-1/2 (and ZeRO-2 with its optimizer
on the host) on the profile's own model. The model's layers split by tensor parallelism or Ulysses are
dsbench/worker/calibrate_layers.py's."""

from __future__ import annotations

from typing import Any

from dsbench.worker.calibrate_timing import interleaved

FSDP_UNITS = 8
"""Units in the FSDP2 stack: enough that the per-unit cost stands above one step's noise."""
FSDP_UNIT_SHAPE = (6, 64)
"""Each unit: 6 Linear(64, 64) with bias, 12 parameter tensors as a GPT-2 block has (2 norms, 4 linears)."""
STACK_CALLS = 4
"""Training steps of the stack per timed sample (each sample's median is over ``--repeats`` samples)."""
MODEL_ROUNDS = 3
"""Rounds per ``--repeats`` of what calibrate times on the profile's own model: the ZeRO steps (since 2026-11-29
18:15) and the decoder layers split across ranks (since 21:05). Their samples are the noisiest calibrate takes that
price a cell directly (two ranks' collectives on shared cores), and the planner reads differences of them. Measured
on 2026-11-29 on 2 CPU ranks, 60 interleaved rounds resampled (scripts not kept): ZeRO-2 on gpt2-tiny, the median of
5 samples moves by 5.1% (sd), of 15 by 2.3%, and the offload's difference (-4.5 ms) by 2.7 ms at 5 and 0.7-1.3 ms at
15; llama-tiny's split layers, the median of DTensor's by 8.4% at 5 and 4.0% at 15 (AutoTP 14.2/8.1%, sequence
parallel 6.6/3.5%, Ulysses 11.9/7.2%, the vocabulary-parallel head 9.7/6.1%), and sequence parallelism's difference
from DTensor (5.8 ms) by 2.8 ms at 5 and 1.4 ms at 15. At 5 the offload's difference came out with the wrong sign
once in six protocol runs, and a calibration priced sequence parallelism 1.6% above DTensor where it ran 27% above
(docs/planner.md). The layers' 10 extra rounds cost about 4 s on llama-tiny."""


def _stack(device: str, dtype: Any) -> Any:
    """The calibration stack: FSDP_UNITS units of FSDP_UNIT_SHAPE, seeded (the same weights on every rank)."""
    import torch

    linears, width = FSDP_UNIT_SHAPE
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(linears)])
                                 for _ in range(FSDP_UNITS)]).to(device=device, dtype=dtype)


def _stack_input(device: str, dtype: Any) -> Any:
    import torch

    return torch.randn(8, FSDP_UNIT_SHAPE[1], device=device, dtype=dtype)


def _stack_facts(dtype: Any, world: int) -> dict[str, Any]:
    import torch

    linears, width = FSDP_UNIT_SHAPE
    return {"units": FSDP_UNITS, "tensors_per_unit": 2 * linears, "width": width, "world": world,
            "unit_bytes": linears * (width * width + width) * torch.tensor([], dtype=dtype).element_size()}


def measure_fsdp(comm: Any, device: str, dtype: Any, repeats: int) -> dict[str, Any]:
    """Seconds per forward+backward and per training step of the calibration stack, plain and under FSDP2 (every
    unit, then the root), on this rank. Every rank runs the same number of steps per sample: each sharded step holds
    collectives (sync points)."""
    import torch
    from torch.distributed.fsdp import fully_shard

    x = _stack_input(device, dtype)

    def trainer(model: Any, optimize: bool) -> Any:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # as compare's fsdp cells step

        def step() -> None:
            model(x).square().mean().backward()
            if optimize:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # under FSDP2: an all-reduce of the norm
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

        return step

    plain_model, sharded_model = _stack(device, dtype), _stack(device, dtype)
    for unit in sharded_model:
        fully_shard(unit)
    fully_shard(sharded_model)
    works = {f"{name}_{'step' if optimize else 'forward_backward'}": trainer(model, optimize)
             for name, model in (("plain", plain_model), ("sharded", sharded_model)) for optimize in (False, True)}
    timed = interleaved(works, comm, device, repeats, STACK_CALLS)
    return {**_stack_facts(dtype, comm.world_size), **timed}


def measure_deepspeed(comm: Any, device: str, dtype: Any, precision: str, repeats: int) -> dict[str, Any]:
    """Seconds per training step (forward, ``engine.backward``, ``engine.step`` with clipping) of the calibration
    stack under DeepSpeed ZeRO-1, 2 and 3, with torch AdamW as the client optimizer and the size-dependent settings
    HF "auto" gives a model of the stack's width: what DeepSpeed's per-parameter hooks, bucketing and partitioning
    cost. The three engines are timed in interleaved rounds."""
    import deepspeed
    import torch

    from dsbench.worker.cpuanswer import ask_the_cpu_once

    ask_the_cpu_once()  # the engines load DeepSpeed's FusedAdam op: py-cpuinfo asked as in a training rank
    x = _stack_input(device, dtype)
    engines = {}
    for stage in (1, 2, 3):
        model = _stack(device, dtype)
        engines[stage], *_ = deepspeed.initialize(model=model, config=zero_config(stage, precision, 8,
                                                                                  FSDP_UNIT_SHAPE[1]),
                                                  optimizer=torch.optim.AdamW(model.parameters(), lr=1e-4))

    def trainer(engine: Any) -> Any:
        def step() -> None:
            engine.backward(engine(x).float().square().mean())
            engine.step()

        return step

    out = interleaved({f"zero{stage}_step": trainer(engine) for stage, engine in engines.items()}, comm, device,
                       repeats, STACK_CALLS)
    for engine in engines.values():
        engine.destroy()
    return {**_stack_facts(dtype, comm.world_size), **out}


def measure_zero_model(shape: Any, micro: int, seq: int, comm: Any, info: Any, dtype: Any, precision: str,
                       repeats: int) -> dict[str, Any]:
    """Seconds per training step of the profile's own model at its micro-batch and sequence: plain (forward,
    backward, torch AdamW over every parameter) and its forward+backward alone, and under DeepSpeed ZeRO-1 and
    ZeRO-2 with the same client optimizer and the buckets HF "auto" gives the model (reduce bucket hidden²), timed
    in interleaved rounds. The stack (:func:`measure_deepspeed`) prices a gradient reduction with almost no compute
    between reductions; on the model each reduction also waits for the slower rank's backward up to it
    (docs/planner.md, "ZeRO-2's part taken apart"), which this measures. The fit counts the reductions as the
    planner counts them (dsbench.plan.engine_costs.zero_model_costs).

    Beside them, ZeRO-2 with its optimizer offloaded to the host (``offload_optimizer: cpu``, the config's
    ``AdamW``, which DeepSpeed runs as DeepSpeedCPUAdam, as a ``zero2_offload`` cell does): what the offload adds
    to, or saves from, ZeRO-2's step on this machine.

    ``MODEL_ROUNDS`` × ``repeats`` rounds: what the planner reads from here is small beside one step's noise."""
    import torch

    from dsbench.worker.model import build_model

    device = info.device
    model = build_model(shape, 1234, False, False).to(device=device, dtype=dtype)
    ids = torch.randint(0, shape.vocab_size, (micro, seq), generator=torch.Generator().manual_seed(0)).to(device)
    works = _plain_steps(model, ids)
    # ZeRO-1/2 step the same client torch AdamW; the offloaded ZeRO-2 its config's optimizer (DeepSpeedCPUAdam)
    engines = {f"zero{stage}_step": _zero_engine(model, zero_config(stage, precision, micro, shape.hidden), True)
               for stage in (1, 2)}
    engines["zero2_offload_step"] = _zero_engine(model, offload_config(precision, micro, shape.hidden), False)
    works |= {name: _engine_step(engine, ids) for name, engine in engines.items()}
    timed = interleaved(works, comm, device, MODEL_ROUNDS * repeats, STACK_CALLS)
    for engine in engines.values():
        engine.destroy()
    return {"world": comm.world_size, "micro_batch": micro, "seq_len": seq, **timed}


def _zero_engine(model: Any, config: dict[str, Any], client_adamw: bool) -> Any:
    """A DeepSpeed engine over a copy of ``model``: stepping a client torch AdamW, or the config's optimizer."""
    import copy

    import deepspeed
    import torch

    copied = copy.deepcopy(model)
    optimizer = {"optimizer": torch.optim.AdamW(copied.parameters(), lr=1e-4)} if client_adamw else {
        "model_parameters": copied.parameters()}
    engine, *_ = deepspeed.initialize(model=copied, config=config, **optimizer)
    return engine


def _plain_steps(model: Any, ids: Any) -> dict[str, Any]:
    """The model's forward+backward alone, and with torch AdamW's (fused) step over every parameter."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def plain(optimize: bool) -> Any:
        def step() -> None:
            model(input_ids=ids, labels=ids).loss.backward()
            if optimize:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

        return step

    return {"plain_forward_backward": plain(False), "plain_step": plain(True)}


def _engine_step(engine: Any, ids: Any) -> Any:
    def step() -> None:
        engine.backward(engine(input_ids=ids, labels=ids).loss)
        engine.step()

    return step


def zero_config(stage: int, precision: str, micro: int, width: int) -> dict[str, Any]:
    """A calibration's DeepSpeed config at ZeRO ``stage`` for a model of hidden size ``width``, with the
    size-dependent buckets as HF "auto" sets them, as dsbench's runs do: reduce bucket width², ZeRO-3 prefetch
    0.9·width², and only tensors under 10·width kept whole (the stack's biases; a model's norms), so ZeRO-3 gathers
    every weight matrix."""
    from dsbench.configs.autofill import AutoInputs, fill_auto
    from dsbench.configs.templates import load_template

    # the throughput timer as rendered (no device wait in it: configs/diagnostics.py)
    config, _ = fill_auto({"timers": load_template("base")["timers"],
                           "train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": 1,
                           "gradient_clipping": 1.0, "zero_optimization": {
                               "stage": stage, "reduce_bucket_size": "auto",
                               "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"},
                           "bf16": {"enabled": precision == "bf16"}, "fp16": {"enabled": precision == "fp16"}},
                          AutoInputs(hidden_size=width))
    return config


def offload_config(precision: str, micro: int, width: int) -> dict[str, Any]:
    """:func:`zero_config` at ZeRO-2 with the optimizer on the host, as dsbench renders ``zero2_offload``: the
    ``offload_optimizer`` section (pinned host buffers) and the config's own AdamW, which DeepSpeed builds as
    DeepSpeedCPUAdam when the optimizer is offloaded."""
    config = zero_config(2, precision, micro, width)
    config["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    config["optimizer"] = {"type": "AdamW", "params": {"lr": 1e-4}}
    return config
