"""What the engines add to a step beyond compute and the collectives' bytes, as the planner charges the costs
``dsbench calibrate`` fitted (dsbench.plan.engine_costs): FSDP2's units, DeepSpeed ZeRO's reductions and tensors,
tensor parallelism's and Ulysses' layers, the pipeline schedules' runtime, the optimizer's offload, and the check's
per-family constant (pure; dsbench.plan.estimate adds them up)."""

from __future__ import annotations

from dsbench.models import ModelShape
from dsbench.plan.candidate import Candidate
from dsbench.plan.comm import Calls
from dsbench.plan.inputs import Cluster
from dsbench.plan.memory import ModelStates
from dsbench.plan.pipeline_time import schedule_seconds


def check_seconds(cand: Candidate, step: float, cl: Cluster) -> float:
    """calibrate --check's fitted constant for the engine family (plan/selfcheck.py), so its steps pay what the
    isolated measurements missed: step x (measured / predicted - 1), or a pipeline's measured - predicted."""
    family = cand.runs_as.family
    return dict(cl.step_residual).get(family, step * (dict(cl.step_scale).get(family, 1.0) - 1))


def deepspeed_measured(cand: Candidate, cl: Cluster) -> bool:
    """Whether calibrate measured the candidate's ZeRO stage (not for DeepSpeed's pipeline engine, which reduces
    its stage's gradients at the boundary without the ZeRO hooks)."""
    return cand.strategy in ("zero1", "zero2", "zero3") and cand.pp == 1 and any(cl.deepspeed_s)


def framework_seconds(cand: Candidate, shape: ModelShape, micro_steps: int, cl: Cluster, calls: Calls) -> float:
    """The engine's own work beyond compute and the collectives' bytes, at the costs ``dsbench calibrate`` measured
    on its stack (dsbench.plan.profile):

    - FSDP2: units x (per micro-step cost x micro-steps + per optimizer step cost); the units are the worker's,
      every transformer block, then the root (dsbench.worker.engines.native.wrap_fsdp2);
    - DeepSpeed ZeRO: the gradient reductions (:func:`collective_calls`) x the stage's cost per reduction, plus
      for ZeRO-3 the model's parameter tensors x its cost per tensor; once per micro-step for ZeRO-2/3 (their
      gradient hooks reduce every backward) and once per step for ZeRO-1 (reduced at the boundary);
    - tensor parallelism (DTensor for the torch engine, AutoTP's layers for DeepSpeed): its cost per split layer
      x the rank's layers x micro-steps, and torch_tp's loss-parallel head's cost x micro-steps;
    - DeepSpeed Ulysses: its cost per layer x the layers x micro-steps;
    - torch's zero-bubble schedules: the split backward's cost per layer x the rank's layers x micro-batches.
    """
    # tensor parallelism: every split layer of the rank's stage, every micro-step
    own = shape.layers / cand.pp * tp_layer_seconds(cand, cl) * micro_steps if cand.tp > 1 else 0.0
    if cand.loss_parallel:  # torch_tp's head split by vocabulary, every micro-step
        own += cl.lp_head_s * micro_steps
    if cand.ulysses > 1:  # Ulysses' attention wrapper and split linears, every layer, every micro-step
        own += shape.layers * cl.ulysses_layer_s * micro_steps
    if cand.zero_bubble:  # the split backward of every layer of the rank's chunks, every micro-batch
        own += shape.layers / cand.pp * cl.zb_split_layer_s * micro_steps
    own += schedule_seconds(cand, micro_steps, cl.pipe_costs)  # the pipeline engine's runtime: per step, per pass
    if deepspeed_measured(cand, cl):
        per_call, per_tensor = cl.deepspeed_s[1 if cand.strategy != "zero1" else 0], cl.deepspeed_s[2]
        if cand.strategy in ("zero1", "zero2"):  # measured on the profile's model where it was, else the stack's
            per_call = cl.zero_model_call_s[0 if cand.strategy == "zero1" else 1] or per_call
        if cand.strategy == "zero1":
            return own + calls.grads * per_call
        tensors = len(shape.tensors()) if cand.strategy == "zero3" else 0
        return own + (calls.grads * per_call + tensors * per_tensor) * micro_steps
    if cand.strategy not in ("fsdp", "fsdp_hybrid"):
        return own
    units = round(shape.layers / cand.pp) + 1
    per_micro, per_step = cl.fsdp_unit_s
    return own + units * (per_micro * micro_steps + per_step)


def tp_layer_seconds(cand: Candidate, cl: Cluster) -> float:
    """The profile's own cost of one split layer of the candidate's kind (:attr:`Cluster.tp_layer_s`)."""
    costs = dict(cl.tp_layer_s)
    cost = costs.get(cand.tp_kind, 0.0)
    if not cost and cand.tp_kind == "dtensor_sp":  # profiles from before 2026-11-26 16:00: plain DTensor's cost
        cost = costs.get("dtensor", 0.0)
    return cost


def offload_seconds(cand: Candidate, states: ModelStates, stepped: float, cl: Cluster, micro_batches: int = 1) -> float:
    """ZeRO-Offload per step. With the optimizer alone on the host under ZeRO-1/2 and a profile that measured it:
    the rank's ``stepped`` parameters x the profile's ``zero_offload_param_s`` (what the offload added to ZeRO-2's
    step on its model, signed; stages 1 and 2 share DeepSpeed's offload path, DeepSpeedZeroOptimizer's). Otherwise:
    gradients to the host and parameters back over the host link, plus the CPU Adam step, memory-bound at ~10 GB/s
    of optimizer state per rank (a rough figure; measure with --verify), and NVMe's reads and writes."""
    if states.host == 0 and states.nvme == 0:
        return 0.0
    if _offload_measured(cand, cl):
        return stepped * cl.zero_offload_param_s
    if cand.offload == "none":  # ZeRO-3's parameters alone off the device: the optimizer steps on it (no CPU Adam);
        # every gather fetches the partition over the host link: forward, backward and the recompute's forward, per
        # micro-batch (ZeRO-Infinity, Rajbhandari et al. 2021 sec. 5; the GPU model's gpu_offload.host_link_bytes)
        fetched = states.host * (2 + cand.checkpointing) * micro_batches
        return fetched / (cl.host_link.bandwidth_gbs * 1e9) + nvme_seconds(states)
    transfer = (states.grads + states.params) / (cl.host_link.bandwidth_gbs * 1e9)
    cpu_step = (states.optimizer + states.master) / 10e9
    return transfer + cpu_step + nvme_seconds(states)


def nvme_seconds(states: ModelStates) -> float:
    """ZeRO-Infinity's swaps of the rank's NVMe-resident states: read and write once per step at ~3 GB/s per rank."""
    return 2 * states.nvme / 3e9


def _offload_measured(cand: Candidate, cl: Cluster) -> bool:
    """Whether the profile timed the candidate's offload on its model: the optimizer alone on the host (CPU), under
    ZeRO-1 or ZeRO-2 without a pipeline."""
    return (cl.zero_offload_param_s is not None and cand.strategy in ("zero1", "zero2") and cand.pp == 1
            and cand.offload == "cpu" and cand.offload_param == "none")
