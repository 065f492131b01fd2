"""Compute on one rank, for ``dsbench calibrate``: the model's matmul, attention and whole forward+backward rates,
the optimizer step, and what torch's zero-bubble schedules pay to split a backward.

No collective and no barrier: every rank measures its own share of the machine at once (worker/calibrate.py starts
them together). FLOPs are counted as the run metrics count them (:func:`dsbench.records.flops_per_token`).
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from dsbench.worker.calibrate_timing import interleaved, rate, summary_of, sync_device


def measure_compute(shape: Any, micro: int, seq: int, dtype: Any, device: str, repeats: int,
                    seed: int) -> dict[str, Any]:
    """GEMM, attention and whole-model forward+backward throughput, and the AdamW step time, on this rank."""
    import torch
    import torch.nn.functional as F

    from dsbench.records import flops_per_token
    from dsbench.worker.model import build_model

    tokens = micro * seq
    x = torch.randn(tokens, shape.hidden, device=device, dtype=dtype)
    w = torch.randn(shape.hidden, shape.intermediate, device=device, dtype=dtype)
    gemm = rate(lambda: x @ w, device, repeats)
    q = torch.randn(micro, shape.heads, seq, shape.head_width, device=device, dtype=dtype)
    attention = rate(lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True), device, repeats)
    model = build_model(shape, seed, False, False).to(device=device, dtype=dtype)
    by_micro = measure_model_by_micro_batch(model, shape, micro, seq, device, repeats)
    model_step = {key: value for key, value in by_micro[str(micro)].items() if key not in ("flops", "tflops")}
    # fused: compare's cells step torch's fused AdamW or DeepSpeed's own fused kernels by default
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    adam = rate(optimizer.step, device, repeats)
    flops = {"gemm": 2 * tokens * shape.hidden * shape.intermediate,
             # QK^T and AV over heads x head width, causal mask not discounted
             "attention": 4 * micro * seq * seq * shape.q_width,
             "model": flops_per_token(shape.num_params(), shape.layers, shape.q_width, seq) * tokens}
    out = {name: {**timing, "flops": flops[name], "tflops": flops[name] / timing["seconds"] / 1e12}
           for name, timing in (("gemm", gemm), ("attention", attention), ("model", model_step))}
    out["optimizer"] = {**adam, "params": shape.num_params(), "params_per_s": shape.num_params() / adam["seconds"],
                        "kernel": "torch AdamW fused"}
    return {**out, "model_by_micro_batch": by_micro,
            "split_backward": measure_split_backward(model, shape, micro, seq, device, repeats)}


def measure_model_by_micro_batch(model: Any, shape: Any, micro: int, seq: int, device: str,
                                 repeats: int) -> dict[str, Any]:
    """The whole model's forward+backward at micro-batches 1, 2, 4 and the run's own: seconds and TFLOP/s each."""
    import torch

    from dsbench.records import flops_per_token

    # small batches run below the large ones' rate: the planner interpolates between the sizes. They are measured
    # in interleaved rounds (each size once per round), as the collectives are, so that a slow moment of the shared
    # cores falls on every size alike rather than on one
    sizes = sorted({1, 2, 4, micro})
    steps = {}
    for size in sizes:
        ids = torch.randint(0, shape.vocab_size, (size, seq), device=device)

        def step(ids: Any = ids) -> None:
            model(input_ids=ids, labels=ids).loss.backward()

        step()  # warm-up
        sync_device(device)
        started = time.perf_counter()
        step()
        sync_device(device)
        steps[size] = (step, max(1, int(0.1 / max(time.perf_counter() - started, 1e-6))))
    samples: dict[int, list[float]] = {size: [] for size in sizes}
    for _ in range(max(repeats, 7)):
        for size, (step, calls) in steps.items():
            started = time.perf_counter()
            for _ in range(calls):
                step()
            sync_device(device)
            samples[size].append((time.perf_counter() - started) / calls)
    by_micro = {}
    for size in sizes:
        flops = flops_per_token(shape.num_params(), shape.layers, shape.q_width, seq) * size * seq
        timing = summary_of(samples[size], steps[size][1])
        by_micro[str(size)] = {**timing, "flops": flops, "tflops": flops / timing["seconds"] / 1e12}
    return by_micro


def measure_split_backward(model: Any, shape: Any, micro: int, seq: int, device: str, repeats: int) -> dict[str, Any]:
    """What torch's zero-bubble schedules pay to split each backward into its input-gradient and weight-gradient
    passes (Qi et al. 2024, arXiv:2401.10241 sec. 2), over the whole backward that the other torch schedules run:
    one micro-batch through the whole model as a pipeline stage, its input an activation that needs a gradient
    (as every stage after the first receives), backward through torch's own stage functions
    (torch/distributed/pipelining/_backward.py, torch 2.13): ``stage_backward`` for 1F1B and interleaved 1F1B,
    ``stage_backward_input`` then ``stage_backward_weight`` for the zero-bubble ones. The split walks the autograd
    graph in Python to find each weight's intermediates, a cost per graph node, so per layer it holds for a
    stage of any depth. Interleaved rounds, this rank alone (no collective, no barrier)."""
    import torch
    from torch.distributed.pipelining._backward import stage_backward, stage_backward_input, stage_backward_weight

    ids = torch.randint(0, shape.vocab_size, (micro, seq), device=device)
    embed = model.get_input_embeddings()

    def forward() -> tuple[Any, Any]:
        received = embed(ids).detach().requires_grad_()
        return received, model(inputs_embeds=received, labels=ids).loss

    def whole() -> None:
        received, loss = forward()
        # the loss itself, as the last stage passes it: in a list it would need a list of output gradients, and
        # with None there torch's stage_backward silently skips it
        stage_backward(loss, None, [received])

    def split() -> None:
        received, loss = forward()
        _, groups = stage_backward_input([loss], None, [received], model.parameters())
        stage_backward_weight(model.parameters(), groups)

    alone = SimpleNamespace(barrier=lambda: None)  # one rank's own work: nothing to wait for
    timed = interleaved({"whole": whole, "split": split}, alone, device, max(repeats, 7), calls=3)
    model.zero_grad(set_to_none=True)
    return {**timed, "layers": shape.layers, "micro_batch": micro}
