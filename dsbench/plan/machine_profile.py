"""A machine profile (``dsbench calibrate``'s, ``--profile``) read once and applied to the planner's cluster: the
rates and links it measured, each scaled by the share of the cores a plan's ranks get."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dsbench.plan.engine_costs import TP_LAYER_RATE
from dsbench.plan.inputs import Cluster
from dsbench.plan.pipeline_time import PASS_RATE, STEP_RATE
from dsbench.plan.profile import Profile, compute_group
from dsbench.plan.profile_check import load_profile
from dsbench.plan.selfcheck import step_residual, step_scale


def read_profile(path: str) -> Profile:
    """The machine profile at ``path``, read and checked field by field (once: the object is passed on)."""
    from dsbench.io import read_json

    return Profile(path, load_profile(read_json(path, "machine profile"), path))


def with_profile(cl: Cluster, profile: dict[str, Any]) -> Cluster:
    """The cluster with what the profile measured: the forward+backward rate per rank (the slowest rank's) and the
    links of each measured group; what it did not measure (across nodes, for a one-node profile) stays as given."""
    intra, inter = compute_group(profile)
    # CPU ranks: gloo's threads share the cores with the compute, so nothing overlaps (docs/planner.md)
    rates, share = profile["rates"], core_share(profile, cl.gpus_per_node)
    by_micro = rates.get("model_tflops_by_micro_batch", {})
    return replace(cl, compute_tflops=rates["model_tflops"] * share, intra=intra or cl.intra,
                   compute_by_micro_batch=tuple(sorted((int(m), r * share) for m, r in by_micro.items())),
                   inter=inter or cl.inter, optimizer_params_per_s=rates["adam_params_per_s"] * share,
                   fsdp_unit_s=(rates.get("fsdp_unit_s_per_micro_step", 0.0) / share,
                                rates.get("fsdp_unit_s_per_step", 0.0) / share),
                   deepspeed_s=tuple(rates.get(key, 0.0) / share for key in ("zero1_call_s", "zero2_call_s",
                                                                              "zero3_tensor_s")),
                   zero_model_call_s=(rates.get("zero1_model_call_s", 0.0) / share,
                                      rates.get("zero2_model_call_s", 0.0) / share),
                   zero_offload_param_s=(rates["zero_offload_param_s"] / share if "zero_offload_param_s" in rates
                                         else None),
                   tp_layer_s=tuple((kind, rates.get(rate, 0.0) / share) for kind, rate in TP_LAYER_RATE.items()),
                   lp_head_s=rates.get("torch_tp_lp_head_s", 0.0) / share,
                   ulysses_layer_s=rates.get("ulysses_layer_s", 0.0) / share,
                   zb_split_layer_s=rates.get("zb_split_layer_s", 0.0) / share,
                   pipe_runtime=tuple((schedule, rates.get(STEP_RATE[schedule], 0.0) / share,
                                       rates.get(key, 0.0) / share) for schedule, key in PASS_RATE.items()),
                   overlap_comm=not str(profile.get("device", "")).startswith("cpu"),
                   step_scale=tuple(sorted(step_scale(profile).items())),
                   step_residual=tuple(sorted((family, seconds / share)
                                              for family, seconds in step_residual(profile).items())),
                   spread=tuple(sorted((profile.get("spread") or {}).items())))


def core_share(profile: dict[str, Any], ranks_per_node: int) -> float:
    """A CPU rank's rate against calibrate's, from the cores its node's ranks share: calibrate runs one thread per
    rank (``OMP_NUM_THREADS=1``), so a rank has a core of its own while a node runs no more ranks than the machine
    has cores, and cores / ranks of one beyond that, the ranks taking turns. The profile's own rates were measured
    at its ranks per node, so the share is the plan's over the calibration's. 1 on GPUs and for a profile that did
    not record its machine's cores."""
    cores = _cpu_cores(profile)
    if cores is None:
        return 1.0
    cpus, calibrated = cores
    return min(1.0, cpus / ranks_per_node) / min(1.0, cpus / calibrated)


def _cpu_cores(profile: dict[str, Any]) -> tuple[int, int] | None:
    """(the machine's cores, the ranks per node it was calibrated with) of a CPU profile that recorded its cores;
    None for a GPU profile or an older one."""
    cpus = (profile.get("machine") or {}).get("cpus")
    if not str(profile.get("device", "")).startswith("cpu") or cpus is None:
        return None
    return cpus, max(1, profile.get("world_size", 1) // profile.get("nodes", 1))


def core_note(profile: dict[str, Any], ranks_per_node: int) -> str | None:
    """A line for predictions of CPU runs with more ranks per node than the machine has cores and than the profile
    was calibrated with: :func:`core_share` prices the shared cores for compute, but each collective step then waits
    for the scheduler to run the other ranks (a 4-rank all-reduce here: 5.2 ms per call against well under 1 ms on 2
    ranks), which only a calibration at that rank count measures. Measured on llama-tiny over 4 ranks and 2 cores
    (docs/planner.md): ZeRO-2 -34% to -46% and torch's pipeline +31% to +55% from a 2-rank profile, -1% and -12% from
    a 4-rank one. None when the plan fits the profile's ranks or the machine's cores."""
    cores = _cpu_cores(profile)
    if cores is None or ranks_per_node <= max(cores):
        return None
    cpus, calibrated = cores
    return (f"{ranks_per_node} ranks per node share {cpus} cores and the profile measured {calibrated}: its "
            f"collectives do not carry that wait; `dsbench calibrate --num-gpus {ranks_per_node}` measures them")
