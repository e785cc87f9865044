# SPDX-License-Identifier: Apache-2.0
"""FP32 reference implementations of the ops and their tolerances by dtype.

Slow but plainly correct torch code, kept next to the ops so a reader of a
kernel finds the function it must compute. The rounding points are vLLM's:
the normalised value is rounded to the dtype before the weight multiply, and
fused_add_rms_norm rounds input + residual to the dtype before normalising it
(as vLLM's CUDA kernel does), so a correct kernel differs from these only by
fp32 summation order and at most one rounding of the output.
"""

from __future__ import annotations

import torch

# (rtol, atol) by dtype, used by every correctness check (tests, benchmarks,
# the plugin's checks). Why these values:
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


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    """kwargs for torch.testing.assert_close for outputs of this dtype."""
    rtol, atol = TOLERANCES[dtype]
    return {"rtol": rtol, "atol": atol}


def rms_norm_ref(
    x: torch.Tensor, weight: torch.Tensor | None, epsilon: float
) -> torch.Tensor:
    """rms_norm over the last dim in fp32; returns a new tensor of x's dtype."""
    xf = x.float()
    variance = xf.pow(2).mean(dim=-1, keepdim=True)
    out = (xf * torch.rsqrt(variance + epsilon)).to(x.dtype)
    if weight is not None:
        out = (out.float() * weight.float()).to(x.dtype)
    return out


def fused_add_rms_norm_ref(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (normalised output, new residual); inputs are not modified."""
    new_residual = (x.float() + residual.float()).to(x.dtype)
    return rms_norm_ref(new_residual, weight, epsilon), new_residual
