"""A minimal hand-written PyTorch training loop (DDP or FSDP2): the baseline for dsbench's harness overhead on the
native strategies.

The same model (random init, same seed), micro-batch, accumulation, gradient clipping and torch AdamW as
``dsbench.train --strategy ddp|fsdp``, and the same speed options when asked: ``--compile`` compiles every
transformer block before wrapping (as torchtitan does), ``--fused-optimizer`` takes AdamW's fused kernel. Its
batches are made on the device before the clock starts (the best case for a plain loop). No metrics, no gathers,
no progress. It times its measured window end to end as dsbench does: a barrier and a device synchronisation,
then ``perf_counter`` from the first measured step's start to the last step's end (synchronised again), and
writes {"window_s", "steps", "warmup"} to --out. Started by ``torchrun`` via scripts/bench_harness_overhead.py.
"""

import argparse
import contextlib
import json
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--strategy", choices=["ddp", "fsdp"], default="ddp")
    p.add_argument("--model", default="gpt2-mini")
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--fused-optimizer", action="store_true")
    p.add_argument("--out")
    args = p.parse_args()
    from dsbench.model_config import resolve_model
    from dsbench.worker.model import build_model, transformer_blocks

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = torch.device(f"cuda:{int(os.environ['LOCAL_RANK'])}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    model = build_model(resolve_model(args.model), seed=1234).to(device)
    if args.compile:
        for block in transformer_blocks(model):
            block.compile()
    if args.strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model, device_ids=[device] if cuda else None)
    else:
        from torch.distributed.fsdp import fully_shard

        for block in transformer_blocks(model):
            fully_shard(block)
        fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=args.fused_optimizer or None)
    generator = torch.Generator().manual_seed(rank)
    vocab = resolve_model(args.model).vocab_size
    pool = [torch.randint(0, vocab, (args.micro_batch, args.seq_len), generator=generator).to(device)
            for _ in range(4 * args.grad_accum)]

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    start = 0.0
    for step in range(args.steps):
        if step == args.warmup:
            dist.barrier()  # all ranks start the window together, as dsbench's does
            sync()
            start = time.perf_counter()
        for m in range(args.grad_accum):
            batch = pool[(step * args.grad_accum + m) % len(pool)]
            last = m == args.grad_accum - 1
            if args.strategy == "fsdp":
                model.set_requires_gradient_sync(last)  # reduce-scatter on the last micro-step only
            with model.no_sync() if args.strategy == "ddp" and not last else contextlib.nullcontext():
                loss = model(input_ids=batch, labels=batch).loss
                (loss / args.grad_accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    sync()
    dist.barrier()  # the window ends when the slowest rank ends
    window = time.perf_counter() - start
    if rank == 0:
        with open(args.out, "w") as handle:
            json.dump({"window_s": window, "steps": args.steps - args.warmup, "warmup": args.warmup}, handle)
    os._exit(0)


if __name__ == "__main__":
    main()
