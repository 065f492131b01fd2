"""Where the GPU model is known to miss, said beside the prediction it concerns (pure, stdlib only).

Each caveat names the published runs that showed the miss (docs/planner.md, "Tables held out of shared/") and
speaks only when its term is a large part of the predicted step: a quarter for attention, where a kernel at half
the priced rate moves the step by as much again; a sixth for data-parallel traffic across nodes, where the runs
disagreed by 2-2.7x in both directions; a sixth for ZeRO-Offload on a node of several ranks, where a published
8-GPU table ran 8x the offload time priced. These shares choose what to print, not any figure the model prices.
Beside them, :func:`node_note` speaks of the cluster as given: a node of more GPUs than any the model profiles.
"""

from __future__ import annotations

from dsbench.plan.gpu_layout import Layout
from dsbench.plan.gpu_offload import ranks_per_node
from dsbench.plan.gpu_profiles import OFFLOAD_ADAM

ATTENTION_SHARE = 0.25
DP_SHARE = 1 / 6
OFFLOAD_SHARE = 1 / 6
NODE_GPUS = 8
"""GPUs in one node of every kind plan.hardware profiles (HGX/DGX H100, H200 and A100 boards: 8 on NVLink)."""


def node_note(nodes: int, gpus_per_node: int) -> list[str]:
    """A line when the cluster as given puts more GPUs in a node than :data:`NODE_GPUS`: the model then prices every
    GPU pair of a node at its NVLink rate, where a real cluster of that size crosses its network."""
    if gpus_per_node <= NODE_GPUS:
        return []
    gpus = nodes * gpus_per_node
    fix = (f"--nodes {gpus // NODE_GPUS} --gpus-per-node {NODE_GPUS}" if gpus % NODE_GPUS == 0 else
           f"--nodes and --gpus-per-node (at most {NODE_GPUS})")
    return [f"{gpus_per_node} GPUs in one node are priced as one NVLink domain; HGX and DGX nodes hold {NODE_GPUS}: "
            f"give {fix} to price the network between nodes"]


def caveats(lay: Layout, terms: dict[str, float], step_s: float, calibrated: bool,
            cpu_adam_rate: float = OFFLOAD_ADAM) -> list[str]:
    """The lines to print under a priced layout (empty when no known miss concerns it); ``cpu_adam_rate``: the
    host's rate the offload was priced at (a user's --cpu-adam-rate silences the offload line)."""
    out = []
    attention = terms.get("attention", 0.0) / step_s
    if lay.attention == "flash" and not calibrated and attention >= ATTENTION_SHARE:
        out.append(f"attention is {attention:.0%} of this step, priced at FlashAttention-2's published rate; "
                   "MosaicML's MPT runs at 16k-64k tokens, whose Triton kernel ran at about half that rate, came "
                   "out 27-43% faster here than measured (the median per length): `dsbench calibrate` on your GPU "
                   "measures your kernel (then plan --profile)")
    span = lay.tp * lay.cp * lay.dp  # the data-parallel group's extent in rank order (gpu_comm.group_gbs)
    share = terms.get("dp_comm", 0.0) / step_s
    if lay.dp * lay.cp > 1 and span > lay.gpus_per_node and share >= DP_SHARE:
        members = max(1, min(lay.gpus_per_node // lay.tp, lay.dp * lay.cp))  # the group's GPUs per node (stride tp)
        out.append(f"data-parallel traffic across nodes is {share:.0%} of this step, priced at one NIC per GPU; "
                   f"NCCL can spread the ring over the {members} NICs of its GPUs on each node: published FSDP runs "
                   "whose traffic crossed nodes ran 2-2.7x faster than this rule prices them, DeepSpeed's 2021 "
                   "ZeRO-3 as it prices them; read the step as an upper bound")
    offload = terms.get("offload", 0.0) / step_s
    if offload >= OFFLOAD_SHARE and ranks_per_node(lay) > 1 and cpu_adam_rate == OFFLOAD_ADAM:
        out.append(f"the offload is {offload:.0%} of this step, its CPU Adam priced at a one-rank host's rate; a "
                   f"published run of 8 ranks on one host took 8x the offload time priced here (docs/planner.md): "
                   "give your host's rate with --cpu-adam-rate (scripts/fit_gpu_constants.py fits it)")
    return out
