"""Native PyTorch strategies: one process, DDP, and FSDP2 (``fully_shard`` per block, then the root), over every
data-parallel rank or, with ``--dp-shard S``, as HSDP (S-rank shard groups, replicated across them)."""

from __future__ import annotations

import contextlib
from typing import Any

from dsbench.configs.precision import check_precision
from dsbench.worker.dist import Collectives
from dsbench.worker.engines.base import EngineOptions, TorchAdamWEngine, warmup_factor
from dsbench.worker.engines.loss_scale import LossScale
from dsbench.worker.model import transformer_blocks


def wrap_ddp(model: Any, device: str) -> Any:
    """DistributedDataParallel; gradients are all-reduced in buckets during backward."""
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=None if device == "cpu" else [device])


def wrap_fsdp2(model: Any, options: EngineOptions, device: str, mesh: Any = None) -> Any:
    """FSDP2: shard every transformer block, then the root (embeddings, final norm, head).

    Each block's parameters are all-gathered before its forward/backward and (with
    reshard-after-forward) freed after; gradients are reduce-scattered per block. On a 2-D ``mesh``
    (dp_replicate, dp_shard) that is HSDP: the gathers and reduce-scatters run within a shard group, and the
    reduced shards are all-reduced across the replicas (torch's ``fully_shard`` on a 2-D mesh, as torchtitan's
    ``apply_fsdp`` builds it for dp_replicate x dp_shard).
    """
    import torch
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    # pinned host memory needs an accelerator (torch pins through it: "Cannot access accelerator device when none is
    # available" on CPU ranks, whose offload keeps the shards where they are and steps them there)
    offload = CPUOffloadPolicy(pin_memory=device != "cpu") if options.fsdp_cpu_offload else OffloadPolicy()
    kwargs: dict[str, Any] = {"reshard_after_forward": options.fsdp_reshard, "mesh": mesh, "offload_policy": offload}
    if options.precision in ("bf16", "fp16"):
        check_precision(options.precision, cpu=device == "cpu")  # a rank started by hand: the launch checked it
        dtype = torch.bfloat16 if options.precision == "bf16" else torch.float16
        # accelerate's policy reduces and outputs in the 16-bit dtype; dsbench's (torchtitan's) reduces in fp32
        amp = {"reduce_dtype": dtype, "output_dtype": dtype} if options.fsdp_accelerate_amp else {}
        kwargs["mp_policy"] = MixedPrecisionPolicy(**{"param_dtype": dtype, "reduce_dtype": torch.float32, **amp})
    for block in transformer_blocks(model):
        fully_shard(block, **kwargs)
    return fully_shard(model, **kwargs)


def compile_blocks(model: Any) -> None:
    """torch.compile every transformer block in place (``nn.Module.compile``), as torchtitan compiles per block:
    each block is one graph reused by every layer, and wrappers applied afterwards (DDP's bucket hooks, FSDP2's
    per-block all-gather and reduce-scatter) run around the graphs, not inside them. Compilation happens at the
    first forward, in the warm-up steps."""
    for block in transformer_blocks(model):
        block.compile()


def adamw(params: Any, options: EngineOptions) -> tuple[Any, Any]:
    """torch AdamW and the warm-up schedule every native strategy uses (DeepSpeed's WarmupLR ramp)."""
    import torch

    if options.fused_optimizer:
        params = _by_tensor_kind(list(params))
    optimizer = torch.optim.AdamW(params, lr=options.lr, betas=options.betas, eps=options.eps,
                                  weight_decay=options.weight_decay, fused=options.fused_optimizer or None)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: warmup_factor(step, options.warmup_steps))
    return optimizer, scheduler


def _by_tensor_kind(params: list[Any]) -> list[Any]:
    """Parameters as optimizer groups of one tensor kind each: AdamW's fused kernel steps a group at a time and
    refuses a group mixing DTensors (torch_tp's split layers) with plain tensors (its replicated norms). The groups
    share every hyper-parameter, so the update is the one a single group would make."""
    from torch.distributed.tensor import DTensor

    split = [p for p in params if isinstance(p, DTensor)]
    plain = [p for p in params if not isinstance(p, DTensor)]
    return [{"params": group} for group in (split, plain) if group] if split and plain else params


def autocast(options: EngineOptions, device: str) -> Any:
    """A context factory: bf16/fp16 autocast for mixed precision on the rank's device, as accelerate's
    ``get_mixed_precision_context_manager`` gives it (bf16 on CPU ranks too: until 2026-11-30 they trained fp32
    under --precision bf16 and their header said bf16); nothing in fp32. fp16 on CPU ranks is refused (launch_request
    .check_precision_here), as here for a worker started by hand."""
    import torch

    if options.precision not in ("bf16", "fp16"):
        return contextlib.nullcontext
    check_precision(options.precision, cpu=device == "cpu")
    dtype = torch.bfloat16 if options.precision == "bf16" else torch.float16
    return lambda: torch.autocast(device, dtype=dtype)


def hybrid_mesh(dims: Any, device: str) -> Any:
    """HSDP's (dp_replicate, dp_shard) DeviceMesh when ``--dp-shard`` leaves more than one replica, else None (FSDP2
    over every rank, its default 1-D mesh). Replicas outermost, a shard group's ranks consecutive (so it stays inside
    a node), as ParallelDims orders them and torchtitan builds its mesh."""
    if dims is None or dims.replicate == 1:
        return None
    import torch
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(torch.device(device).type, (dims.replicate, dims.shard),
                            mesh_dim_names=("dp_replicate", "dp_shard"))


class NativeEngine(TorchAdamWEngine):
    """single / ddp / fsdp (HSDP with ``--dp-shard``) with torch.optim.AdamW, gradient accumulation and clipping."""

    mesh: Any = None
    """HSDP's 2-D mesh (None: no replicated dimension)."""

    def __init__(self, strategy: str, model: Any, options: EngineOptions, dist_info: Any) -> None:

        self.name = strategy
        self.options = options
        model = model.to(dist_info.device)
        if options.compile:
            compile_blocks(model)
        if strategy == "ddp":
            model = wrap_ddp(model, dist_info.device)
        elif strategy == "fsdp":
            self.mesh = hybrid_mesh(options.dims, dist_info.device)
            model = wrap_fsdp2(model, options, dist_info.device, self.mesh)
        self.model = model
        self.optimizer, self.scheduler = adamw(model.parameters(), options)
        # FSDP2 casts through its policy; under accelerate's, the forward runs under autocast too
        amp = strategy != "fsdp" or options.fsdp_accelerate_amp
        self._autocast = autocast(options, dist_info.device) if amp else contextlib.nullcontext
        self.loss_scale = LossScale(options.precision, Collectives(dist_info))
        self.measure_states = False

    def _sync_context(self, last_micro: bool) -> Any:
        if self.name == "ddp" and not last_micro:
            return self.model.no_sync()  # skip the gradient all-reduce until the last micro-step
        if self.name == "fsdp":
            self.model.set_requires_gradient_sync(last_micro)  # reduce-scatter only on the last micro-step
        return contextlib.nullcontext()

    def forward_backward(self, input_ids: Any, last_micro: bool) -> Any:
        with self._sync_context(last_micro):
            with self._autocast():
                loss = self.model(input_ids=input_ids, labels=input_ids).loss
            self.loss_scale.scaled(loss / self.options.grad_accum).backward()
        return loss.detach()

    def step(self) -> None:
        import torch

        finite = self.loss_scale.unscale_([p.grad for p in self.model.parameters() if p.grad is not None])
        if self.options.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.options.grad_clip)
            self.grad_norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # FSDP2: a DTensor
        self.step_optimizer(finite)

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def replicas(self) -> tuple[Any, Any] | None:
        """DDP keeps a whole copy on every rank; FSDP2 shards it (no copies) but under HSDP, whose replicas (the
        ``dp_replicate`` ranks) hold the same shard."""
        if self.name == "ddp":
            return None, list(self.model.parameters())
        if self.mesh is not None:
            return self.mesh.get_group("dp_replicate"), list(self.model.parameters())
        return None

