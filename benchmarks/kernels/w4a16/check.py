# SPDX-License-Identifier: Apache-2.0
"""The W4A16 GEMM benchmark's correctness check: every implementation's
output against the fp64 reference (reference.w4a16_gemm_ref, with the case's
g_idx when act-order) on a fresh set of the case, within the dtype's rtol and
an atol relative to the reference's RMS (the tolerance is derived below)."""

from __future__ import annotations

from typing import Any

import torch

from benchmarks.common import timing
from benchmarks.common.sweep import CallFn, Case, compare_outputs, log
from benchmarks.kernels.w4a16.cases import (
    DTYPES,
    case_g_idx,
    codes_of,
    label,
    set_specs,
    zero_codes,
)
from vllm_myops.quantization import reference as R

# Tolerance: the output is rounded once to the dtype (rtol: torch's default
# for the dtype); the anchors that round the dequantized weight to the dtype
# before the product (mm, tinygemm, Marlin, Machete) add a random walk of
# ~sqrt(K) per-element roundings, which grows with K like the output itself:
# so atol is relative to the output's RMS (independent of K), at 4x the
# dtype's unit roundoff (2^-8 bf16, 2^-11 fp16).
ATOL_OF_RMS = {torch.bfloat16: 2.0**-6, torch.float16: 2.0**-9}
RTOL = {torch.bfloat16: 1.6e-2, torch.float16: 2e-3}
_check_cache: dict[tuple[Any, ...], tuple[Any, torch.Tensor]] = {}


def check_inputs(case: Case, device: torch.device) -> tuple[Any, torch.Tensor]:
    """A fresh set (random zero codes when asymmetric) and its fp64
    reference (with the case's g_idx when act-order), cached per case so
    every implementation sees the same."""
    key = tuple(sorted(case.items())) + (str(device),)
    if key not in _check_cache:
        _check_cache.clear()
        gen = torch.Generator(device=device).manual_seed(1234)
        s = timing.alloc_sets(set_specs(case), 1, device, generator=gen)[0]
        if case["zp"] == "asym":
            s.zeros.copy_(
                torch.randint(0, 16, s.zeros.shape, generator=gen, device=device)
            )
        ref = R.w4a16_gemm_ref(
            s.a,
            codes_of(s, case["k"]),
            s.scales,
            zero_codes(s),
            case["group"],
            g_idx=case_g_idx(case, device),
        )
        _check_cache[key] = (s, ref)
    return _check_cache[key]


def check(
    fn: CallFn, case: Case, device: torch.device
) -> tuple[bool, str, float | None]:
    s, ref = check_inputs(case, device)
    out = fn(s)
    if device.type == "cuda":
        torch.cuda.synchronize()
    dtype = DTYPES[case["dtype"]]
    rms = float(ref.float().pow(2).mean().sqrt()) if ref.numel() else 1.0
    tol = {"atol": ATOL_OF_RMS[dtype] * max(rms, 1e-3), "rtol": RTOL[dtype]}
    ok, why, err = compare_outputs([("out", out, ref)], tol)
    if not ok:
        log(f"  !! {label(case)}: disagrees with the FP32 reference: {why}")
    return ok, why, err
