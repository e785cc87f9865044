# SPDX-License-Identifier: Apache-2.0
"""GPTQ checkpoint details beyond the interchange format (no vLLM import:
the quantize CLI uses it too)."""

from __future__ import annotations

import torch

from vllm_myops.quantization import reference

CHECKPOINT_FORMATS = ("gptq", "gptq_v2")


def gptq_zeros(
    qzeros: torch.Tensor, size_n: int, sym: bool, checkpoint_format: str
) -> torch.Tensor | None:
    """Zero codes [G, N] (int32) of a GPTQ ``qzeros [G, N/8]``, or None when
    symmetric (zero 8, whatever qzeros holds: GPTQ v1 writes 7 there).
    v1 (``gptq``) stores z - 1 (mod 16), v2 (``gptq_v2``) stores z."""
    if checkpoint_format not in CHECKPOINT_FORMATS:
        raise ValueError(
            f"checkpoint_format: expected one of {list(CHECKPOINT_FORMATS)}, "
            f"got {checkpoint_format!r}"
        )
    if sym:
        return None
    z = reference.unpack_int4(qzeros, 1, size_n)
    if checkpoint_format == "gptq":
        z = (z + 1) & 0xF
    return z


def pack_gptq_zeros(
    zeros: torch.Tensor | None, groups: int, size_n: int
) -> torch.Tensor:
    """GPTQ v1 ``qzeros [G, N/8]`` of zero codes [G, N] (None = symmetric:
    8, stored as 7)."""
    z = (
        torch.full((groups, size_n), reference.SYM_ZERO, dtype=torch.int32)
        if zeros is None
        else zeros.to(torch.int32)
    )
    return reference.pack_int4((z - 1) & 0xF, 1)
