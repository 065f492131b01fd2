"""What one CUDA GPU can measure for the GPU time model (:mod:`dsbench.plan.gpu_time`), run by ``dsbench calibrate``
on a CUDA rank. Raw timings only; :mod:`dsbench.plan.gpu_calibration` turns them into the profile's constants.

- GEMMs in 16 bits: a square 8192 one (the sustained peak), and 16,384 x 8192 by 8192 x n for n from 64 to 4096
  (the efficiency curve over the output's narrow side, gpu_time.gemm_seconds);
- GPT-2's output layer, 16,384 tokens x 768 by 768 x 50,257, forward and both backward GEMMs: a dimension that is not
  a multiple of 8 (cuBLAS's align1 kernels, gpu_profiles.UNALIGNED_GEMM);
- a 1 GiB device-to-device copy (each byte read and written once: the HBM bandwidth a streaming kernel reaches);
- ``scaled_dot_product_attention``, causal, forward and backward, at 4 x 16 heads x 2048 x head dim 128 (the
  flash kernel's fraction of peak as gpu_profiles.HOPPER_FLASH states it).

Every figure is the median of ``repeats`` timed batches after a warm-up call (calibrate_timing.rate); the GPU is
synchronised before each clock read.
"""

from __future__ import annotations

from typing import Any

from dsbench.worker.calibrate_timing import rate

SQUARE = 8192
TOKENS = 16384
NARROW = (64, 128, 256, 512, 1024, 2048, 4096)
"""The output widths of the sweep (m = TOKENS, k = SQUARE)."""
UNALIGNED = (TOKENS, 768, 50257)
"""GPT-2's output layer at 16 x 1024 tokens: tokens, hidden, vocabulary."""
COPY_BYTES = 1 << 30
ATTENTION = (4, 16, 2048, 128)
"""batch, heads, sequence, head dimension."""


def _gemm(m: int, n: int, k: int, dtype: Any, device: str, repeats: int) -> dict[str, Any]:
    import torch

    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    return {"m": m, "n": n, "k": k, **rate(lambda: a @ b, device, repeats)}


def _unaligned(dtype: Any, device: str, repeats: int) -> dict[str, Any]:
    """The forward GEMM and the two backward ones (input and weight gradients) of the output layer."""
    import torch

    tokens, hidden, vocab = UNALIGNED
    x = torch.randn(tokens, hidden, device=device, dtype=dtype)
    w = torch.randn(hidden, vocab, device=device, dtype=dtype)
    grad = torch.randn(tokens, vocab, device=device, dtype=dtype)

    def three() -> None:
        x @ w
        grad @ w.t()
        x.t() @ grad

    return {"m": tokens, "n": vocab, "k": hidden, "gemms": 3, **rate(three, device, repeats)}


def _copy(device: str, repeats: int) -> dict[str, Any]:
    import torch

    source = torch.empty(COPY_BYTES, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    return {"bytes": 2 * COPY_BYTES, **rate(lambda: target.copy_(source), device, repeats)}  # read + write


def _attention(dtype: Any, device: str, repeats: int) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    batch, heads, seq, dim = ATTENTION
    q, k, v = (torch.randn(batch, heads, seq, dim, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn(batch, heads, seq, dim, device=device, dtype=dtype)

    def forward_backward() -> None:
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)

    return {"batch": batch, "heads": heads, "seq": seq, "head_dim": dim, **rate(forward_backward, device, repeats)}


def measure_gpu(device: str, repeats: int) -> dict[str, Any]:
    """The raw timings above on this rank's GPU, with its name and memory (16-bit: bf16 where the GPU has it)."""
    import torch

    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    props = torch.cuda.get_device_properties(device)
    out: dict[str, Any] = {"name": torch.cuda.get_device_name(device), "memory_bytes": props.total_memory,
                           "precision": "bf16" if dtype is torch.bfloat16 else "fp16"}
    out["square"] = _gemm(SQUARE, SQUARE, SQUARE, dtype, device, repeats)
    out["narrow"] = [_gemm(TOKENS, n, SQUARE, dtype, device, repeats) for n in NARROW]
    out["unaligned"] = _unaligned(dtype, device, repeats)
    out["copy"] = _copy(device, repeats)
    out["attention"] = _attention(dtype, device, repeats)
    torch.cuda.empty_cache()  # the timings' buffers (about 6 GiB) are not the model's
    return out
