"""A minimal hand-written DeepSpeed training loop: the baseline for dsbench's harness overhead.

Same model (random init, same seed), same DeepSpeed config, same token data as ``dsbench.train``; no
metrics, no gathers, no progress. Times each optimizer step with perf_counter and writes
{"step_times": [...]} to --out. Started by ``deepspeed --module`` via scripts/bench_harness_overhead.py.
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
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--out")
    args = p.parse_args()
    from dsbench.models import resolve_model
    from dsbench.worker.model import build_model

    deepspeed.init_distributed(dist_backend="gloo" if os.environ.get("DS_ACCELERATOR") == "cpu" else "nccl")
    config = json.load(open(args.deepspeed_config))
    model = build_model(resolve_model(args.model), seed=1234)
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    micro, accum = config["train_micro_batch_size_per_gpu"], config.get("gradient_accumulation_steps", 1)
    generator = torch.Generator().manual_seed(engine.global_rank)
    vocab = model.config.vocab_size
    times = []
    for _ in range(args.steps):
        batches = [torch.randint(0, vocab, (micro, args.seq_len), generator=generator).to(engine.device)
                   for _ in range(accum)]
        start = time.perf_counter()
        for batch in batches:
            loss = engine(input_ids=batch, labels=batch).loss
            engine.backward(loss)
            engine.step()
        if torch.cuda.is_available() and os.environ.get("DS_ACCELERATOR") != "cpu":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    if engine.global_rank == 0:
        with open(args.out, "w") as handle:
            json.dump({"step_times": times}, handle)
    os._exit(0)


if __name__ == "__main__":
    main()
