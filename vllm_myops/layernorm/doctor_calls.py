# SPDX-License-Identifier: Apache-2.0
"""Typical arguments of the layernorm family's ops for `vllm-myops doctor`:
what vLLM dispatches them to shows which calls our kernels take."""

from __future__ import annotations

from typing import Any


def sample_calls(op_name: str, device: str) -> dict[str, tuple[Any, ...]]:
    import torch

    dt = torch.bfloat16
    x = torch.randn(4, 4096, dtype=dt, device=device)
    w = torch.ones(4096, dtype=dt, device=device)
    if op_name == "rms_norm":
        qkv = torch.randn(4, 768, dtype=dt, device=device)
        q = qkv[:, :256].view(4, 4, 64)  # Qwen3-style per-head view, strided
        return {
            "bf16 [4,4096] + weight": (x, w, 1e-6),
            "bf16 q-head view [4,4,64] stride (768,64,1)": (
                q,
                torch.ones(64, dtype=dt, device=device),
                1e-6,
            ),
            "variance_size=2048": (x, w, 1e-6, 2048),
            "weight fp32, x bf16": (x, w.float(), 1e-6),
        }
    r = torch.randn_like(x)
    return {
        "bf16 [4,4096] + weight": (x, r, w, 1e-6),
        "variance_size=2048": (x, r, w, 1e-6, 2048),
    }
