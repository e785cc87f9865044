# SPDX-License-Identifier: Apache-2.0
"""Thin Python wrappers over the compiled ops, one per op, out-style like
vLLM's `vllm/_custom_ops.py`.

Both ops mutate arguments and return nothing, so their schemas
(`Tensor!` ... `-> ()`) are all torch.compile needs to trace them: outputs
are the caller's tensors, whose metadata is already known, and no fake
(meta) implementation has to be registered. An op that returns a new tensor
must add a `torch.library.register_fake` here, next to its wrapper.
"""

from __future__ import annotations

import torch

from vllm_myops import _extension

_extension.ensure_loaded()
_ops = torch.ops._myops_C


def rms_norm(
    out: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
) -> None:
    """out = (input / sqrt(mean(input**2, -1) + epsilon)).to(dtype) * weight.

    `out` must be contiguous with input's shape and dtype; input may have any
    leading dims and strided rows. weight=None means no scale.
    """
    _ops.rms_norm(out, input, weight, epsilon)


def fused_add_rms_norm(
    input: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
) -> None:
    """In place: residual = input + residual (rounded to the dtype), then
    input = rms_norm(residual) * weight."""
    _ops.fused_add_rms_norm(input, residual, weight, epsilon)


def cpu_kernel_isa() -> str:
    """Vector ISA the CPU kernels use on this machine (avx512, avx2, default)."""
    return str(_ops.cpu_kernel_isa())
