"""A GPU's own constants, measured by ``dsbench calibrate`` on one CUDA rank (pure): the ``gpu`` section of version 2
of the profile, and the GPU time model's hardware profile (:class:`GpuProfile`) it gives.

One GPU measures what it holds: the 16-bit GEMM curve, HBM bandwidth, the flash kernel and the unaligned GEMMs
(:mod:`dsbench.worker.calibrate_gpu`), and, from ``--check``'s ZeRO cells, the host's ``zero_host_us``
(:func:`dsbench.plan.gpu_fit.fit_zero_host_us`). NVLink, the network and the host link cannot be measured by one
GPU: they keep the kind's datasheet values (gpu_profiles.KINDS). Every measured fraction is of the datasheet peak
at full clock, so the calibrated profile's ``clock_fraction`` is 1 (a capped clock shows in the fractions).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from dsbench.errors import UserError
from dsbench.gpus import BY_KEY, by_device_name
from dsbench.plan.gpu_profiles import ALIASES, HF_HBM, KINDS, GpuProfile, profile_for
from dsbench.plan.gpu_time import FLASH_BACKWARD

FRACTIONS = ("gemm_peak_fraction", "unaligned_gemm_fraction", "flash_fraction", "hf_hbm_fraction")
"""Constants that are shares of a datasheet figure: in (0, 1]."""
CONSTANTS = (*FRACTIONS, "gemm_half_dim", "hbm_tbs", "memory_gib")
FLASH_COUNT = 0.5 * 4 * (1 + FLASH_BACKWARD)
"""Causal flash attention's FLOPs over b·s²·h (heads x head dim), forward and backward: the count gpu_time prices."""
FLASH_COUNT_BEFORE = 0.5 * 4 * (1 + 2)
"""The same count in profiles written before 2026-11-28 (a backward of twice the forward): they carry no
``flash_backward``."""
HALF_DIMS = range(0, 1025)
"""The ``gemm_half_dim`` values the fit tries (1 apart)."""


def kind_of_device(name: str, memory_bytes: int | None = None) -> str | None:
    """The hardware profile kind of a CUDA device name (``torch.cuda.get_device_name``, nvidia-smi's name), or None
    when no profile prices it (an H100 PCIe or NVL, an L4...). The 40 GB A100 shares the 80 GB one's name stem."""
    kind = calibration_kind(name, memory_bytes)
    return kind if kind in KINDS else None


def calibration_kind(name: str, memory_bytes: int | None = None) -> str | None:
    """What a calibration on this device is of: its hardware profile kind, else its key in dsbench/gpus.py's
    datasheet table (:func:`datasheet` prices it), else None."""
    key = table_key(name, memory_bytes)
    kind = ALIASES.get(key, key) if key else None
    return kind if kind in KINDS else key


def table_key(name: str, memory_bytes: int | None = None) -> str | None:
    """The GPU's key in dsbench/gpus.py's datasheet table (every GPU dsbench knows a peak for), or None."""
    gpu = by_device_name(name)
    if gpu is None:
        return None
    if gpu.key == "a100" and ("40GB" in name.upper() or (memory_bytes is not None and memory_bytes < 60 * 2**30)):
        return "a100-40g"
    return gpu.key


def datasheet(kind: str, hbm_tbs: float) -> GpuProfile:
    """The hardware profile a calibration starts from: the kind's (gpu_profiles.KINDS), or for a GPU only
    dsbench/gpus.py knows (an L4, an A10, an H100 PCIe...) its datasheet peak with the measured HBM bandwidth, PCIe 4
    within a node (no NVLink assumed) and a 25 GB/s network, as ``--gpu custom`` assumes them."""
    if kind in KINDS:
        return KINDS[kind]
    gpu = BY_KEY[kind]
    return GpuProfile(kind, {"bf16": gpu.bf16_tflops, "fp16": gpu.bf16_tflops}, hbm_tbs, gpu.memory_gib, 25.0, 25.0)


def _tflops(flops: float, seconds: float) -> float:
    return flops / seconds / 1e12


def fit_half_dim(narrow: list[dict[str, Any]], square_eta: float, square: int, peak_tflops: float,
                 hbm_tbs: float) -> tuple[float, float]:
    """``(gemm_peak_fraction, gemm_half_dim)`` of η(d) = η_max·d/(d + d½) (gpu_time.gemm_seconds): d½ is the value
    on :data:`HALF_DIMS` whose roofline times (FLOPs at η(n), or bytes at ``hbm_tbs``) best match the narrow GEMMs
    (least squares of the log ratio, so every width weighs the same); η_max is then what makes the square GEMM
    come out exactly: η_max = η(square)·(square + d½)/square."""
    best: tuple[float, float, float] | None = None
    for half in HALF_DIMS:
        eta_max = square_eta * (square + half) / square
        error = 0.0
        for point in narrow:
            m, n, k = point["m"], point["n"], point["k"]
            eta = eta_max * min(m, n) / (min(m, n) + half)
            model = max(2 * m * n * k / (peak_tflops * 1e12 * eta), 2 * (m * k + k * n + m * n) / (hbm_tbs * 1e12))
            error += math.log(model / point["seconds"]) ** 2
        if best is None or error < best[0]:
            best = (error, eta_max, float(half))
    assert best is not None
    return best[1], best[2]


def gpu_section(measured: dict[str, Any]) -> dict[str, Any]:
    """The profile's ``gpu`` section from calibrate_gpu's timings: the kind, and every constant with its source."""
    memory = measured.get("memory_bytes")
    kind = calibration_kind(measured["name"], memory)
    section: dict[str, Any] = {"name": measured["name"], "kind": kind, "precision": measured["precision"]}
    if kind is None:  # kept, so the profile says what it ran on; the planner refuses it in one line
        return section
    hbm = measured["copy"]["bytes"] / measured["copy"]["seconds"] / 1e12
    sheet = datasheet(kind, hbm)
    peak = sheet.peak_tflops[measured["precision"]]
    square = measured["square"]
    square_eta = _tflops(2 * square["m"] * square["n"] * square["k"], square["seconds"]) / peak
    eta_max, half = fit_half_dim(measured["narrow"], square_eta, square["m"], peak, hbm)
    wide = measured["unaligned"]
    attention = measured["attention"]
    b, heads, s, dim = attention["batch"], attention["heads"], attention["seq"], attention["head_dim"]
    constants = {
        "gemm_peak_fraction": eta_max,
        "gemm_half_dim": half,
        "unaligned_gemm_fraction": _tflops(wide["gemms"] * 2 * wide["m"] * wide["n"] * wide["k"],
                                           wide["seconds"]) / peak,
        "hbm_tbs": hbm,
        # gpu_time.layer_times counts 0.5·4·b·s²·h forward FLOPs (causal), the backward FLASH_BACKWARD times that
        "flash_fraction": _tflops(FLASH_COUNT * b * s * s * heads * dim, attention["seconds"]) / peak,
        # HF_HBM was fitted as a share of the H100's datasheet bandwidth: the eager ops keep that rate per datasheet
        # byte, so the share of the measured bandwidth scales by datasheet / measured
        "hf_hbm_fraction": min(HF_HBM * sheet.hbm_tbs / hbm, 1.0),
        "memory_gib": measured["memory_bytes"] / 2**30,
    }
    above = [key for key in FRACTIONS if constants[key] > 1]
    if above:  # faster than the datasheet says the GPU can be: not the GPU the name was taken for
        raise UserError(f"{measured['name']} ({kind}) measured {above[0]} {constants[above[0]]:.3g}, above its "
                        f"datasheet peak of {peak:g} TFLOP/s: dsbench took it for another GPU (the measurements stay "
                        "in measured.json)")
    section["constants"] = {key: float(f"{value:.4g}") for key, value in constants.items()}
    section["flash_backward"] = FLASH_BACKWARD  # the count flash_fraction was taken with (calibrated_gpu reads it)
    section["sources"] = _sources(measured, kind, square_eta * peak, peak, sheet.hbm_tbs)
    return section


def _sources(measured: dict[str, Any], kind: str, square_tflops: float, peak: float,
             sheet_hbm_tbs: float) -> dict[str, str]:
    """Where each constant of the ``gpu`` section came from, in words."""
    square, wide = measured["square"], measured["unaligned"]
    attention = measured["attention"]
    b, heads, s, dim = attention["batch"], attention["heads"], attention["seq"], attention["head_dim"]
    return {
        "gemm_peak_fraction": f"{square['m']}^3 GEMM at {square_tflops:.0f} TFLOP/s of the {peak:.0f} datasheet "
                              "peak, with gemm_half_dim",
        "gemm_half_dim": f"fitted on {len(measured['narrow'])} GEMMs {measured['narrow'][0]['m']} x "
                         f"{measured['narrow'][0]['k']} by n = {', '.join(str(p['n']) for p in measured['narrow'])}",
        "unaligned_gemm_fraction": f"{wide['m']} x {wide['k']} by {wide['k']} x {wide['n']}, forward and backward",
        "hbm_tbs": f"a {measured['copy']['bytes'] // 2**31} GiB device copy (read + write)",
        "flash_fraction": f"scaled_dot_product_attention causal fwd+bwd, {b} x {heads} x {s} x {dim}",
        "hf_hbm_fraction": f"{HF_HBM} of the datasheet's {sheet_hbm_tbs:.4g} TB/s, over the measured bandwidth",
        "memory_gib": "torch.cuda.get_device_properties",
        "links": "datasheet (one GPU cannot measure NVLink, the network or the host link)" if kind in KINDS else
                 "assumed: PCIe 4 within a node (no NVLink), 25 GB/s across nodes (no profile of this kind)",
    }


def check_section(section: Any, source: str) -> None:
    """A profile's ``gpu`` section, checked enough for the planner: one line naming the field otherwise."""
    if not isinstance(section, dict):
        raise UserError(f"{source}: gpu must be a mapping (write the profile again with dsbench calibrate)")
    kind = section.get("kind")
    if kind is not None and kind not in KINDS and kind not in BY_KEY:
        raise UserError(f"{source}: gpu.kind {kind!r} is no GPU dsbench knows (known: "
                        f"{', '.join(sorted({*KINDS, *BY_KEY}))})")
    constants = section.get("constants", {})
    if not isinstance(constants, dict):
        raise UserError(f"{source}: gpu.constants must be a mapping of numbers")
    for key, value in constants.items():
        if key not in CONSTANTS:
            raise UserError(f"{source}: gpu.constants.{key} is not a constant the GPU model has "
                            f"({', '.join(CONSTANTS)})")
        ceiling = 1.0 if key in FRACTIONS else math.inf
        if type(value) not in (int, float) or not (0 <= value <= ceiling and math.isfinite(value)) or (
                value == 0 and key != "gemm_half_dim"):
            raise UserError(f"{source}: gpu.constants.{key} must be a number in "
                            f"{'(0, 1]' if key in FRACTIONS else '(0, inf)'}, got {value!r}")
    host = section.get("zero_host_us", {})
    if not isinstance(host, dict) or not all(key in ("1", "2", "3") and type(value) in (int, float)
                                             and 0 <= value < math.inf for key, value in host.items()):
        raise UserError(f"{source}: gpu.zero_host_us must map ZeRO stages 1-3 to microseconds >= 0")


def calibrated_gpu(section: dict[str, Any], source: str) -> GpuProfile:
    """The GPU model's hardware profile from a checked ``gpu`` section: the kind's datasheet profile with every
    measured constant in place (links kept), the clock at 1 (the fractions hold it) and the host's
    ``zero_host_us`` where ``--check`` fitted it."""
    if section.get("kind") is None:
        raise UserError(f"{source}: measured on {section.get('name')!r}, which no hardware profile prices: plan "
                        "with --gpu KIND and no --profile")
    constants = dict(section.get("constants", {}))
    if "flash_fraction" in constants and "flash_backward" not in section:  # written before 2026-11-28, when the
        # model counted a flash backward as 2x its forward: the same measured seconds are a larger share of peak
        constants["flash_fraction"] *= FLASH_COUNT / FLASH_COUNT_BEFORE
    host = {int(stage): float(us) for stage, us in (section.get("zero_host_us") or {}).items()}
    fields: dict[str, Any] = {**constants, "clock_fraction": 1.0}
    if host:
        fields["zero_host_us"] = host
    if section["kind"] in KINDS:
        return profile_for(section["kind"], **fields)
    if "hbm_tbs" not in constants:
        raise UserError(f"{source}: gpu.constants.hbm_tbs is missing: a {section['kind']} has no profile to take it "
                        "from (write the profile again with dsbench calibrate)")
    return replace(datasheet(section["kind"], constants["hbm_tbs"]), **fields)
