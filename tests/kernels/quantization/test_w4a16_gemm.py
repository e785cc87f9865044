# SPDX-License-Identifier: Apache-2.0
"""The W4A16 ops `w4a16_repack` and `w4a16_gemm` on every device: values
against the fp64 reference (vllm_myops/quantization/reference.py) with a
K-dependent bound (tests/kernels/quantization/inputs.py says why), shapes
that are not multiples of the 64x64 tile or of the group (partial last
group), group sizes 32/64/128/-1, symmetric and asymmetric, act-order,
fp16/bf16, bias, M = 0, strided activations; then the contract of
tests/kernels/contract.py: bad input rejected naming the argument, device
mix, opcheck, torch.compile(fullgraph=True), CUDA-graph capture and the CPU
kernels of every lower ISA.

Scope (tests/conftest.py): the quick scope is a representative subset for CI
on 2 cores; VLLM_MYOPS_TEST_SCOPE=full (or --scope full) runs the matrix.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import vllm_myops._custom_ops as ops
from tests.kernels import contract
from tests.kernels.quantization.inputs import assert_gemm_close, make_a, make_weight
from tests.kernels.utils import (
    cuda_devices,
    current_scope,
    devices,
    other_device_pairs,
    params_or_skip,
    scoped,
    seed_everything,
)
from vllm_myops.quantization import reference

DEVICES = devices()
_C = torch.ops._myops_C
GROUP_SIZES = [32, 64, 128, -1]
DTYPES = [torch.float16, torch.bfloat16]

# (K, N): odd small ones, SmolLM2's 576 (4.5 groups of 128) and 1536, and
# 4104 (not a multiple of 64 or 128) on both axes.
SHAPES = scoped(
    quick=[(40, 24), (576, 1536), (4104, 200)],
    full=[
        (40, 24),
        (72, 136),
        (576, 1536),
        (1536, 576),
        (4104, 200),
        (200, 4104),
        (4104, 4104),
        (100, 300),  # K % 8 != 0: the swap kernel's global-load fallback
    ],
)
NUM_ROWS = scoped(quick=[1, 7], full=[1, 7, 12, 16, 64, 255])


# ---------------------------------------------------------------------------
# 1. Values
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("group_size", GROUP_SIZES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("m", NUM_ROWS)
@pytest.mark.parametrize("device", DEVICES)
def test_w4a16_gemm_values(
    device: str, m: int, shape: tuple[int, int], group_size: int, symmetric: bool
) -> None:
    seed_everything(0)
    k, n = shape
    dtype = torch.bfloat16 if (m + group_size) % 2 else torch.float16
    qw = make_weight(k, n, group_size, symmetric=symmetric, dtype=dtype, device=device)
    a = make_a(m, k, dtype, device)
    out = qw.gemm(a)
    assert out.shape == (m, n) and out.dtype == dtype and out.is_contiguous()
    assert_gemm_close(out, qw, a, None)


@pytest.mark.parametrize(
    "m,shape",
    scoped(
        quick=[(1000, (576, 200)), (64, (1536, 576))],
        full=[(1000, (576, 1536)), (64, (4104, 576)), (255, (1536, 4104))],
    ),
)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_w4a16_gemm_many_rows(
    device: str, m: int, shape: tuple[int, int], dtype: torch.dtype
) -> None:
    """Row blocks and their remainder (M not a multiple of the row block)."""
    seed_everything(1)
    k, n = shape
    qw = make_weight(k, n, 128, symmetric=False, dtype=dtype, device=device)
    a = make_a(m, k, dtype, device)
    assert_gemm_close(qw.gemm(a), qw, a, None)


# M around the tc kernel's row blocks (32, 64) and its auto range, with N and
# K that are not multiples of its 256-column block or of 64; (100, 300): K
# and N not multiples of 8 (its unaligned A loads and scalar stores).
TC_EDGE_ROWS = scoped(quick=[17, 65], full=[17, 63, 64, 65, 127, 129, 255, 1000])
TC_EDGE_SHAPES = scoped(
    quick=[(576, 1536), (100, 300)],
    full=[(576, 1536), (4104, 576), (576, 4104), (100, 300)],
)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("group_size", scoped(quick=[32, -1], full=GROUP_SIZES))
@pytest.mark.parametrize("shape", TC_EDGE_SHAPES)
@pytest.mark.parametrize("m", TC_EDGE_ROWS)
@pytest.mark.parametrize("device", DEVICES)
def test_w4a16_gemm_tc_edges(
    device: str,
    m: int,
    shape: tuple[int, int],
    group_size: int,
    symmetric: bool,
    dtype: torch.dtype,
) -> None:
    """Row-block remainders and split-K of the CUDA tc kernel (any device:
    the same values hold everywhere)."""
    seed_everything(10)
    k, n = shape
    qw = make_weight(k, n, group_size, symmetric=symmetric, dtype=dtype, device=device)
    a = make_a(m, k, dtype, device)
    assert_gemm_close(qw.gemm(a), qw, a, None)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("group_size", scoped(quick=[32, 128], full=GROUP_SIZES))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_act_order(
    device: str, dtype: torch.dtype, group_size: int, symmetric: bool
) -> None:
    """Act-order: qweight rows and a's columns permuted by act_order_perm
    give the product of the original, unpermuted weight."""
    seed_everything(2)
    k, n = 576, 136
    qw = make_weight(
        k,
        n,
        group_size,
        symmetric=symmetric,
        dtype=dtype,
        device=device,
        act_order=group_size != -1,
    )
    a = make_a(5, k, dtype, device)
    assert_gemm_close(qw.gemm(a), qw, a, None)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_bias(device: str, dtype: torch.dtype) -> None:
    seed_everything(3)
    k, n = 576, 200
    qw = make_weight(k, n, 128, symmetric=False, dtype=dtype, device=device)
    a = make_a(7, k, dtype, device)
    bias = torch.randn(n).to(dtype).to(device)
    out = qw.gemm(a, bias)
    assert_gemm_close(out, qw, a, bias)
    # The bias is really added (not a tolerance artefact).
    assert not torch.allclose(out, qw.gemm(a), atol=1e-2)


# m 1 / 16 / 40: the decode kernels and each of the tensor-core ranges.
# Offsets 0 / 8 elements keep rows 16-byte aligned where N % 8 == 0 (136),
# 2 keeps them 4-byte aligned, 1 neither; N 138 is even but not a multiple
# of 8, N 75 odd.
@pytest.mark.parametrize("offset", [0, 1, 2, 8])
@pytest.mark.parametrize("n", [75, 136, 138])
@pytest.mark.parametrize("device", DEVICES)
def test_group_rows_odd_n_and_offset(device: str, n: int, offset: int) -> None:
    """Odd N, and scales / zeros that start at an odd element of their
    storage (contiguous views): rows of group values that are not whole
    4-byte words or 16-byte units, which a kernel may copy in such units only
    when they are."""
    seed_everything(11)
    k, dtype = 576, torch.bfloat16
    qw = make_weight(k, n, 64, symmetric=False, dtype=dtype, device=device)

    def shifted(t: torch.Tensor) -> torch.Tensor:
        buf = torch.zeros(t.numel() + offset, dtype=t.dtype, device=t.device)
        view = buf[offset:].view_as(t)
        view.copy_(t)
        assert view.is_contiguous() and view.storage_offset() == offset
        return view

    moved = dataclasses.replace(qw, scales=shifted(qw.scales), zeros=shifted(qw.zeros))
    for m in (1, 16, 40):
        a = make_a(m, k, dtype, device)
        out = moved.gemm(a)
        assert_gemm_close(out, qw, a, None)
        torch.testing.assert_close(out, qw.gemm(a), rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_zero_rows(device: str) -> None:
    qw = make_weight(
        576, 200, 128, symmetric=False, dtype=torch.bfloat16, device=device
    )
    out = qw.gemm(make_a(0, 576, torch.bfloat16, device))
    assert out.shape == (0, 200) and out.dtype == torch.bfloat16


# m = 200: above the tensor-core range, where CUDA's auto path is dequant +
# cuBLAS (whose kernel choice depends on a's alignment: the row stride of
# 589 elements is not 16-byte aligned).
@pytest.mark.parametrize("m", [9, 200])
@pytest.mark.parametrize("device", DEVICES)
def test_noncontiguous_a(device: str, m: int) -> None:
    """Rows of a with a stride > K (a column slice of a wider buffer): the
    same bits as the contiguous copy."""
    seed_everything(4)
    k, n, dtype = 576, 136, torch.bfloat16
    qw = make_weight(k, n, 64, symmetric=False, dtype=dtype, device=device)
    base = make_a(m, k + 13, dtype, device)
    a = base[:, 5 : 5 + k]
    assert not a.is_contiguous() and a.stride(1) == 1
    out = qw.gemm(a)
    assert_gemm_close(out, qw, a, None)
    torch.testing.assert_close(out, qw.gemm(a.contiguous()), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_single_row_strided_a_cpu(dtype: torch.dtype) -> None:
    """M = 1 with a column stride (x[:, ::2]): the checks accept one row of
    any layout; the CPU host copies it for the packs that read stride 1."""
    seed_everything(4)
    k, n = 576, 136
    qw = make_weight(k, n, 64, symmetric=False, dtype=dtype, device="cpu")
    a = make_a(1, 2 * k, dtype, "cpu")[:, ::2]
    assert a.stride(1) == 2
    out = qw.gemm(a)
    assert_gemm_close(out, qw, a, None)
    torch.testing.assert_close(out, qw.gemm(a.contiguous()), rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_refused_layout(device: str) -> None:
    """a with a non-unit last-dim stride is refused with a clear error."""
    k, n = 128, 64
    qw = make_weight(k, n, 64, symmetric=True, dtype=torch.bfloat16, device=device)
    a = make_a(k, 3, torch.bfloat16, device).t()
    with pytest.raises(RuntimeError, match="a's last dim must be contiguous"):
        qw.gemm(a)


# ---------------------------------------------------------------------------
# 2. Repack
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(40, 24), (576, 200), (4104, 136)])
@pytest.mark.parametrize("device", DEVICES)
def test_repack_properties(device: str, shape: tuple[int, int]) -> None:
    """Shape [ceil(N/64), ceil(K/64), 512]; deterministic; padding nibbles of
    qweight past K are ignored; and (any device's arrangement) a GEMM with
    the identity as a returns the dequantized weight exactly (one product
    per output: no accumulation error)."""
    seed_everything(5)
    k, n = shape
    dtype = torch.bfloat16
    qw = make_weight(k, n, 32, symmetric=False, dtype=dtype, device=device)
    assert qw.b_packed.shape == ops.w4a16_packed_shape(k, n)
    assert qw.b_packed.dtype == torch.int32 and qw.b_packed.is_contiguous()
    assert torch.equal(ops.w4a16_repack(qw.qweight, k, n), qw.b_packed)
    if k % 8:
        dirty = qw.qweight.clone()
        dirty[-1] |= torch.tensor(-(1 << (4 * (k % 8))), dtype=torch.int32)
        assert torch.equal(ops.w4a16_repack(dirty, k, n), qw.b_packed)
    if k <= 576:
        eye = torch.eye(k, dtype=dtype, device=device)
        zeros = None if qw.zeros is None else qw.zeros.cpu().to(torch.int32)
        w = reference.dequantize(qw.codes, qw.scales.cpu(), zeros, 32).to(dtype)
        torch.testing.assert_close(qw.gemm(eye).cpu(), w, rtol=0, atol=0)


def test_repack_cpu_arrangement() -> None:
    """The CPU arrangement documented in w4a16_kernels_isa.cpp: word r*64 + c
    of tile (nt, kt) holds the codes of qweight[kt*8 + r, nt*64 + c], nibble
    p holding the word's row (0, 2, 4, 6, 1, 3, 5, 7)[p]; zero padded."""
    seed_everything(6)
    k, n = 200, 136
    qweight = torch.randint(-(2**31), 2**31 - 1, (25, n), dtype=torch.int32)
    packed = ops.w4a16_repack(qweight, k, n)
    nt, kt = packed.shape[:2]
    dense = packed.view(nt, kt * 8, 64).permute(1, 0, 2).reshape(kt * 8, nt * 64)
    nibble_row = (0, 2, 4, 6, 1, 3, 5, 7)
    got = reference.unpack_int4(dense, 0, kt * 64).view(kt * 8, 8, nt * 64)
    want = reference.unpack_int4(qweight, 0, 200).view(25, 8, n)
    assert torch.equal(got[:25, :, :n], want[:, list(nibble_row)])
    assert not dense[25:].any() and not dense[:, n:].any()


# ---------------------------------------------------------------------------
# 3. Bad input: RuntimeError naming the argument
# ---------------------------------------------------------------------------
def _gemm_args(device: str, **change: Any) -> tuple[Any, ...]:
    k, n, g = 128, 64, 64
    qw = make_weight(k, n, g, symmetric=False, dtype=torch.bfloat16, device=device)
    args = {
        "a": make_a(3, k, torch.bfloat16, device),
        "b_packed": qw.b_packed,
        "scales": qw.scales,
        "zeros": qw.zeros,
        "bias": torch.randn(n).bfloat16().to(device),
        "size_k": k,
        "size_n": n,
        "group_size": g,
    }
    for name, fn in change.items():
        args[name] = fn(args[name]) if callable(fn) else fn
    return tuple(args.values())


BAD_GEMM: dict[str, tuple[dict[str, Any], str]] = {
    "packed_dtype": (
        {"b_packed": lambda t: t.to(torch.int64)},
        "b_packed must be int32",
    ),
    "packed_shape": (
        {"b_packed": lambda t: t[:, :1].clone()},
        "b_packed must have shape",
    ),
    "packed_float": ({"b_packed": lambda t: t.float()}, "b_packed must be int32"),
    "scales_shape": ({"scales": lambda t: t[:1].clone()}, "scales must have shape"),
    "scales_dtype": ({"scales": lambda t: t.half()}, "scales must have the dtype of a"),
    "scales_layout": (
        {"scales": lambda t: t.t().contiguous().t()},
        "scales must be contiguous",
    ),
    "zeros_shape": ({"zeros": lambda t: t[:, :32].clone()}, "zeros must have shape"),
    "zeros_dtype": ({"zeros": lambda t: t.float()}, "zeros must have the dtype of a"),
    "bias_shape": ({"bias": lambda t: t[:32].clone()}, "bias must have shape"),
    "bias_dtype": ({"bias": lambda t: t.half()}, "bias must have the dtype of a"),
    "group_48": ({"group_size": 48}, "group_size must be -1"),
    "a_dtype": ({"a": lambda t: t.float()}, "a must be float16 or bfloat16"),
    "a_width": ({"a": lambda t: t[:, :100]}, "a must have size_k=128"),
    "a_3d": ({"a": lambda t: t.unsqueeze(0)}, "a must be 2-D"),
    "size_n": ({"size_n": 65}, "b_packed must have shape|scales must have shape"),
    "size_k_0": ({"size_k": 0}, "size_k must be > 0"),
}


@pytest.mark.parametrize("case", list(BAD_GEMM))
@pytest.mark.parametrize("device", DEVICES)
def test_gemm_bad_input(device: str, case: str) -> None:
    change, match = BAD_GEMM[case]
    args = _gemm_args(device, **change)
    contract.assert_rejected_unchanged(_C.w4a16_gemm, args, "w4a16_gemm: " + match)


BAD_REPACK: dict[str, tuple[Callable[[torch.Tensor], tuple[Any, ...]], str]] = {
    "dtype": (lambda q: (q.to(torch.int64), 128, 64), "qweight must be int32"),
    "rows": (lambda q: (q[:8].clone(), 128, 64), "qweight must have shape"),
    "cols": (lambda q: (q, 128, 65), "qweight must have shape"),
    "layout": (
        lambda q: (q.t().contiguous().t(), 128, 64),
        "qweight must be contiguous",
    ),
    "size_k": (lambda q: (q, 0, 64), "size_k must be > 0"),
}


@pytest.mark.parametrize("case", list(BAD_REPACK))
@pytest.mark.parametrize("device", DEVICES)
def test_repack_bad_input(device: str, case: str) -> None:
    build, match = BAD_REPACK[case]
    q = torch.randint(0, 2**31 - 1, (16, 64), dtype=torch.int32, device=device)
    contract.assert_rejected_unchanged(
        _C.w4a16_repack, build(q), "w4a16_repack: " + match
    )


@pytest.mark.parametrize("which", ["b_packed", "scales", "zeros", "bias"])
@pytest.mark.parametrize(
    "device,other",
    params_or_skip(
        other_device_pairs(), "needs two devices (CPU and CUDA)", "cpu", "cpu"
    ),
)
def test_device_mix(device: str, other: str, which: str) -> None:
    contract.skip_without_kernel("_myops_C::w4a16_gemm", other)
    args = _gemm_args(device, **{which: lambda t: t.to(other)})
    with pytest.raises(RuntimeError, match="all tensors must be on one device"):
        _C.w4a16_gemm(*args)


# ---------------------------------------------------------------------------
# 4. opcheck, torch.compile, CUDA graphs
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("zeros,bias", [(True, True), (False, False)])
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device: str, zeros: bool, bias: bool) -> None:
    seed_everything(7)
    k, n = 200, 72
    qw = make_weight(k, n, 64, symmetric=not zeros, dtype=torch.bfloat16, device=device)
    contract.opcheck(_C.w4a16_repack, (qw.qweight, k, n))
    a = make_a(5, k, torch.bfloat16, device)
    b = torch.randn(n).bfloat16().to(device) if bias else None
    contract.opcheck(_C.w4a16_gemm, (a, qw.b_packed, qw.scales, qw.zeros, b, k, n, 64))


@pytest.mark.parametrize("path", ["wrapper", "torch_ops"])
@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device: str, path: str) -> None:
    seed_everything(8)
    k, n, g, dtype = 576, 136, 128, torch.bfloat16
    qw = make_weight(k, n, g, symmetric=False, dtype=dtype, device=device)
    bias = torch.randn(n).to(dtype).to(device)
    gemm = ops.w4a16_gemm if path == "wrapper" else _C.w4a16_gemm

    def fn(
        x: torch.Tensor,
        bp: torch.Tensor,
        s: torch.Tensor,
        z: torch.Tensor,
        b: torch.Tensor,
    ) -> torch.Tensor:
        h = x * 0.5  # an intermediate, so the op sits between other nodes
        return gemm(h, bp, s, z, b, k, n, g) + 1

    def make_args(m: int) -> tuple[torch.Tensor, ...]:
        return (make_a(m, k, dtype, device), qw.b_packed, qw.scales, qw.zeros, bias)

    contract.assert_compiles_like_eager(fn, make_args, (7, 33), backend="inductor")


@pytest.mark.parametrize(
    "device", params_or_skip(cuda_devices(), "needs a CUDA device", "cuda")
)
# ring4 and tc (both split K here), dequant + cuBLAS.
@pytest.mark.parametrize("m,n", [(16, 576), (64, 576), (256, 4104)])
def test_cuda_graph_capture_no_sync(device: str, m: int, n: int) -> None:
    seed_everything(9)
    k, dtype = 4104, torch.bfloat16
    dev = torch.device(device)
    with torch.cuda.device(dev):
        qw = make_weight(k, n, 128, symmetric=False, dtype=dtype, device=device)
        a = make_a(m, k, dtype, device)
        out: list[torch.Tensor] = []

        def call() -> None:
            out.clear()
            out.append(qw.gemm(a))

        graph = contract.capture_without_host_sync(call, dev)
        a.copy_(make_a(m, k, dtype, device))
        graph.replay()
        torch.cuda.synchronize(dev)
        assert_gemm_close(out[0], qw, a, None)


# ---------------------------------------------------------------------------
# 5. CPU ISA paths: lower ISAs in a subprocess (ATEN_CPU_CAPABILITY)
# ---------------------------------------------------------------------------
ISA_RERUN_TESTS = (
    "test_w4a16_gemm_values",
    "test_w4a16_gemm_many_rows",
    "test_act_order",
    "test_bias",
    "test_noncontiguous_a",
    "test_repack_properties",
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "isa",
    params_or_skip(
        contract.lower_cpu_isas(), "no lower CPU ISA built or available", "default"
    ),
)
def test_cpu_isa_paths(isa: str, tmp_path: Path) -> None:
    contract.rerun_under_cpu_isa(
        isa,
        Path(__file__).resolve(),
        ISA_RERUN_TESTS,
        scope=current_scope(),
        junit_xml=tmp_path / "junit.xml",
    )


# ---------------------------------------------------------------------------
# 6. The avx512 ISA's inner paths (w4a16_kernels.cpp chooses them by M and
#    CPU features; VLLM_MYOPS_W4A16_CPU_PATH forces one, an error when the
#    process cannot run it), each rerun on the same tests in a subprocess
# ---------------------------------------------------------------------------
CPU_PATH_ENV = "VLLM_MYOPS_W4A16_CPU_PATH"


def _cpu_path_unavailable(path: str) -> str | None:
    """Why `path` cannot run in this process's ISA and CPU, or None."""
    if contract.current_cpu_isa() != "avx512":
        return f"the CPU kernels run {contract.current_cpu_isa()}, not avx512"
    flags = contract.cpu_flags()
    if path in ("amx", "avx512_bf16") and "avx512_bf16" not in flags:
        return "CPU without AVX512-BF16"
    if path == "amx":
        if not {"amx_bf16", "amx_tile"} <= flags:
            return "CPU without AMX-BF16"
        if not torch._C._cpu._init_amx():
            return "Linux refused the AMX tile state"
    return None


@pytest.mark.slow
@pytest.mark.parametrize("path", ["amx", "avx512_bf16", "avx512"])
def test_cpu_avx512_paths(
    path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """amx: AMX tiles at every M (fp16 as two exact bf16 planes); avx512_bf16:
    the row-block path at M <= 2 and the bf16 panel above (bf16; fp16 runs
    fp32); avx512: fp32 FMA for both dtypes. The rerun's tests compare with
    the fp64 reference at the same tolerance as every other path."""
    why = _cpu_path_unavailable(path)
    if why:
        pytest.skip(why)
    monkeypatch.setenv(CPU_PATH_ENV, path)
    contract.rerun_under_cpu_isa(
        "avx512",
        Path(__file__).resolve(),
        ISA_RERUN_TESTS,
        scope=current_scope(),
        junit_xml=tmp_path / "junit.xml",
    )


def _assert_path_env_refused(env_name: str, bad: str, device: str) -> None:
    """A w4a16_gemm call on `device` in a process with `env_name`=`bad` fails,
    and its error names the variable and the value."""
    code = (
        "import torch, vllm_myops._custom_ops as ops\n"
        f"d = {device!r}\n"
        "a = torch.zeros(1, 64, dtype=torch.bfloat16, device=d)\n"
        "q = torch.zeros(8, 64, dtype=torch.int32, device=d)\n"
        "b = ops.w4a16_repack(q, 64, 64)\n"
        "s = torch.ones(1, 64, dtype=torch.bfloat16, device=d)\n"
        "ops.w4a16_gemm(a, b, s, None, None, 64, 64, -1)\n"
    )
    contract.assert_env_value_refused(code, env_name, bad)


def test_cpu_path_env_rejects_unknown() -> None:
    _assert_path_env_refused(CPU_PATH_ENV, "avx1024", "cpu")


# ---------------------------------------------------------------------------
# 7. The CUDA paths (w4a16_gemm.cu chooses by M; VLLM_MYOPS_W4A16_CUDA_PATH
#    forces one at every M), each rerun on the same tests in a subprocess
# ---------------------------------------------------------------------------
CUDA_PATH_ENV = "VLLM_MYOPS_W4A16_CUDA_PATH"
CUDA_PATH_TESTS = (
    "test_w4a16_gemm_values",
    "test_w4a16_gemm_many_rows",
    "test_w4a16_gemm_tc_edges",
    "test_act_order",
    "test_bias",
    "test_noncontiguous_a",
    "test_group_rows_odd_n_and_offset",
)
# Rerun per path apart from the value tests: capture needs the caching
# allocator, which the compute-sanitizer runs turn off.
CUDA_PATH_GRAPH_TESTS = ("test_cuda_graph_capture_no_sync",)
needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"
)


# Every value VLLM_MYOPS_W4A16_CUDA_PATH forces (also read by
# tests.kernels.path_reruns, device_session.sh's `paths` stage, which runs
# each path's CUDA_PATH_TESTS and CUDA_PATH_GRAPH_TESTS in a process of its
# own).
CUDA_PATHS = (
    "swap",
    "swap_global",
    "ring4",
    "tc",
    "tc4",
    "tc8",
    "dequant",
    "wgmma_tma",
)
# Paths that run on compute capability 9.0 only (sm_90a kernels); elsewhere
# forcing them raises (test_wgmma_refused_off_hopper).
HOPPER_PATHS = ("wgmma_tma",)


def _skip_unless_runnable(path: str) -> None:
    if path in HOPPER_PATHS and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip(f"{path}: needs a compute capability 9.0 GPU")


def _rerun_under_path(path: str, tests: tuple[str, ...], tmp_path: Path) -> None:
    contract.rerun_tests(
        Path(__file__).resolve(),
        tests,
        env={CUDA_PATH_ENV: path},
        scope=current_scope(),
        junit_xml=tmp_path / "junit.xml",
        device_keyword="cuda",
    )


@needs_cuda
@pytest.mark.slow
@pytest.mark.parametrize("path", CUDA_PATHS)
def test_cuda_paths(path: str, tmp_path: Path) -> None:
    """swap: the swap-AB kernel (codes as the mma's A operand, scales and
    zeros applied per group to fp32 sums) at every M, in token blocks of 8,
    its activations through its cp.async ring where a's rows allow 16-byte
    copies (test_noncontiguous_a takes its global-load fallback);
    swap_global: the same kernel loading the activations from global memory;
    ring4: the cp.async-ring kernel (M tiles of 16, 4 blocks per SM,
    <= 128 registers) at every M; tc: the shared-memory
    tensor-core kernel (row blocks of 32 / 64, 256 columns, its build chosen
    by M and its cost model) at every M, M = 1 included; tc4 / tc8: its
    64-row build of 4 / 8 warps at every M; dequant: dequantize +
    cuBLAS at every M, M = 1 included; wgmma_tma: the Hopper kernel (weight
    dequantized in registers as wgmma's A operand, activations the
    shared-memory B operand, token tiles 16 .. 256; a producer warp loads
    the activations by TMA through a tensor map, the weight tiles by bulk
    copy and the group rows by cp.async into mbarrier stages; strided or
    misaligned rows through an aligned copy) at every M. Only the paths
    "auto" can take are offered (docs/quantization/design.md: auto takes
    wgmma_tma on Hopper from M = 9 to 1024). The default run
    covers each path only in its own M range; these reruns hold every path
    to the same fp64 reference and tolerance at every M of the tests."""
    _skip_unless_runnable(path)
    _rerun_under_path(path, CUDA_PATH_TESTS, tmp_path)


@needs_cuda
@pytest.mark.slow
@pytest.mark.parametrize("path", CUDA_PATHS)
def test_cuda_graph_capture_paths(path: str, tmp_path: Path) -> None:
    """Every forced path captured in a CUDA graph and replayed on new
    activations (test_cuda_graph_capture_no_sync's cases)."""
    if os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1":
        pytest.skip("CUDA graph capture needs the caching allocator")
    _skip_unless_runnable(path)
    _rerun_under_path(path, CUDA_PATH_GRAPH_TESTS, tmp_path)


@needs_cuda
@pytest.mark.parametrize("path", HOPPER_PATHS)
def test_wgmma_refused_off_hopper(path: str) -> None:
    """Forcing a Hopper kernel on another GPU is an error that says so,
    never a launch of code the GPU cannot run."""
    if torch.cuda.get_device_capability() == (9, 0):
        pytest.skip(f"a compute capability 9.0 GPU runs the {path} path")
    code = (
        "import torch, vllm_myops._custom_ops as ops\n"
        "from vllm_myops.quantization import reference\n"
        "a = torch.randn(4, 128, device='cuda', dtype=torch.bfloat16)\n"
        "codes = torch.randint(0, 16, (128, 64), dtype=torch.int32)\n"
        "packed = ops.w4a16_repack(reference.pack_int4(codes, 0).cuda(), 128, 64)\n"
        "s = torch.ones(1, 64, device='cuda', dtype=torch.bfloat16)\n"
        "ops.w4a16_gemm(a, packed, s, None, None, 128, 64, 128)\n"
    )
    env = dict(os.environ, **{CUDA_PATH_ENV: path})
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True
    )
    assert proc.returncode != 0
    assert f"VLLM_MYOPS_W4A16_CUDA_PATH={path} needs" in proc.stderr, proc.stderr


@needs_cuda
@pytest.mark.parametrize("value", ["wgmma9000", "wgmma"])
def test_cuda_path_env_rejects_unknown(value: str) -> None:
    """Unknown values are refused, the retired ones too ("wgmma": the
    all-threads Hopper kernel, retired for wgmma_tma on 2026-12-06), rather
    than running some other path under a name that no longer means it."""
    _assert_path_env_refused(CUDA_PATH_ENV, value, "cuda")
