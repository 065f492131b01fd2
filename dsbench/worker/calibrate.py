"""``python -m dsbench.worker.calibrate``: what the planner's time model needs, measured on the real ranks.

Started on every rank by ``dsbench calibrate`` (torchrun, or one torchrun per node over ssh). All ranks measure at
once, so ranks that share a machine share it as they do in training. Rank 0 writes the measurements (JSON; the
planner's fit, :mod:`dsbench.plan.profile`, turns them into the machine profile):

- compute, per rank (calibrate_compute.py): achieved FLOP/s of the model's own matrix multiply (the MLP up-projection,
  ``[b*s, h] x [h, ff]``: 2*b*s*h*ff FLOPs), of attention (``scaled_dot_product_attention`` at
  ``[b, heads, s, h/heads]``: 4*b*s^2*h forward FLOPs), and of a whole forward+backward of the model
  (6N + 12*L*h*s FLOPs per token, PaLM App. B, as the run metrics count them) at micro-batches 1, 2, 4 and the
  one asked for;
- the optimizer: seconds per step of torch AdamW's fused kernel over the model (fp32 states on this device);
- collectives over the job's backend (gloo on CPU, NCCL on GPU): all-reduce, all-gather, reduce-scatter and
  point-to-point (send/recv between ranks 2k and 2k+1), at message sizes 4 KiB to 16 MiB, in the groups the job
  has: ``world``, ``intra`` (the ranks of node 0) and ``inter`` (the first rank of every node). Each size is
  timed as the median of repeats after warm-up; a ring model (the planner's ``plan.comm``) is fitted to them:
  seconds = alpha + bytes_per_rank / bandwidth, bytes_per_rank = 2B(n-1)/n for all-reduce, B(n-1)/n for
  all-gather and reduce-scatter (Patarasuk & Yuan 2009), B for point-to-point;
- FSDP2's own cost per unit (``fully_shard``): a forward+backward, and a whole training step (with clipping and
  AdamW), of a stack of small units shaped like transformer blocks, once plain and once with every unit sharded
  over the world. The fit subtracts the stack's collectives (from the fitted links) and divides by the units: what
  FSDP2's hooks, DTensor dispatch and copy-in/copy-out add per unit in each micro-step, and in each optimizer step;
- DeepSpeed's own cost per parameter tensor: a training step of the same stack under ZeRO-1, 2 and 3 against the
  plain one (the fit: what each stage adds per reduction and per tensor, its small collectives included);
- tensor parallelism's own cost per layer: a forward+backward of the model's own decoder layers, plain and split
  over a node's ranks by DTensor (torch_tp) and by DeepSpeed AutoTP's layers where the family splits that way, and
  under DeepSpeed Ulysses (every family; calibrate_layers.py);
- on a CUDA rank, what the GPU time model needs of the GPU itself: 16-bit GEMMs by size, HBM bandwidth and the
  flash attention kernel (calibrate_gpu.py).
"""

from __future__ import annotations

import argparse
import socket
import time
from typing import Any

from dsbench.parallel import widest_tp
from dsbench.worker.calibrate_compute import measure_compute
from dsbench.worker.calibrate_engines import measure_deepspeed, measure_fsdp, measure_zero_model
from dsbench.worker.calibrate_gpu import measure_gpu
from dsbench.worker.calibrate_layers import measure_tensor_parallel
from dsbench.worker.calibrate_pipe import measure_pipeline_schedules
from dsbench.worker.calibrate_timing import summary_of, sync_device

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
    p.add_argument("--repeats", type=int, required=True, help="timed samples per figure (dsbench calibrate --repeats)")
    return p


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


SLOW_CALL_S = 0.05
"""A warm-up call this slow means the link is bandwidth-bound at that size: larger sizes add time, not information
(on a 100 Mbit/s link one 16 MiB all-reduce takes 2.7 s)."""


def _sizes_to_measure(kind: str, group: Any, ranks: list[int], rank: int,
                      comm: Any) -> tuple[dict[int, Any], dict[str, float] | None]:
    """The sizes to time for ``kind``, each with its callable after one warm-up call: from 4 KiB up, stopping after
    the first (from the third on) whose warm-up call took SLOW_CALL_S on the group's first rank, which decides for
    every rank of the group (so all run the same calls). With them, where it stopped early and why (the size and
    its warm-up seconds; None when every size was measured)."""
    import torch

    device = str(comm.device)
    works = {}
    for size in SIZES:
        work = _collective(kind, size, group, ranks, rank, comm, torch.float32)
        started = time.perf_counter()
        work()
        sync_device(device)
        took = torch.tensor([time.perf_counter() - started], dtype=torch.float64, device=comm.device)
        comm.broadcast_(took, src=ranks[0], group=group)  # sync point: the first rank's figure decides
        works[size] = work
        if len(works) >= 3 and took.item() >= SLOW_CALL_S and size != SIZES[-1]:
            return works, {"bytes": size, "warmup_s": took.item()}
    return works, None


def measure_group(ranks: list[int], group: Any, rank: int, comm: Any, repeats: int) -> dict[str, Any] | None:
    """Every collective at every size in one group (None on ranks outside it; they wait at the next barrier).

    The sizes are measured in interleaved rounds (every size once per round, ``repeats`` rounds) and each size's
    median taken over the rounds: on shared cores the latency drifts over seconds, and a size measured in one
    burst would carry one moment's drift into the fit. A slow link stops the sizes early (:func:`_sizes_to_measure`)."""
    if rank not in ranks:
        return None
    device = str(comm.device)
    out: dict[str, Any] = {}
    for kind in KINDS:
        try:
            works, stopped = _sizes_to_measure(kind, group, ranks, rank, comm)
        except (RuntimeError, ValueError) as exc:  # a backend without this collective (raised on every rank)
            out[kind] = {"unsupported": str(exc).splitlines()[0][:200]}
            continue
        # the same number of calls on every rank (each call is a sync point): more for small messages
        calls = {size: max(1, min(32, 2**21 // size)) for size in works}
        samples: dict[int, list[float]] = {size: [] for size in works}
        for _ in range(max(repeats, 5)):
            for size, work in works.items():
                comm.barrier(group)  # sync point: every rank of the group starts the sample together
                started = time.perf_counter()
                for _ in range(calls[size]):
                    work()
                sync_device(device)
                samples[size].append((time.perf_counter() - started) / calls[size])
        out[kind] = {"points": [{"bytes": size, **summary_of(samples[size], calls[size])} for size in works],
                     **({"stopped_early": stopped} if stopped else {})}
    return out


def groups_of(hostnames: list[str]) -> dict[str, list[int]]:
    """The groups to measure, by the host each rank runs on: every rank, node 0's ranks, one rank per node (not
    measured twice: with one rank per node ``world`` is the link across nodes, and the profile says so)."""
    nodes: dict[str, list[int]] = {}
    for rank, host in enumerate(hostnames):
        nodes.setdefault(host, []).append(rank)
    out = {"world": list(range(len(hostnames)))}
    first = next(iter(nodes.values()))
    if len(nodes) > 1 and len(first) > 1:
        out["intra"] = first
    if len(nodes) > 1 and len(nodes) < len(hostnames):
        out["inter"] = [ranks[0] for ranks in nodes.values()]
    return out


def measure_collectives(hostnames: list[str], info: Any, comm: Any, repeats: int) -> dict[str, Any]:
    """Every collective's fit points over each group of ranks (the world, within a node, across nodes), one group
    after another."""
    import torch.distributed as dist

    measured: dict[str, Any] = {}
    for name, ranks in groups_of(hostnames).items():
        group = dist.new_group(ranks) if info.process_group and len(ranks) < info.world_size else None
        if len(ranks) > 1:
            measured[name] = {"ranks": ranks, "size": len(ranks),
                              **(measure_group(ranks, group, info.rank, comm, repeats) or {})}
        comm.barrier()  # sync point: the next group starts when this one is done everywhere
    return measured


def measure_engines(args: argparse.Namespace, comm: Any, info: Any, hostnames: list[str], shape: Any,
                    dtype: Any) -> dict[str, Any]:
    """What the engines add beyond their collectives, in this order on every rank (each holds collectives): FSDP2,
    DeepSpeed ZeRO-1/2/3 on the stack, ZeRO-1/2 on the model itself, tensor parallelism and Ulysses, the pipeline
    schedules; none on one rank."""
    fsdp = measure_fsdp(comm, info.device, dtype, args.repeats) if info.world_size > 1 else None
    zero = measure_deepspeed(comm, info.device, dtype, args.precision, args.repeats) if info.world_size > 1 else None
    # the profile's own model under ZeRO-1 and ZeRO-2: a reduction's cost with the model's backward between them
    zero_model = (measure_zero_model(shape, args.micro_batch, args.seq_len, comm, info, dtype, args.precision,
                                     args.repeats) if info.world_size > 1 else None)
    # tensor parallelism within one node's ranks (the launchers place consecutive ranks on a node), at the widest
    # degree the model's heads divide (4 ranks of llama-tiny, 2 key/value heads: tp 2 x dp 2)
    tp = widest_tp(hostnames.count(hostnames[0]), shape.heads, shape.kv_heads)
    tensor = (measure_tensor_parallel(shape, args.micro_batch, args.seq_len, comm, info, dtype, args.repeats, tp)
        if tp > 1 and info.world_size % tp == 0 else None)
    # torch's pipeline schedules and DeepSpeed's pipeline engine over every rank, one stage a rank: across nodes too,
    # where the ranks' sends cross the link (until 2026-11-29 a pipeline across nodes was not measured, and the
    # planner priced both engines there from the stages' work alone)
    pipeline = measure_pipeline_schedules(comm, info, args.repeats) if info.world_size > 1 else None
    # the measurements' sections (dsbench.measured/1), named by engine
    return dict(fsdp=fsdp, deepspeed=zero, zero_model=zero_model, tensor_parallel=tensor, pipeline=pipeline)


def main(argv: list[str] | None = None) -> int:
    import torch

    from dsbench.envinfo import machine, versions
    from dsbench.io import atomic_write_json
    from dsbench.model_config import resolve_model
    from dsbench.worker import dist as wdist
    from dsbench.worker.setup import guard_jit_builds

    args = _parser().parse_args(argv)
    guard_jit_builds()  # the DeepSpeed engines below build or load its ops
    started = time.time()
    info = wdist.init("ddp")
    comm = wdist.Collectives(info)
    hostnames = [str(h) for h in comm.all_gather_object(socket.gethostname())]  # sync point: where ranks run
    shape = resolve_model(args.model)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
    compute = measure_compute(shape, args.micro_batch, args.seq_len, dtype, info.device, args.repeats, seed=1234)
    every = comm.all_gather_object(compute)  # sync point: every rank's compute figures
    # the GPU model's constants (plan/gpu_calibration.py): each GPU measures its own, rank 0's are kept
    gpu = measure_gpu(info.device, args.repeats) if info.device.startswith("cuda") else None
    measured = measure_collectives(hostnames, info, comm, args.repeats)
    engines = measure_engines(args, comm, info, hostnames, shape, dtype)
    if info.is_main:
        atomic_write_json(args.out, {
            "schema": "dsbench.measured/1", "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": args.command,
            "seconds": round(time.time() - started, 1), "versions": versions(), "machine": machine(),
            "device": info.device, "backend": info.backend, "world_size": info.world_size, "hostnames": hostnames,
            "nodes": len(set(hostnames)), "model": shape.to_dict(), "micro_batch": args.micro_batch,
            "seq_len": args.seq_len, "precision": args.precision, "repeats": args.repeats, "compute": every[0],
            "compute_per_rank": every, "collectives": measured, **engines, "gpu": gpu})
    wdist.shutdown()
    return 0


def guarded() -> None:
    """Run :func:`main` on this rank under the worker's guard (dsbench/worker/guard.py): an error is one line naming
    the rank, and the process leaves without interpreter teardown."""
    from dsbench.worker import stop
    from dsbench.worker.dist import env_rank
    from dsbench.worker.guard import leave, run_rank

    where = f"[rank {env_rank()[0]} on {socket.gethostname()}]"
    stop.install(where, "dsbench calibrate")  # told to stop, a rank leaves at once, its JIT build lock removed
    leave(run_rank(main, stop.say))


if __name__ == "__main__":
    from dsbench.paths import leave_working_folder_off_path

    leave_working_folder_off_path()
    guarded()
