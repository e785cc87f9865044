# SPDX-License-Identifier: Apache-2.0
"""What a ``myops_w4a16`` layer holds and runs, free of vLLM: the linear
methods (linear_method.py, which needs vLLM's layer classes) load and
convert a checkpoint, then call install_weights; apply() is w4a16_apply.
The benchmark runs the same two functions on bare tensors, so a served
layer's per-call work (the act-order gather, then the GEMM) is measured
where vLLM is not installed.

A layer holds ``w4a16_packed`` (w4a16_repack's layout), ``scales`` [G, N]
and ``zeros`` [G, N] (zero codes as floats; None = symmetric) in the
activation dtype, ``w4a16_perm`` [K] int32 (act-order column gather; None
without act-order) and ``w4a16_shape`` (K, N, group size).
"""

from __future__ import annotations

import torch

from vllm_myops import _custom_ops, ops
from vllm_myops.observability import counters

SPEC = ops.op("w4a16_linear")
_SLOT = counters.slot(SPEC.name, ops.PROVIDER)


def set_param(layer: torch.nn.Module, name: str, t: torch.Tensor | None) -> None:
    if hasattr(layer, name):
        delattr(layer, name)
    if t is None:
        setattr(layer, name, None)
    else:
        layer.register_parameter(name, torch.nn.Parameter(t, requires_grad=False))


def install_weights(
    layer: torch.nn.Module,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    perm: torch.Tensor | None,
    size_k: int,
    size_n: int,
    group_size: int,
    act_dtype: torch.dtype,
) -> None:
    """Repacks GPTQ-packed ``qweight`` [ceil(K/8), N] (rows already in the
    GEMM's order) and sets the tensors apply() reads."""
    packed = _custom_ops.w4a16_repack(qweight.contiguous(), size_k, size_n)
    set_param(layer, "w4a16_packed", packed)
    set_param(layer, "scales", scales.to(act_dtype).contiguous())
    set_param(
        layer, "zeros", None if zeros is None else zeros.to(act_dtype).contiguous()
    )
    set_param(layer, "w4a16_perm", perm)
    layer.w4a16_shape = (size_k, size_n, group_size)


def w4a16_apply(
    layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    size_k, size_n, group_size = layer.w4a16_shape
    x2 = x.reshape(-1, size_k)
    if layer.w4a16_perm is not None:
        x2 = _custom_ops.w4a16_permute_cols(x2, layer.w4a16_perm)
    out = _custom_ops.w4a16_gemm(
        x2,
        layer.w4a16_packed,
        layer.scales,
        layer.zeros,
        bias,
        size_k,
        size_n,
        group_size,
    )
    if counters.ENABLED:
        counters.tick(out, _SLOT)
    return out.reshape(*x.shape[:-1], size_n)
