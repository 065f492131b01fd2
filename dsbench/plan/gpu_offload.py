"""ZeRO-Offload on GPUs (pure, stdlib only): what DeepSpeed's optimizer on the host adds to a step, term by term.

With ``offload_optimizer`` the fp32 master weights, Adam's moments and the fp32 gradients live in host memory and
DeepSpeedCPUAdam steps them there (Ren et al. 2021, arXiv:2101.06840 sec. 4). The GPU waits for three things, which
this module prices from DeepSpeed 0.19's code (the version constraints.txt pins):

- ``host link``: the gradients copied to the host and the updated 16-bit weights copied back, at the profile's
  ``host_link_gbs`` (one PCIe x16 link per GPU). With offload the gradient partition is accumulated in host memory:
  the first micro-batch of a step saves its 16-bit gradient there (2 bytes per element), every later one restores
  it to the GPU, adds, and saves it again (2 + 2), and the boundary copies the sum in fp32 (4): ZeRO-1/2 in
  ``stage_1_and_2.async_accumulate_grad_in_cpu_via_gpu`` (with one micro-batch per step only the fp32 copy),
  ZeRO-3 in ``stage3.partition_grads`` (its ``grad_partitions_flat_buffer`` lives on the host under offload, even
  with one micro-batch). Then the 16-bit partition comes back (2). With ``offload_param`` ZeRO-3 fetches the
  rank's 16-bit partition for every gather instead (forward, backward, and the recompute's forward), and the
  update stays on the host.
- ``cpu adam``: the step over the rank's partition, at the host's rate in parameters per second; the ranks of a
  node share its memory bandwidth, so a node's ranks step together at that rate.
- ``per tensor``: the host work per parameter tensor of the partition in the offload path (a gradient norm, an
  overflow check and a copy each, read back by the host).

The last two are properties of the host, fitted as ``zero_host_us`` is (plan/gpu_fit.py, docs/planner.md says
which rows chose them and the error on the others). Every term is counted as exposed: the step waits for the
optimizer, and the copies run in the backward's hooks.
"""

from __future__ import annotations

from dsbench.plan.gpu_comm import local_params
from dsbench.plan.gpu_layout import Layout
from dsbench.plan.gpu_profiles import GpuProfile
from dsbench.strategies import PLANNER


def partition_params(lay: Layout) -> float:
    """Parameters of the rank's partition: its share of its stage's TP shard (ZeRO shards over the data-parallel
    ranks, CP ranks included). Without a pipeline, every parameter (an untied output layer included)."""
    held = lay.shape.params() / lay.tp if lay.pp == 1 else local_params(lay)
    return held / (lay.dp * lay.cp)


def ranks_per_node(lay: Layout) -> int:
    return min(lay.gpus, lay.gpus_per_node)


def host_link_bytes(lay: Layout) -> float:
    """Bytes one rank moves over its host link per step (the module's docstring, by ZeRO stage)."""
    if not lay.offload:
        return 0.0
    part, m = partition_params(lay), lay.micro_batches
    lone = m == 1 and PLANNER[lay.strategy].zero != 3  # ZeRO-1/2's fast path: the boundary's fp32 copy alone
    grads = 4 * part if lone else (2 + 4 * (m - 1) + 4) * part  # saved, restored and saved, fp32 at the boundary
    if lay.offload_param:  # every gather fetches the partition: forward, backward, and the recompute's forward
        gathers = 2 + (lay.recompute == "full")
        return grads + 2 * part * gathers * m
    return grads + 2 * part  # the updated 16-bit partition back to the GPU


def partition_tensors(lay: Layout) -> float:
    """Parameter tensors in the rank's partition: the stage's tensors (and the embeddings, final norm and head),
    spread over the data-parallel ranks, at least one."""
    s = lay.shape
    tensors = lay.stage_layers * s.layer_tensors() + s.end_tensors()
    return max(1.0, tensors / (lay.dp * lay.cp))


def offload_terms(lay: Layout, hw: GpuProfile) -> dict[str, float]:
    """Seconds per step by part: host link, CPU Adam, per-tensor host work (all 0 without offload)."""
    if not lay.offload:
        return {"host link": 0.0, "cpu adam": 0.0, "per tensor": 0.0}
    return {"host link": host_link_bytes(lay) / (hw.host_link_gbs * 1e9),
            # the node's ranks step their partitions at once, sharing the host's memory bandwidth
            "cpu adam": partition_params(lay) * ranks_per_node(lay) / hw.offload_adam_params_per_s,
            "per tensor": partition_tensors(lay) * hw.offload_tensor_us * 1e-6}


def offload_seconds(lay: Layout, hw: GpuProfile) -> float:
    return sum(offload_terms(lay, hw).values())
