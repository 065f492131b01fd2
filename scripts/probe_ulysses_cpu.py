"""Probe: DeepSpeed Ulysses sequence parallelism (its ALST integration for HF models) on CPU ranks, against the
single-process run. Not a dsbench strategy yet (issue 28); this is the evidence that nothing in DeepSpeed blocks it
on gloo, and the recipe the worker will follow.

    DS_ACCELERATOR=cpu torchrun --nproc-per-node 2 scripts/probe_ulysses_cpu.py

Each rank takes one contiguous shard of the sequence with its positions and pre-shifted labels
(``shift_labels``, as DeepSpeed's UlyssesSPDataLoaderAdapter prepares them: the last position of the sequence has no
next token). ``UlyssesSPAttentionHF.register_with_transformers`` swaps the attention for an all-to-all over heads
around SDPA; DeepSpeed averages gradients over the sequence-parallel ranks, so each rank's mean loss is weighted by
its share of the sequence's real tokens before the backward (an unweighted mean over shards differs by the
uneven label count). Prints the token-weighted loss per step, then the single-process loss of the same model,
data and optimizer; on 2026-11-26 they were identical to the last printed digit for 3 steps (llama-tiny, seq 64,
ZeRO-1, fp32).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def single_process_losses(model, ids, steps: int) -> list[float]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    import deepspeed
    from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF

    from dsbench.models import resolve_model
    from dsbench.worker.model import build_model

    deepspeed.init_distributed(dist_backend="gloo")
    rank, world, seq, steps = dist.get_rank(), dist.get_world_size(), 64, 3
    ids = torch.randint(0, 4096, (1, seq), generator=torch.Generator().manual_seed(1))
    reference = single_process_losses(build_model(resolve_model("llama-tiny"), seed=1234), ids, steps)
    model = build_model(resolve_model("llama-tiny"), seed=1234)
    mpu = UlyssesSPAttentionHF.register_with_transformers(
        model_name_or_path=model, core_attn_implementation="sdpa", sequence_parallel_size=world, micro_batch_size=1,
        seq_length=seq, seq_length_is_variable=False)
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1}, "sequence_parallel_size": world,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}}, "gradient_clipping": 1.0}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config, mpu=mpu)
    shifted = torch.nn.functional.pad(ids[:, 1:], (0, 1), value=-100)
    shard = slice(rank * seq // world, (rank + 1) * seq // world)
    real = (shifted != -100).sum()
    for step in range(steps):
        loss = engine(input_ids=ids[:, shard], position_ids=torch.arange(seq)[None, shard], labels=ids[:, shard],
                      shift_labels=shifted[:, shard]).loss
        mine = (shifted[:, shard] != -100).sum()
        weighted = torch.stack([loss.detach() * mine, mine.float()])
        dist.all_reduce(weighted)  # sync point: the sequence's token-weighted loss
        engine.backward(loss * mine / real * world)
        engine.step()
        if rank == 0:
            print(f"step {step}: ulysses {float(weighted[0] / weighted[1]):.9f}  single {reference[step]:.9f}")


if __name__ == "__main__":
    main()
