# SPDX-License-Identifier: Apache-2.0
"""Tolerances for comparing a kernel's output with its FP32 reference.

One default table by dtype; an op whose error grows differently (a GEMM's
with K, attention's with sequence length) adds an override in its family's
test module through ``tolerance(dtype, **override)``. The values are the
``(rtol, atol)`` of ``torch.testing.assert_close``.
"""

from __future__ import annotations

import torch

# (rtol, atol) by dtype for outputs of O(1) magnitude rounded at most twice
# (used by the tests, the benchmarks' checks and the plugin tests). Why:
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
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 1e-2),
    torch.bfloat16: (1.6e-2, 1e-2),
}



def tolerance(
    dtype: torch.dtype, *, rtol: float | None = None, atol: float | None = None
) -> dict[str, float]:
    """kwargs for torch.testing.assert_close for outputs of this dtype; rtol /
    atol override the default of the table."""
    default_rtol, default_atol = TOLERANCES[dtype]
    return {
        "rtol": default_rtol if rtol is None else rtol,
        "atol": default_atol if atol is None else atol,
    }
