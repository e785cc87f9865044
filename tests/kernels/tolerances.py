# SPDX-License-Identifier: Apache-2.0
"""Tolerances for comparing a kernel's output with its FP32 reference, in
the shape vLLM IR uses (vllm/ir/tolerances.py: ``{dtype: {"atol", "rtol"}}``).

One default table by dtype; an op whose error grows differently (a GEMM's
with K, attention's with sequence length) declares its own ``ToleranceSpec``
of overrides in its family's tests, as a vLLM IR op does with
``override_tolerance``, and asks ``tolerance(dtype, overrides)``. The values
are kwargs of ``torch.testing.assert_close``.
"""

from __future__ import annotations

import torch

ToleranceSpec = dict[torch.dtype, dict[str, float]]

# By dtype, for outputs of O(1) magnitude rounded at most twice (used by the
# tests, the benchmarks' checks and the plugin tests). Why:
# - float32: 24-bit mantissa; different summation orders of a row give ~1e-6
#   relative differences in the variance, hence in every output.
# - float16: 11-bit mantissa, 1 ulp = 2^-10 ~ 9.8e-4 relative. The output is
#   rounded twice (normalised value, then times weight): allow ~2 ulp, and an
#   absolute floor for outputs near zero where relative error is meaningless.
# - bfloat16: 8-bit mantissa, 1 ulp = 2^-7 ~ 7.8e-3 relative at worst; two
#   roundings -> 1.6e-2 (torch's default bf16 rtol), same absolute floor.
# Outputs of RMSNorm are O(1) (normalised, weight ~ 1), so atol = 1e-2 for
# the half types only matters near zero; a bug (wrong row, missing weight,
# stale residual) moves values by O(1) and cannot hide under it.
TOLERANCES: ToleranceSpec = {
    torch.float32: {"atol": 1e-5, "rtol": 1e-5},
    torch.float16: {"atol": 1e-2, "rtol": 2e-3},
    torch.bfloat16: {"atol": 1e-2, "rtol": 1.6e-2},
}


def tolerance(
    dtype: torch.dtype,
    overrides: ToleranceSpec | None = None,
    *,
    rtol: float | None = None,
    atol: float | None = None,
) -> dict[str, float]:
    """kwargs for torch.testing.assert_close for outputs of this dtype: the
    op's override for the dtype when it has one, else the default of the
    table; rtol / atol, when given, replace that value."""
    if overrides is not None and dtype in overrides:
        chosen = overrides[dtype]
    elif dtype in TOLERANCES:
        chosen = TOLERANCES[dtype]
    else:
        raise ValueError(
            f"no tolerance for {dtype}: add it to TOLERANCES or to the op's overrides"
        )
    return {
        "rtol": chosen["rtol"] if rtol is None else rtol,
        "atol": chosen["atol"] if atol is None else atol,
    }
