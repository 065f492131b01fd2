"""A minimal hand-written DeepSpeed training loop: the baseline for dsbench's harness overhead.

Same model (random init, same seed) and same DeepSpeed config as ``dsbench.train``; its batches are made
on the device before the clock starts (the best case for a plain loop). No metrics, no gathers, no
progress. It times its measured window end to end as dsbench does: a device synchronisation, then
``perf_counter`` from the first measured step's start to the last step's end (synchronised again),
and writes {"window_s", "steps", "warmup"} to --out. Started by ``deepspeed`` via
scripts/bench_harness_overhead.py.
"""

import argparse
import json
import os
import time

import deepspeed
import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--deepspeed_config")
    p.add_argument("--local_rank", type=int)
    p.add_argument("--model", default="gpt2-mini")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--compile", action="store_true", help="DeepSpeed's engine.compile(), as dsbench's --compile")
    p.add_argument("--out")
    args = p.parse_args()
    from dsbench.model_config import resolve_model
    from dsbench.worker.model import build_model

    cpu = os.environ.get("DS_ACCELERATOR") == "cpu"
    deepspeed.init_distributed(dist_backend="gloo" if cpu else "nccl")
    if cpu:  # DeepSpeed never unlinks its CPU comm workspace; left behind, each run keeps ~69 MB of /dev/shm
        from dsbench.worker.dist import release_deepspeed_shm

        release_deepspeed_shm(int(os.environ["RANK"]))
    config = json.load(open(args.deepspeed_config))
    model = build_model(resolve_model(args.model), seed=1234)
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    if args.compile:
        engine.compile()
    micro, accum = config["train_micro_batch_size_per_gpu"], config.get("gradient_accumulation_steps", 1)
    generator = torch.Generator().manual_seed(engine.global_rank)
    vocab = model.config.vocab_size
    pool = [torch.randint(0, vocab, (micro, args.seq_len), generator=generator).to(engine.device)
            for _ in range(4 * accum)]

    def sync() -> None:
        if not cpu:
            torch.cuda.synchronize()

    start = 0.0
    for step in range(args.steps):
        if step == args.warmup:
            torch.distributed.barrier()  # all ranks start the window together, as dsbench's does
            sync()
            start = time.perf_counter()
        for m in range(accum):
            batch = pool[(step * accum + m) % len(pool)]
            loss = engine(input_ids=batch, labels=batch).loss
            engine.backward(loss)
            engine.step()
    sync()
    torch.distributed.barrier()  # the window ends when the slowest rank ends
    window = time.perf_counter() - start
    if engine.global_rank == 0:
        with open(args.out, "w") as handle:
            json.dump({"window_s": window, "steps": args.steps - args.warmup, "warmup": args.warmup}, handle)
    os._exit(0)


if __name__ == "__main__":
    main()
