"""What the engines add beyond their collectives, measured by ``dsbench calibrate`` (see dsbench/worker/calibrate.py):
FSDP2 per shard unit, DeepSpeed ZeRO-1/2/3 per parameter tensor, tensor parallelism (DTensor and AutoTP) and
DeepSpeed Ulysses per decoder layer."""

from __future__ import annotations

from typing import Any

from dsbench.worker.calibrate_timing import interleaved

FSDP_UNITS = 8
"""Units in the FSDP2 stack: enough that the per-unit cost stands above one step's noise."""
FSDP_UNIT_SHAPE = (6, 64)
"""Each unit: 6 Linear(64, 64) with bias, 12 parameter tensors as a GPT-2 block has (2 norms, 4 linears)."""
STACK_CALLS = 4
"""Training steps of the stack per timed sample (each sample's median is over ``--repeats`` samples)."""


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
    planner counts them (dsbench.plan.profile.zero_model_costs)."""
    import copy

    import deepspeed
    import torch

    from dsbench.worker.model import build_model

    device = info.device
    model = build_model(shape, 1234, False, False).to(device=device, dtype=dtype)
    ids = torch.randint(0, shape.vocab_size, (micro, seq), generator=torch.Generator().manual_seed(0)).to(device)
    works, engines = _plain_steps(model, ids), []
    for stage in (1, 2):
        copied = copy.deepcopy(model)
        engine, *_ = deepspeed.initialize(model=copied, config=zero_config(stage, precision, micro, shape.hidden),
                                          optimizer=torch.optim.AdamW(copied.parameters(), lr=1e-4))
        engines.append(engine)
        works[f"zero{stage}_step"] = _engine_step(engine, ids)
    timed = interleaved(works, comm, device, repeats, STACK_CALLS)
    for engine in engines:
        engine.destroy()
    return {"world": comm.world_size, "micro_batch": micro, "seq_len": seq, **timed}


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

    config, _ = fill_auto({"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": 1,
                           "gradient_clipping": 1.0, "zero_optimization": {
                               "stage": stage, "reduce_bucket_size": "auto",
                               "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"},
                           "bf16": {"enabled": precision == "bf16"}, "fp16": {"enabled": precision == "fp16"}},
                          AutoInputs(hidden_size=width))
    return config


def measure_tensor_parallel(shape: Any, micro: int, seq: int, comm: Any, info: Any, dtype: Any, repeats: int,
                            tp: int) -> dict[str, Any]:
    """Seconds per forward+backward of the model's own decoder layers (HF modules, the profile's micro-batch and
    sequence), plain on each rank and split ``tp`` ways as the worker splits them: DTensor's ``parallelize_module``
    with Megatron's layout (torch_tp), and DeepSpeed AutoTP's training layers (``LinearLayer`` column-parallel,
    ``LinearAllreduce`` row-parallel) on the same projections (its layout for Llama), and DTensor's layout with
    sequence parallelism (torch_tp --sequence-parallel: each rank feeds its sequence shard); the same layers under
    DeepSpeed Ulysses over ``tp`` ranks (:func:`ulysses_trainer`, from 2026-11-29 13:00); and the LM head with its
    loss, whole and split by vocabulary (:func:`head_trainers`). What splitting costs beyond 1/tp of the compute
    and its collectives is the fit's (dsbench.plan.profile)."""
    import deepspeed
    import torch
    from torch.distributed.device_mesh import init_device_mesh

    from dsbench.models import LLAMA_LIKE
    from dsbench.worker.model import build_model

    facts = {"layers": shape.layers, "tp": tp, "micro_batch": micro, "seq_len": seq, "hidden": shape.hidden,
             "heads": shape.heads, "kv_heads": shape.kv_heads}
    if shape.arch not in LLAMA_LIKE:
        return {**facts, "unsupported": f"tensor parallelism is measured on Llama-family layers, not {shape.arch}"}
    device = info.device
    deepspeed.init_distributed(dist_backend=info.backend)  # AutoTP's layers ask deepspeed.comm for group sizes
    model = build_model(shape, 1234, False, False).to(device=device, dtype=dtype)
    mesh = init_device_mesh(torch.device(device).type, (comm.world_size // tp, tp), mesh_dim_names=("dp", "tp"))
    hidden = torch.randn(micro, seq, shape.hidden, device=device, dtype=dtype)
    rotary = model.model.rotary_emb(hidden, torch.arange(seq, device=device).unsqueeze(0))

    plain = model.model.layers
    shard = hidden.chunk(tp, dim=1)[mesh["tp"].get_local_rank()].contiguous()  # this rank's tokens under SP
    torch_tp = _dtensor_layers(plain, mesh["tp"], sequence_parallel=False)
    sp = _dtensor_layers(plain, mesh["tp"], sequence_parallel=True)
    works = {"plain_forward_backward": layers_step(plain, hidden, position_embeddings=rotary),
             "torch_forward_backward": layers_step(torch_tp, hidden, position_embeddings=rotary),
             "autotp_forward_backward": layers_step(_autotp_layers(plain, mesh.get_group("tp")), hidden,
                                                    position_embeddings=rotary),
             "sp_forward_backward": layers_step(sp, shard, position_embeddings=rotary),
             "ulysses_forward_backward": ulysses_trainer(model, shard, mesh["tp"].get_local_rank(), tp),
             **head_trainers(model.lm_head, hidden, mesh["tp"], shape.vocab_size)}
    return {**facts, **interleaved(works, comm, device, repeats, STACK_CALLS)}


def ulysses_trainer(model: Any, shard: Any, rank: int, sp: int) -> Any:
    """A forward+backward of a copy of the model's decoder layers under DeepSpeed Ulysses, as the worker's ulysses
    strategies run them (dsbench.worker.engines.deepspeed.UlyssesEngine): DeepSpeed's ``register_with_transformers``
    builds the sequence-parallel groups (``sp`` consecutive ranks, as the tp mesh's) and the all-to-all wrapper of
    SDPA, and each rank feeds its contiguous ``shard`` of the sequence with its positions. DeepSpeed installs its
    wrapper as the process's SDPA; here it is installed only while these layers run, so the plain and split layers
    timed beside them keep torch's."""
    import copy

    import torch
    from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    micro, chunk = shard.shape[:2]
    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]
    # a collective: every rank builds the groups (deepspeed parallel_state_sp.initialize_sequence_parallel)
    UlyssesSPAttentionHF.register_with_transformers(
        model_name_or_path=model, core_attn_implementation="sdpa", sequence_parallel_size=sp,
        micro_batch_size=micro, seq_length=chunk * sp, seq_length_is_variable=False)
    wrapper, ALL_ATTENTION_FUNCTIONS["sdpa"] = ALL_ATTENTION_FUNCTIONS["sdpa"], sdpa
    positions = torch.arange(rank * chunk, (rank + 1) * chunk, device=shard.device).unsqueeze(0).expand(micro, -1)
    run = layers_step(copy.deepcopy(model.model.layers), shard, position_ids=positions,
                      position_embeddings=model.model.rotary_emb(shard, positions))

    def step() -> None:
        ALL_ATTENTION_FUNCTIONS["sdpa"] = wrapper
        try:
            run()
        finally:
            ALL_ATTENTION_FUNCTIONS["sdpa"] = sdpa

    return step


def layers_step(layers: Any, first: Any, **inputs: Any) -> Any:
    """One forward+backward of the decoder ``layers`` from the hidden states ``first``, every layer given ``inputs``
    (its rotary embeddings, and positions where the attention needs them), to a squared-mean loss."""
    def step() -> None:
        x = first
        for layer in layers:
            out = layer(x, **inputs)
            x = out[0] if isinstance(out, tuple) else out
        x.float().square().mean().backward()

    return step


def _dtensor_layers(layers: Any, tp_mesh: Any, sequence_parallel: bool) -> Any:
    """A copy of the decoder layers split by DTensor with Megatron's layout, as the worker's torch_tp splits them."""
    import copy

    from torch.distributed.tensor.parallel import parallelize_module

    from dsbench.worker.engines.model_parallel import megatron_block_plan

    split = copy.deepcopy(layers)
    for layer in split:
        parallelize_module(layer, tp_mesh, megatron_block_plan(sequence_parallel=sequence_parallel))
    return split


def _autotp_layers(layers: Any, group: Any) -> Any:
    """A copy of the decoder layers with DeepSpeed AutoTP's training layers on Megatron's projections."""
    import copy

    from deepspeed.module_inject.layers import LinearAllreduce, LinearLayer, set_autotp_mode

    from dsbench.worker.engines.model_parallel import MEGATRON_LAYER

    set_autotp_mode(training=True)  # DeepSpeed's process-wide switch, as deepspeed.initialize sets it for AutoTP
    split = copy.deepcopy(layers)
    for layer in split:
        for name, kind in MEGATRON_LAYER.items():
            parent, attr = layer.get_submodule(name.rsplit(".", 1)[0]), name.rsplit(".", 1)[1]
            setattr(parent, attr, (LinearLayer if kind == "column" else LinearAllreduce)(getattr(parent, attr), group))
    return split


def head_trainers(head: Any, hidden: Any, tp_mesh: Any, vocab: int) -> dict[str, Any]:
    """A forward+backward of the LM head and the causal-LM loss as the worker computes them: whole on each rank
    (``head_forward_backward``), and split by vocabulary with the loss on the shards (``lp_forward_backward``:
    torch_tp --loss-parallel's head and loss, dsbench.worker.engines.model_parallel), at the profile's sizes."""
    import copy

    import torch
    from torch.distributed.tensor.parallel import loss_parallel, parallelize_module

    from dsbench.worker.engines.model_parallel import vocabulary_parallel_head, vocabulary_parallel_loss

    x = hidden.detach().requires_grad_()
    tokens = torch.randint(0, vocab, hidden.shape[:2], generator=torch.Generator().manual_seed(0)).to(hidden.device)
    split = parallelize_module(copy.deepcopy(head), tp_mesh, vocabulary_parallel_head())

    def whole() -> None:
        vocabulary_parallel_loss(head(x), tokens).backward()

    def sharded() -> None:
        with loss_parallel():  # torch's loss_parallel needs the backward inside it too
            vocabulary_parallel_loss(split(x), tokens).backward()

    return {"head_forward_backward": whole, "lp_forward_backward": sharded}
