"""A report for DeepSpeed, ready to file: its fp32 ZeRO-0 pipeline clips by the first stage's gradient norm only.

DeepSpeed and torch alone (no dsbench import), so its maintainers can run it as it is:

    DS_ACCELERATOR=cpu deepspeed --num_gpus 2 scripts/upstream_pipe_zero0_clip.py   # CPU ranks, gloo
    deepspeed --num_gpus 2 scripts/upstream_pipe_zero0_clip.py                       # GPUs

Two pipeline stages of two Linear layers each, ZeRO stage 0, fp32, ``gradient_clipping`` 1.0, one step of two
micro-batches. The oracle is one process: the same four layers, weights and micro-batches in an
``nn.Sequential`` on rank 0, its gradient norm from ``torch.nn.utils.clip_grad_norm_``. The norm DeepSpeed
clipped by is read from the step it took (``get_global_grad_norm()`` is None without a ZeRO optimizer): plain SGD
at lr 1 moves the first stage's weights by its gradients times max_norm / norm, so the norm is the first stage's
gradient norm (one process's) over the length of that move. In DeepSpeed 0.19.8 it is the first stage's
alone: ``DeepSpeedEngine.clip_fp32_gradients`` calls ``runtime/utils.clip_grad_norm_``, which counts a gradient
only where ``mpu.get_model_parallel_rank() == 0``, and a pipeline's stages are its model-parallel ranks. With
``"zero_optimization": {"stage": 1}`` the two norms agree (set ``STAGE=1`` in the environment to see it).

Rank 0 prints both norms and the first stage's own; the script exits 1 when DeepSpeed's differs from one
process's (found by dsbench's parity test on 2026-11-30; dsbench works around it in
dsbench/worker/engines/pipe_clip.py).
"""

from __future__ import annotations

import os
import sys

import deepspeed
import torch
from deepspeed.pipe import LayerSpec, PipelineModule
from torch import nn

WIDTH, LAYERS, MICRO, ACCUM = 16, 4, 2, 2


class Layer(nn.Linear):
    """A Linear layer whose weights depend on its index only, so every process builds the same ones."""

    def __init__(self, index: int) -> None:
        super().__init__(WIDTH, WIDTH)
        generator = torch.Generator().manual_seed(index)
        with torch.no_grad():
            self.weight.copy_(torch.randn(WIDTH, WIDTH, generator=generator))  # large: the norm is well over 1
            self.bias.copy_(torch.randn(WIDTH, generator=generator))


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(7)
    return [(torch.randn(MICRO, WIDTH, generator=generator), torch.randn(MICRO, WIDTH, generator=generator))
            for _ in range(ACCUM)]


def one_process_norms() -> tuple[float, float]:
    """The whole model's gradient norm over the step's micro-batches (the loss averaged over them, as DeepSpeed
    scales each by 1 / gradient_accumulation_steps), and its first two layers' (the first stage's) norm."""
    model = nn.Sequential(*(Layer(i) for i in range(LAYERS)))
    for x, y in batches():
        (nn.functional.mse_loss(model(x), y) / ACCUM).backward()
    first = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad)
                                                  for p in model[:2].parameters()]))
    return float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)), float(first)


def main() -> int:
    cpu = os.environ.get("DS_ACCELERATOR") == "cpu"
    deepspeed.init_distributed(dist_backend="gloo" if cpu else "nccl")
    module = PipelineModule([LayerSpec(Layer, i) for i in range(LAYERS)], num_stages=2,
                            loss_fn=nn.functional.mse_loss, partition_method="uniform")
    config = {"train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": ACCUM,
              "gradient_clipping": 1.0, "zero_optimization": {"stage": int(os.environ.get("STAGE", "0"))},
              "optimizer": {"type": "SGD", "params": {"lr": 1.0}}, "zero_allow_untested_optimizer": True}
    engine, *_ = deepspeed.initialize(model=module, model_parameters=module.parameters(), config=config)
    device = engine.device
    before = [p.detach().clone() for p in module.parameters()]
    engine.train_batch(data_iter=iter([(x.to(device), y.to(device)) for x, y in batches()]))
    if engine.global_rank != 0:  # rank 0 is the first stage: layers 0 and 1
        return 0
    moved = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.detach() - b)
                                                  for p, b in zip(module.parameters(), before, strict=True)]))
    whole, first = one_process_norms()
    clipped_by = first / float(moved)  # the move is gradient x 1.0 / (norm + 1e-6), at lr 1
    print(f"deepspeed {deepspeed.__version__}, ZeRO stage {config['zero_optimization']['stage']}: clipped by "
          f"{clipped_by:.6f}; one process's norm {whole:.6f}, its first stage's alone {first:.6f}")
    if abs(clipped_by - whole) > 1e-4 * whole:
        print("DeepSpeed clipped the pipeline by a norm that is not the model's", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
