# SPDX-License-Identifier: Apache-2.0
"""One call of each RMSNorm op checked against the FP32 reference
(vllm_myops/layernorm/reference.py, tolerances from tests/kernels/tolerances.py):
the values, every element written, inputs and the buffers around the tensors
untouched. The ops work in place, so the reference is computed FIRST.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

import vllm_myops._custom_ops as ops
from tests.kernels import tolerances
from tests.kernels.layernorm.inputs import EPS
from tests.kernels.utils import assert_all_written, assert_untouched_outside
from vllm_myops.layernorm import reference


def tol(dtype: torch.dtype) -> dict[str, float]:
    return tolerances.tolerance(dtype)


def check_rms_norm(
    x: torch.Tensor,
    x_base: torch.Tensor,
    weight: torch.Tensor | None,
    *,
    result_offset: int = 0,
    eps: float = EPS,
) -> None:
    """rms_norm into a NaN-poisoned contiguous result placed `result_offset`
    elements into a larger NaN buffer (an offset of 1 misaligns it)."""
    ref = reference.rms_norm_ref(x, weight, eps)  # reference first
    x_base_before = x_base.clone()
    numel = x.numel()
    out_buf = torch.full(
        (numel + 2 * result_offset + 1,), float("nan"), dtype=x.dtype, device=x.device
    )
    out = out_buf[result_offset : result_offset + numel].view(x.shape)
    assert out.is_contiguous()

    ops.rms_norm(out, x, weight, eps)

    assert_all_written(out)
    torch.testing.assert_close(out, ref, **tol(x.dtype))
    assert torch.equal(x_base, x_base_before), "rms_norm modified its input"
    outside = torch.ones_like(out_buf, dtype=torch.bool)
    outside[result_offset : result_offset + numel] = False
    assert out_buf[outside].isnan().all(), "rms_norm wrote outside result"


def check_fused_add(
    x: torch.Tensor,
    x_base: torch.Tensor,
    residual: torch.Tensor,
    res_base: torch.Tensor,
    weight: torch.Tensor | None,
    *,
    eps: float = EPS,
) -> None:
    # The op is in place: reference first.
    ref_out, ref_res = reference.fused_add_rms_norm_ref(x, residual, weight, eps)
    x_before, res_before = x_base.clone(), res_base.clone()

    ops.fused_add_rms_norm(x, residual, weight, eps)

    torch.testing.assert_close(x, ref_out, **tol(x.dtype))
    # The new residual is input + residual summed in fp32 and rounded once to
    # the dtype, exactly what the reference computes: it must match bit for
    # bit (an extra rounding or a low-precision add would show up here).
    torch.testing.assert_close(residual, ref_res, rtol=0, atol=0)
    # Both tensors are written through their own strides (or a dense
    # temporary copied back): nothing else in their buffers may change.
    assert_untouched_outside(x_before, x_base, x)
    assert_untouched_outside(res_before, res_base, residual)


def check_either_op(
    add_residual: bool,
    x: torch.Tensor,
    x_base: torch.Tensor,
    weight: torch.Tensor | None,
    make_residual: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    *,
    result_offset: int = 0,
    eps: float = EPS,
) -> None:
    """check_fused_add with the (residual, base) of `make_residual`, or
    check_rms_norm: the two ops on the same input."""
    if add_residual:
        residual, res_base = make_residual()
        check_fused_add(x, x_base, residual, res_base, weight, eps=eps)
    else:
        check_rms_norm(x, x_base, weight, result_offset=result_offset, eps=eps)
