"""``python -m dsbench.worker.calibrate``: what the planner's time model needs, measured on the real ranks.

Started on every rank by ``dsbench calibrate`` (torchrun, or one torchrun per node over ssh). All ranks measure at
once, so ranks that share a machine share it as they do in training. Rank 0 writes the measurements (JSON; the
planner's fit, :mod:`dsbench.plan.profile`, turns them into the machine profile):

- compute, per rank: achieved FLOP/s of the model's own matrix multiply (the MLP up-projection,
  ``[b*s, h] x [h, ff]``: 2*b*s*h*ff FLOPs), of attention (``scaled_dot_product_attention`` at
  ``[b, heads, s, h/heads]``: 4*b*s^2*h forward FLOPs), and of a whole forward+backward of the model
  (6N + 12*L*h*s FLOPs per token, PaLM App. B, as the run metrics count them) at micro-batches 1, 2, 4 and the
  one asked for;
- the optimizer: seconds per torch AdamW step of the model (fp32 states on this device);
- collectives over the job's backend (gloo on CPU, NCCL on GPU): all-reduce, all-gather, reduce-scatter and
  point-to-point (send/recv between ranks 2k and 2k+1), at message sizes 4 KiB to 16 MiB, in the groups the job
  has: ``world``, ``intra`` (the ranks of node 0) and ``inter`` (the first rank of every node). Each size is
  timed as the median of repeats after warm-up; a ring model (the planner's ``plan.comm``) is fitted to them:
  seconds = alpha + bytes_per_rank / bandwidth, bytes_per_rank = 2B(n-1)/n for all-reduce, B(n-1)/n for
  all-gather and reduce-scatter (Patarasuk & Yuan 2009), B for point-to-point.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time
from typing import Any

SIZES = [2**k for k in range(12, 25, 2)]
"""Message sizes in bytes: 4 KiB .. 16 MiB, a factor of 4 apart."""
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "p2p")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dsbench.worker.calibrate", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt2-mini")
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--out", required=True, help="where rank 0 writes the profile (JSON)")
    p.add_argument("--command", default="", help="the dsbench command, recorded in the profile")
    p.add_argument("--repeats", type=int, default=5)
    return p


def _sync(device: str) -> None:
    """Wait for queued GPU work before reading the clock (nothing to wait for on CPU)."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _rate(work: Any, device: str, repeats: int, min_s: float = 0.05, calls: int | None = None) -> dict[str, float]:
    """Seconds per call of ``work``: calls are batched so that one timed batch lasts at least ``min_s`` (or
    ``calls`` per batch, which every rank of a collective must agree on); the median (and p10/p90) over
    ``repeats`` batches after a warm-up call."""
    work()
    _sync(device)
    if calls is None:
        started = time.perf_counter()
        work()
        _sync(device)
        calls = max(1, int(min_s / max(time.perf_counter() - started, 1e-6)))
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(calls):
            work()
        _sync(device)
        samples.append((time.perf_counter() - started) / calls)
    ordered = sorted(samples)
    return {"seconds": statistics.median(samples), "p10": ordered[len(ordered) // 10],
            "p90": ordered[-1 - len(ordered) // 10], "calls_per_sample": calls, "samples": repeats}


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
    gemm = _rate(lambda: x @ w, device, repeats)
    head = shape.hidden // shape.heads
    q = torch.randn(micro, shape.heads, seq, head, device=device, dtype=dtype)
    attention = _rate(lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True), device, repeats)
    model = build_model(shape, seed, False, False).to(device=device, dtype=dtype)
    by_micro = {}
    for size in sorted({1, 2, 4, micro}):  # small batches run below the large ones' rate: the planner interpolates
        ids = torch.randint(0, shape.vocab_size, (size, seq), device=device)

        def step(ids: Any = ids) -> None:
            model(input_ids=ids, labels=ids).loss.backward()

        timing = _rate(step, device, repeats, min_s=0.2)
        flops = flops_per_token(shape.num_params(), shape.layers, shape.hidden, seq) * size * seq
        by_micro[str(size)] = {**timing, "flops": flops, "tflops": flops / timing["seconds"] / 1e12}
    model_step = {key: value for key, value in by_micro[str(micro)].items() if key not in ("flops", "tflops")}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    adam = _rate(optimizer.step, device, repeats)
    flops = {"gemm": 2 * tokens * shape.hidden * shape.intermediate,
             "attention": 4 * micro * seq * seq * shape.hidden,  # QK^T and AV, causal mask not discounted
             "model": flops_per_token(shape.num_params(), shape.layers, shape.hidden, seq) * tokens}
    out = {name: {**timing, "flops": flops[name], "tflops": flops[name] / timing["seconds"] / 1e12}
           for name, timing in (("gemm", gemm), ("attention", attention), ("model", model_step))}
    out["optimizer"] = {**adam, "params": shape.num_params(), "params_per_s": shape.num_params() / adam["seconds"]}
    out["model_by_micro_batch"] = by_micro
    return out


def _collective(kind: str, size: int, group: Any, ranks: list[int], rank: int, comm: Any, dtype: Any) -> Any:
    """A callable running one ``kind`` collective of ``size`` bytes in ``group`` through the worker's
    :class:`~dsbench.worker.dist.Collectives`, each call a synchronisation point among the group's ranks."""
    import torch

    n, device = len(ranks), comm.device
    element = torch.tensor([], dtype=dtype).element_size()
    count = max(n, size // element // n * n)
    if kind == "all-reduce":
        buf = torch.ones(count, device=device, dtype=dtype)
        return lambda: comm.all_reduce_(buf, group=group)
    if kind == "all-gather":
        part, full = torch.ones(count // n, device=device, dtype=dtype), torch.empty(count, device=device, dtype=dtype)
        return lambda: comm.all_gather_into_(full, part, group=group)
    if kind == "reduce-scatter":
        full, part = torch.ones(count, device=device, dtype=dtype), torch.empty(count // n, device=device, dtype=dtype)
        return lambda: comm.reduce_scatter_(part, full, group=group)
    # point-to-point: ranks 2k -> 2k+1 (an odd last rank idles); the receiver's wait ends the transfer
    index = ranks.index(rank)
    buf = torch.ones(count, device=device, dtype=dtype)
    if index % 2 == 0 and index + 1 < n:
        return lambda: comm.send(buf, dst=ranks[index + 1], group=group)
    if index % 2 == 1:
        return lambda: comm.recv(buf, src=ranks[index - 1], group=group)
    return lambda: None


def measure_group(ranks: list[int], group: Any, rank: int, comm: Any, repeats: int) -> dict[str, Any] | None:
    """Every collective at every size in one group (None on ranks outside it; they wait at the next barrier)."""
    import torch

    if rank not in ranks:
        return None
    device = str(comm.device)
    out: dict[str, Any] = {}
    for kind in KINDS:
        points = []
        for size in SIZES:
            work = _collective(kind, size, group, ranks, rank, comm, torch.float32)
            comm.barrier(group)  # sync point: every rank of the group starts the size together
            # the same number of calls on every rank (each call is a sync point): more for small messages
            calls = max(1, min(64, 2**22 // size))
            try:
                points.append({"bytes": size, **_rate(work, device, repeats, calls=calls)})
            except (RuntimeError, ValueError) as exc:  # a backend without this collective (raised on every rank)
                out[kind] = {"unsupported": str(exc).splitlines()[0][:200]}
                break
        else:
            out[kind] = {"points": points}
    return out


def groups_of(hostnames: list[str]) -> dict[str, list[int]]:
    """The groups to measure, by the host each rank runs on: every rank, node 0's ranks, one rank per node."""
    nodes: dict[str, list[int]] = {}
    for rank, host in enumerate(hostnames):
        nodes.setdefault(host, []).append(rank)
    out = {"world": list(range(len(hostnames)))}
    first = next(iter(nodes.values()))
    if len(nodes) > 1 and len(first) > 1:
        out["intra"] = first
    if len(nodes) > 1:
        out["inter"] = [ranks[0] for ranks in nodes.values()]
    return out


def main(argv: list[str] | None = None) -> int:
    import torch
    import torch.distributed as dist

    from dsbench.envinfo import machine, versions
    from dsbench.io import atomic_write_json
    from dsbench.models import resolve_model
    from dsbench.worker import dist as wdist

    args = _parser().parse_args(argv)
    started = time.time()
    info = wdist.init("ddp")
    comm = wdist.Collectives(info)
    hostnames = [str(h) for h in comm.all_gather_object(socket.gethostname())]  # sync point: where ranks run
    shape = resolve_model(args.model)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
    compute = measure_compute(shape, args.micro_batch, args.seq_len, dtype, info.device, args.repeats, seed=1234)
    every = comm.all_gather_object(compute)  # sync point: every rank's compute figures
    measured: dict[str, Any] = {}
    for name, ranks in groups_of(hostnames).items():
        group = dist.new_group(ranks) if info.process_group and len(ranks) < info.world_size else None
        if len(ranks) > 1:
            measured[name] = {"ranks": ranks, "size": len(ranks),
                              **(measure_group(ranks, group, info.rank, comm, args.repeats) or {})}
        comm.barrier()  # sync point: the next group starts when this one is done everywhere
    if info.is_main:
        measurements = {"schema": "dsbench.measured/1", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                   "command": args.command, "seconds": round(time.time() - started, 1), "versions": versions(),
                   "machine": machine(), "device": info.device, "backend": info.backend,
                   "world_size": info.world_size, "hostnames": hostnames,
                   "nodes": len(set(hostnames)), "model": shape.to_dict(), "micro_batch": args.micro_batch,
                   "seq_len": args.seq_len, "precision": args.precision, "compute": every[0],
                   "compute_per_rank": every, "collectives": measured}
        atomic_write_json(args.out, measurements)
    wdist.shutdown()
    return 0


def guarded() -> None:
    """Run :func:`main` on this rank; an error is one line naming the rank (a bad input keeps its exit code), and
    the process leaves without interpreter teardown, as the training worker does (dsbench.train)."""
    import os
    import traceback

    from dsbench.errors import DsbenchError
    from dsbench.worker.dist import env_rank

    where = f"[rank {env_rank()[0]} on {socket.gethostname()}] dsbench calibrate"
    try:
        code = main()
    except DsbenchError as exc:
        print(f"{where}: error: {exc}", file=sys.stderr, flush=True)
        code = exc.exit_code
    except BaseException as exc:  # a failing rank must end the job, not hang the others
        traceback.print_exc()
        print(f"{where}: error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
              file=sys.stderr, flush=True)
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    guarded()
