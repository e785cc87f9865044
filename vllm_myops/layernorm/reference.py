# SPDX-License-Identifier: Apache-2.0
"""FP32 reference implementations of the RMSNorm ops.

Slow but plainly correct torch code, kept next to the ops so a reader of a
kernel finds the function it must compute (tolerances: tests/kernels/tolerances.py). The rounding points are vLLM's:
the normalised value is rounded to the dtype before the weight multiply, and
fused_add_rms_norm rounds input + residual to the dtype before normalising it
(as vLLM's CUDA kernel does), so a correct kernel differs from these only by
fp32 summation order and at most one rounding of the output.
"""

from __future__ import annotations

import torch


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
