# SPDX-License-Identifier: Apache-2.0
"""Inputs of the RMSNorm tests: the shared parameters, rows of mixed
magnitudes, weights around 1, and the head views (q/k-norm) and other N-D
layouts the ops must handle.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from tests.kernels.utils import make_tensor_with_layout

EPS = 1e-6
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
ADD_RESIDUAL = [False, True]


# Row magnitudes, cycled over rows: unit rows; vLLM's test scale 1/(2*hidden)
# (for wide rows mean(x^2) is then far below eps, so eps dominates); and
# large rows whose sum of squares overflows fp16 (x ~ 100: x^2 ~ 1e4, sum of
# a few > 65504), which only an fp32 accumulation gets right.
def _row_scales(rows: int, width: int) -> torch.Tensor:
    cycle = torch.tensor([1.0, 1.0 / (2 * max(width, 1)), 100.0])
    return cycle.repeat(rows // 3 + 1)[:rows]


def _scale_rows_(t: torch.Tensor) -> torch.Tensor:
    lead = t.shape[:-1]
    rows = 1
    for s in lead:
        rows *= s
    scales = _row_scales(rows, t.shape[-1]).to(device=t.device, dtype=torch.float32)
    t.copy_((t.float() * scales.view(*lead, 1)).to(t.dtype))
    return t


def make_input(
    shape: tuple[int, ...], layout: str, dtype: torch.dtype, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(view, dense base buffer) with the layout of tests.kernels.utils and
    rows of mixed magnitudes."""
    x, base = make_tensor_with_layout(shape, layout, dtype=dtype, device=device)
    _scale_rows_(x)
    return x, base


def make_weight(
    width: int, dtype: torch.dtype, device: str, has_weight: bool = True
) -> torch.Tensor | None:
    if not has_weight:
        return None
    # As vLLM's test: weights around 1, so a missing, doubled or shifted
    # weight moves outputs by ~10%, far outside the tolerances.
    return torch.empty(width, dtype=dtype, device=device).normal_(mean=1.0, std=0.1)


# ---------------------------------------------------------------------------
# Head views (q/k-norm) and other N-D layouts: factory(num_tokens, dtype,
# device) -> (view, base buffer)
# ---------------------------------------------------------------------------
ViewFactory = Callable[[int, torch.dtype, str], tuple[torch.Tensor, torch.Tensor]]


def _randn(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    return torch.randn(shape, dtype=dtype, device=device)


def qkv_view(which: str, head_dim: int, hq: int = 8, hk: int = 2) -> ViewFactory:
    def make(
        t: int, dtype: torch.dtype, device: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        qkv = _randn((t, (hq + 2 * hk) * head_dim), dtype, device)
        if which == "q":
            view = qkv[:, : hq * head_dim].view(t, hq, head_dim)
        else:
            view = qkv[:, hq * head_dim : (hq + hk) * head_dim].view(t, hk, head_dim)
        if t > 1:
            assert not view.is_contiguous()
            # The token stride is not heads * head_stride: the leading dims
            # do not collapse into one row stride.
            assert view.stride(0) != view.size(1) * view.stride(1)
        return view, qkv

    return make


def _4d_collapsible(t: int, dtype: torch.dtype, device: str):
    base = _randn((2, t, 4, 128), dtype, device)
    view = base[..., :64]  # leading dims collapse into one row stride (128)
    assert not view.is_contiguous()
    return view, base


def _4d_three_strides(t: int, dtype: torch.dtype, device: str):
    base = _randn((4, 2 * t, 3, 128), dtype, device)
    view = base[::2, ::2, :, :64]  # three distinct row strides: a dense copy
    assert not view.is_contiguous()
    s = view.stride()
    if t > 1:
        assert s[0] != view.size(1) * s[1] and s[1] != view.size(2) * s[2]
    return view, base


def _3d_transposed(t: int, dtype: torch.dtype, device: str):
    base = _randn((t, 64, 4), dtype, device)
    view = base.transpose(1, 2)  # [t, 4, 64], last-dim stride 4
    assert view.stride(-1) != 1
    return view, base


def _3d_size1_dim(t: int, dtype: torch.dtype, device: str):
    base = _randn((t, 2, 64), dtype, device)
    view = base[:, :1]  # [t, 1, 64] with a size-1 dim of stride 64
    if t > 1:
        assert not view.is_contiguous()
    return view, base


def _1d(t: int, dtype: torch.dtype, device: str):
    base = _randn((768,), dtype, device)
    return base, base


def _expanded_rows(t: int, dtype: torch.dtype, device: str):
    base = _randn((1, 769), dtype, device)
    view = base.expand(t, 769)  # row stride 0: every row reads the same memory
    return view, base


HEAD_VIEW_CASES: dict[str, ViewFactory] = {
    "q_view_d128": qkv_view("q", 128),
    "k_view_d128": qkv_view("k", 128),
    "q_view_d65": qkv_view("q", 65, hq=4, hk=1),
    "k_view_d72": qkv_view("k", 72, hq=4, hk=2),
    "4d_collapsible": _4d_collapsible,
    "4d_three_strides": _4d_three_strides,
    "3d_transposed": _3d_transposed,
    "3d_size1_dim": _3d_size1_dim,
    "1d": _1d,
    "expanded_rows": _expanded_rows,
}
# An expanded tensor cannot be written in place (rejected, see the contract
# tests).
READ_ONLY_CASES = {"expanded_rows"}
