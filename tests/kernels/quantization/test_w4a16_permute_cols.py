# SPDX-License-Identifier: Apache-2.0
"""`w4a16_permute_cols(a, perm)`, the act-order activation gather, on every
device: exact values against torch indexing (a copy: no tolerance) for
widths around the kernel's 8-column groups and its 2048-column blocks, rows
around its row groups, fp16 and bf16, strided and transposed views of a, and
the real act-order permutation; then the contract: bad input rejected naming
the argument (perm's values too, on the CPU), a unchanged, device mix,
opcheck, torch.compile(fullgraph=True) and CUDA-graph capture. The GEMM tests
run their act-order cases through it too (inputs.QuantWeight.kernel_a)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import vllm_myops._custom_ops as ops
from tests.kernels import contract
from tests.kernels.utils import (
    cuda_devices,
    devices,
    other_device_pairs,
    params_or_skip,
    scoped,
    seed_everything,
)
from vllm_myops.quantization import reference

DEVICES = devices()
_C = torch.ops._myops_C
DTYPES = [torch.float16, torch.bfloat16]
# Widths: 1, one column short of / past an 8-column group, K % 8 != 0 (no
# 16-byte stores), one 2048-column block and one past it, a large one.
WIDTHS = scoped(
    quick=[1, 7, 9, 2049, 14336], full=[1, 7, 8, 9, 100, 2048, 2049, 4104, 14336]
)
ROWS = scoped(quick=[0, 1, 5, 300], full=[0, 1, 2, 5, 17, 300, 1000])


def expected(a: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    return a[:, perm.long()]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", WIDTHS)
@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("device", DEVICES)
def test_permute_cols_values(device: str, m: int, k: int, dtype: torch.dtype) -> None:
    seed_everything(1)
    a = torch.randn(m, k, dtype=dtype, device=device)
    perm = torch.randperm(k, device=device).to(torch.int32)
    before = a.clone()
    out = ops.w4a16_permute_cols(a, perm)
    assert out.shape == (m, k) and out.dtype == dtype and out.is_contiguous()
    torch.testing.assert_close(out, expected(a, perm), rtol=0, atol=0)
    torch.testing.assert_close(a, before, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_permute_cols_repeated_indices(device: str) -> None:
    """perm need not be a permutation: any index in [0, K) gathers that
    column (a broadcast of column 0, a reversal)."""
    a = torch.randn(6, 40, dtype=torch.bfloat16, device=device)
    for perm in (
        torch.zeros(40, dtype=torch.int32, device=device),
        torch.arange(39, -1, -1, dtype=torch.int32, device=device),
    ):
        torch.testing.assert_close(
            ops.w4a16_permute_cols(a, perm), expected(a, perm), rtol=0, atol=0
        )


VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "row_stride": lambda t: t[:, 3 : 3 + 100],  # rows 130 apart, offset base
    "every_other_row": lambda t: t[::2, :100],
    "transposed": lambda t: t[:100, :7].t(),  # column stride != 1
    "expanded_row": lambda t: t[:1, :100].expand(4, 100),  # row stride 0
}


@pytest.mark.parametrize("view", list(VIEWS))
@pytest.mark.parametrize("device", DEVICES)
def test_permute_cols_views(device: str, view: str) -> None:
    """Any strides of a are read as they are; the output is contiguous."""
    seed_everything(2)
    base = torch.randn(120, 130, dtype=torch.float16, device=device)
    a = VIEWS[view](base)
    perm = torch.randperm(a.shape[1], device=device).to(torch.int32)
    out = ops.w4a16_permute_cols(a, perm)
    assert out.is_contiguous()
    torch.testing.assert_close(out, expected(a, perm), rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_permute_cols_act_order_perm(device: str) -> None:
    """The permutation act-order layers use (reference.act_order_perm of a
    scattered g_idx) gathers what torch indexing does."""
    seed_everything(3)
    k, group = 576, 128
    g_idx = (torch.arange(k) // group)[torch.randperm(k)].to(torch.int32)
    perm = reference.act_order_perm(g_idx, k, group)
    assert perm is not None
    a = torch.randn(9, k, dtype=torch.bfloat16, device=device)
    perm = perm.to(device)
    torch.testing.assert_close(
        ops.w4a16_permute_cols(a, perm), expected(a, perm), rtol=0, atol=0
    )


# ---------------------------------------------------------------------------
# Contract
# ---------------------------------------------------------------------------
def _args(device: str, **change: Callable[[Any], Any]) -> tuple[Any, ...]:
    a = torch.randn(4, 64, dtype=torch.bfloat16, device=device)
    perm = torch.randperm(64, device=device).to(torch.int32)
    args = {"a": a, "perm": perm}
    for name, fn in change.items():
        args[name] = fn(args[name])
    return args["a"], args["perm"]


BAD: dict[str, tuple[dict[str, Callable[[Any], Any]], str]] = {
    "a_dtype": ({"a": lambda t: t.float()}, "a must be float16 or bfloat16"),
    "a_1d": ({"a": lambda t: t[0]}, "a must be 2-D"),
    "a_3d": ({"a": lambda t: t.unsqueeze(0)}, "a must be 2-D"),
    "perm_dtype": ({"perm": lambda t: t.long()}, "perm must be int32"),
    "perm_length": (
        {"perm": lambda t: t[:63].clone()},
        r"perm must have shape \[K=64\]",
    ),
    "perm_2d": ({"perm": lambda t: t.view(8, 8)}, r"perm must have shape \[K=64\]"),
    "perm_layout": ({"perm": lambda t: t.repeat(2)[::2]}, "perm must be contiguous"),
}


@pytest.mark.parametrize("case", list(BAD))
@pytest.mark.parametrize("device", DEVICES)
def test_permute_cols_bad_input(device: str, case: str) -> None:
    change, match = BAD[case]
    contract.assert_rejected_unchanged(
        _C.w4a16_permute_cols, _args(device, **change), "w4a16_permute_cols: " + match
    )


@pytest.mark.parametrize("value", [-1, 64])
def test_permute_cols_bad_values_cpu(value: int) -> None:
    """On the CPU perm's values are checked (no device round trip there);
    CUDA clamps them instead (not checked per call: it would sync)."""
    a, perm = _args("cpu")
    perm[5] = value
    contract.assert_rejected_unchanged(
        _C.w4a16_permute_cols,
        (a, perm),
        r"w4a16_permute_cols: perm's values must be in \[0, K=64\)",
    )


@pytest.mark.parametrize(
    "device", params_or_skip(cuda_devices(), "needs a CUDA device", "cuda")
)
def test_permute_cols_bad_values_cuda_stay_in_bounds(device: str) -> None:
    """Out-of-range values are clamped to [0, K): a column of a, never a
    read outside it."""
    a, perm = _args(device)
    perm[5], perm[6] = -7, 1000
    out = ops.w4a16_permute_cols(a, perm)
    torch.cuda.synchronize()
    torch.testing.assert_close(out[:, 5], a[:, 0], rtol=0, atol=0)
    torch.testing.assert_close(out[:, 6], a[:, 63], rtol=0, atol=0)


@pytest.mark.parametrize(
    "device,other",
    params_or_skip(
        other_device_pairs(), "needs two devices (CPU and CUDA)", "cpu", "cpu"
    ),
)
def test_permute_cols_device_mix(device: str, other: str) -> None:
    contract.skip_without_kernel("_myops_C::w4a16_permute_cols", other)
    args = _args(device, perm=lambda t: t.to(other))
    with pytest.raises(RuntimeError, match="all tensors must be on one device"):
        _C.w4a16_permute_cols(*args)


@pytest.mark.parametrize("device", DEVICES)
def test_permute_cols_opcheck(device: str) -> None:
    contract.opcheck(_C.w4a16_permute_cols, _args(device))


@pytest.mark.parametrize("device", DEVICES)
def test_permute_cols_compile_fullgraph(device: str) -> None:
    seed_everything(4)
    k = 200
    perm = torch.randperm(k, device=device).to(torch.int32)

    def fn(x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return ops.w4a16_permute_cols(x * 0.5, p) + 1

    def make_args(m: int) -> tuple[torch.Tensor, ...]:
        return (torch.randn(m, k, dtype=torch.bfloat16, device=device), perm)

    contract.assert_compiles_like_eager(fn, make_args, (7, 33), backend="inductor")


@pytest.mark.parametrize(
    "device", params_or_skip(cuda_devices(), "needs a CUDA device", "cuda")
)
def test_permute_cols_cuda_graph(device: str) -> None:
    seed_everything(5)
    dev = torch.device(device)
    with torch.cuda.device(dev):
        a = torch.randn(16, 4104, dtype=torch.bfloat16, device=dev)
        perm = torch.randperm(4104, device=dev).to(torch.int32)
        out: list[torch.Tensor] = []

        def call() -> None:
            out.clear()
            out.append(ops.w4a16_permute_cols(a, perm))

        graph = contract.capture_without_host_sync(call, dev)
        a.copy_(torch.randn_like(a))
        graph.replay()
        torch.cuda.synchronize(dev)
        torch.testing.assert_close(out[0], expected(a, perm), rtol=0, atol=0)
