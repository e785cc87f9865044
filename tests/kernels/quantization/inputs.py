# SPDX-License-Identifier: Apache-2.0
"""Inputs and the result check of the W4A16 kernel tests: RTN-quantized
random weights in the GPTQ interchange format (optionally act-ordered), the
activations, and a K-dependent tolerance against the fp64 reference of
vllm_myops/quantization/reference.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

import vllm_myops._custom_ops as ops
from vllm_myops.quantization import reference


@dataclass
class QuantWeight:
    """A quantized [K, N] weight in original row order, plus what the kernel
    gets (rows permuted by `perm` for act-order, then repacked)."""

    size_k: int
    size_n: int
    group_size: int
    codes: torch.Tensor  # int32 [K, N], original row order
    scales: torch.Tensor  # [G, N]
    zeros: torch.Tensor | None  # [G, N] in the scales' dtype, or None
    g_idx: torch.Tensor | None  # [K] or None (k // group_size)
    perm: torch.Tensor | None  # kernel row order (act_order_perm), or None
    qweight: torch.Tensor  # GPTQ int32 [ceil(K/8), N], kernel row order
    b_packed: torch.Tensor  # repacked for the device

    def kernel_a(self, a: torch.Tensor) -> torch.Tensor:
        """a's columns in the kernel's row order (act-order gathers them)."""
        if self.perm is None:
            return a
        return ops.w4a16_permute_cols(a, self.perm.to(a.device))

    def gemm(self, a: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return ops.w4a16_gemm(
            self.kernel_a(a),
            self.b_packed,
            self.scales,
            self.zeros,
            bias,
            self.size_k,
            self.size_n,
            self.group_size,
        )

    def ref(self, a: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """The fp64 reference on a's device (the weight's tensors follow a:
        the kernel's copies may live on another device)."""
        dev = a.device
        zeros = None if self.zeros is None else self.zeros.to(dev, torch.int32)
        return reference.w4a16_gemm_ref(
            a,
            self.codes.to(dev),
            self.scales.to(dev),
            zeros,
            self.group_size,
            None if self.g_idx is None else self.g_idx.to(dev),
            bias,
        )


def make_weight(
    size_k: int,
    size_n: int,
    group_size: int,
    *,
    symmetric: bool,
    dtype: torch.dtype,
    device: str,
    act_order: bool = False,
) -> QuantWeight:
    # Weights ~ 1/sqrt(K) so outputs are O(1) for unit activations.
    w = torch.randn(size_k, size_n) / math.sqrt(size_k)
    codes, scales, zeros = reference.quantize_rtn(w.to(dtype), group_size, symmetric)
    g_idx = perm = None
    if act_order:
        # Scatter the contiguous groups over K with a random row order, as an
        # act-order (desc_act) checkpoint stores them.
        order = torch.randperm(size_k)
        codes_o = torch.empty_like(codes)
        codes_o[order] = codes
        g_idx = torch.empty(size_k, dtype=torch.int32)
        g_idx[order] = reference.default_g_idx(size_k, group_size)
        codes = codes_o
        perm = reference.act_order_perm(g_idx, size_k, group_size)
        assert perm is not None
    kernel_codes = codes if perm is None else codes[perm.long()]
    qweight = reference.pack_int4(kernel_codes, 0).to(device)
    zeros_t = None if zeros is None else zeros.to(dtype).to(device)
    return QuantWeight(
        size_k=size_k,
        size_n=size_n,
        group_size=group_size,
        codes=codes,
        scales=scales.to(device),
        zeros=zeros_t,
        g_idx=g_idx,
        perm=perm,
        qweight=qweight,
        b_packed=ops.w4a16_repack(qweight, size_k, size_n),
    )


def make_a(m: int, size_k: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    return torch.randn(m, size_k).to(dtype).to(device)


# Relative size of one unit in the last place of each output dtype.
ULP = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}
EPS32 = 2.0**-24  # fp32 unit roundoff


def assert_gemm_close(
    out: torch.Tensor, qw: QuantWeight, a: torch.Tensor, bias: torch.Tensor | None
) -> None:
    """out matches the fp64 reference within a bound relative to the scale of
    each output's terms. Why it grows with K: fp32 accumulation of K terms
    in a blocked order errs by ~sqrt(K) * eps32 (random signs; 8x margin)
    relative to sum_k |a_k| * |term|; the CPU kernel sums a*(q - 8) and
    subtracts (z - 8) * sum(a) per group, so the terms' scale is bounded by
    the code range: 16 * s. The output is rounded once to the dtype and the
    reference rounds too: up to 1 ulp of |ref| apart. A CUDA kernel may round
    each dequantized weight (q - z) * s to the dtype before the multiply:
    half an ulp per product, random signs, so ~sqrt(K) * ulp / 2 more (x4
    margin) relative to sum |a| * |W|. A wrong group, column, zero or scale
    moves outputs by O(|W| * sqrt(K)), far above these bounds.
    The reference and the bounds are fp64 on the output's device (a GPU's
    fp64 matmuls keep them exact to ~1e-16, far inside the bounds, and keep
    the M = 1000 cases from costing seconds of CPU each)."""
    dev = out.device
    a = a.to(dev)
    ref = qw.ref(a, None if bias is None else bias.to(dev)).double()
    got = out.double()
    k = qw.size_k
    g_idx = qw.g_idx
    if g_idx is None:
        g_idx = reference.default_g_idx(k, qw.group_size)
    g_idx = g_idx.to(dev)
    scales = qw.scales.to(dev)
    s_full = scales.double()[g_idx.long()]
    a_abs = a.double().abs()
    term_scale = a_abs @ (16 * s_full)
    zeros = None if qw.zeros is None else qw.zeros.to(dev, torch.int32)
    w_abs = (
        reference.dequantize(qw.codes.to(dev), scales, zeros, qw.group_size, g_idx)
        .double()
        .abs()
    )
    ulp = ULP[out.dtype]
    bound = 8 * math.sqrt(k) * EPS32 * term_scale + ulp * ref.abs() + 2.0**-24
    if dev.type == "cuda":
        bound = bound + 4 * math.sqrt(k) * (ulp / 2) * (a_abs @ w_abs)
    if bias is not None:
        bound = bound + EPS32 * bias.to(dev).double().abs()
    err = (got - ref).abs()
    assert torch.isfinite(got).all(), "non-finite output"
    bad = err > bound
    if bad.any():
        i, j = (int(x) for x in bad.nonzero()[0])
        raise AssertionError(
            f"{int(bad.sum())} of {bad.numel()} outputs out of bound; first at "
            f"[{i}, {j}]: got {float(got[i, j])}, ref {float(ref[i, j])}, "
            f"bound {float(bound[i, j])} (max err/bound "
            f"{float((err / bound).max()):.3g})"
        )
