# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by the kernel tests (in the spirit of vLLM's
tests/kernels/utils.py): test scopes, the device list, seeding and tensors
with a chosen memory layout. Nothing here is specific to one op; the checks
every op's kernels must pass live in tests/kernels/contract.py.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

# ---------------------------------------------------------------------------
# Scopes: "quick" (CI on a small CPU machine) and "full" (the whole matrix,
# e.g. on the H200). Chosen by `pytest --scope=...` (wins) or the env var;
# tests/conftest.py passes the option in before test modules are collected.
# ---------------------------------------------------------------------------
SCOPE_ENV = "VLLM_MYOPS_TEST_SCOPE"
SCOPES = ("quick", "full")
DEFAULT_SCOPE = "quick"

_scope_option: str | None = None


def _check_scope(scope: str, origin: str) -> str:
    if scope not in SCOPES:
        raise ValueError(f"{origin}: test scope must be one of {SCOPES}, got {scope!r}")
    return scope


def set_scope_option(scope: str | None) -> None:
    """Called by conftest with the value of `--scope` (None when not given)."""
    global _scope_option
    _scope_option = None if scope is None else _check_scope(scope, "--scope")


def current_scope() -> str:
    """The active scope: `--scope` option, else $VLLM_MYOPS_TEST_SCOPE, else quick."""
    if _scope_option is not None:
        return _scope_option
    env = os.environ.get(SCOPE_ENV, "").strip()
    return _check_scope(env, SCOPE_ENV) if env else DEFAULT_SCOPE


def is_full_scope() -> bool:
    return current_scope() == "full"


def scoped(quick: Sequence[Any], full: Sequence[Any]) -> list[Any]:
    """Parameter values for the active scope, e.g.
    `NUM_TOKENS = scoped(quick=[1, 83], full=[0, 1, 7, 83, 4096])`."""
    return list(full if is_full_scope() else quick)


# Marks a test or a parameter as belonging to the full scope only; in the
# quick scope conftest deselects it.
full_only = pytest.mark.full


# ---------------------------------------------------------------------------
# Devices and seeding
# ---------------------------------------------------------------------------
def devices() -> list[str]:
    """ "cpu" always; "cuda" when a GPU is usable, and "cuda:1" as well when
    there are 2+ GPUs (as vLLM's tests do, so the device guard is exercised)."""
    result = ["cpu"]
    if torch.cuda.is_available():
        result.append("cuda")
        if torch.cuda.device_count() >= 2:
            result.append("cuda:1")
    return result


def cuda_devices() -> list[str]:
    return [d for d in devices() if d.startswith("cuda")]


def other_device_pairs() -> list[tuple[str, str]]:
    """(device, another device) for every ordered pair of distinct devices."""
    return [
        (dev, other)
        for dev in devices()
        for other in devices()
        if torch.device(dev) != torch.device(other)
    ]


def params_or_skip(params: list[Any], reason: str, *placeholder: object) -> list[Any]:
    """`params`, or one skipped placeholder saying why there are none (instead
    of pytest's anonymous "got empty parameter set")."""
    return params or [pytest.param(*placeholder, marks=pytest.mark.skip(reason=reason))]


def seed_everything(seed: int) -> None:
    """Fixed seeds for python, numpy (when installed) and torch (all devices)."""
    random.seed(seed)
    try:
        import numpy as np
    except ImportError:
        pass
    else:
        np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


# ---------------------------------------------------------------------------
# Layouts. A maker returns (view, base): `view` has the requested shape and
# layout, `base` is the dense buffer it lives in, so a test can check that a
# kernel wrote nothing outside the view (and nothing at all into an input).
# ---------------------------------------------------------------------------
LAYOUTS = ("contiguous", "sliced", "sliced_offset", "row_strided", "transposed")
# contiguous    : dense, row stride == width.
# sliced        : x[..., :d] of a [.., 2d] buffer: row stride 2d, last stride 1.
# sliced_offset : x[..., 1:1+d] of a [.., 2d+1] buffer: like sliced, plus a data
#                 pointer (and odd row stride) that break 16-byte alignment, so
#                 vectorised paths must fall back.
# row_strided   : x[::2] of a [2*rows, ..] buffer (every other row).
# transposed    : last-dim stride != 1 (the rows are the buffer's columns).

Init = Callable[..., torch.Tensor]


def _rows_and_width(shape: Sequence[int]) -> tuple[int, int]:
    width = shape[-1]
    rows = 1
    for s in shape[:-1]:
        rows *= s
    return rows, width


def make_tensor_with_layout(
    shape: Sequence[int],
    layout: str,
    *,
    dtype: torch.dtype,
    device: str | torch.device,
    init: Init = torch.randn,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A tensor of `shape` with the given layout, and its dense base buffer.

    `init(shape, dtype=, device=)` fills the base (torch.randn by default).
    Asserts that a non-contiguous layout really is non-contiguous whenever
    the shape allows it (more than one row; for `transposed`, also width > 1).
    """
    shape = tuple(int(s) for s in shape)
    assert len(shape) >= 1, "layouts need at least one dim"
    d = shape[-1]
    lead = shape[:-1]

    def new(s: Sequence[int]) -> torch.Tensor:
        return init(tuple(s), dtype=dtype, device=device)

    if layout == "contiguous":
        base = new(shape)
        view = base
    elif layout == "sliced":
        base = new((*lead, 2 * d))
        view = base[..., :d]
    elif layout == "sliced_offset":
        base = new((*lead, 2 * d + 1))
        view = base[..., 1 : 1 + d]
    elif layout == "row_strided":
        if len(shape) < 2:
            raise ValueError("row_strided needs at least 2 dims")
        base = new((2 * shape[0], *shape[1:]))
        view = base[::2]
    elif layout == "transposed":
        base = new((d, *lead))
        view = base.movedim(0, -1)
    else:
        raise ValueError(f"unknown layout {layout!r}")

    assert tuple(view.shape) == shape, (view.shape, shape)
    assert base.is_contiguous()
    assert_layout(view, layout)
    return view, base


def assert_layout(view: torch.Tensor, layout: str) -> None:
    """The layout claim is true of `view` (non-contiguous when it can be)."""
    rows, d = _rows_and_width(view.shape)
    if layout == "contiguous":
        assert view.is_contiguous()
        return
    if d > 0 and layout != "transposed":
        assert view.stride(-1) == 1, f"{layout}: last dim must stay unit-stride"
    can_be_noncontiguous = rows > 1 and d >= 1 and (d > 1 or layout != "transposed")
    if can_be_noncontiguous:
        assert not view.is_contiguous(), f"{layout} {tuple(view.shape)} is contiguous"
    if layout == "transposed" and rows > 1 and d > 1:
        assert view.stride(-1) != 1
    if layout == "sliced_offset" and view.numel() > 0:
        assert view.data_ptr() % 16 != 0, "sliced_offset must be misaligned"


def view_mask(base: torch.Tensor, view: torch.Tensor) -> torch.Tensor:
    """Bool tensor shaped like the dense `base`: True where `view` has an element."""
    assert base.is_contiguous()
    assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    mask = torch.zeros(base.shape, dtype=torch.bool, device=base.device)
    offset = view.storage_offset() - base.storage_offset()
    mask.as_strided(view.shape, view.stride(), offset).fill_(True)
    return mask


def assert_untouched_outside(
    base_before: torch.Tensor, base_after: torch.Tensor, view: torch.Tensor
) -> None:
    """Bitwise: every element of the buffer outside `view` kept its value."""
    outside = ~view_mask(base_after, view)
    before, after = base_before[outside], base_after[outside]
    changed = (before != after) & ~(before.isnan() & after.isnan())
    assert not changed.any(), (
        f"{int(changed.sum())} elements outside the view were written "
        f"(view shape {tuple(view.shape)}, strides {view.stride()})"
    )


def assert_all_written(out: torch.Tensor) -> None:
    """`out` was NaN-poisoned before the call: no NaN may remain."""
    unwritten = out.isnan()
    if unwritten.any():
        idx = unwritten.nonzero()[:5].tolist()
        raise AssertionError(
            f"{int(unwritten.sum())} of {out.numel()} output elements were not "
            f"written (first at {idx})"
        )
