# SPDX-License-Identifier: Apache-2.0
"""The paged attention benchmark's targets (the issue's): on the GPU, decode
faster than FA3 and near the KV-bytes floor, prefill faster than vLLM's
Triton kernel and near FA3, the mixed batch faster than FA3; on the CPU,
decode ahead of vLLM-CPU's CPU_ATTN. The run's verdicts are these targets'."""

from __future__ import annotations

from benchmarks.common import targets as T
from benchmarks.common.sweep import Case

# ---------------------------------------------------------------------------
# Targets (the issue's)
# ---------------------------------------------------------------------------


def _decode(c: Case) -> bool:
    return c["kind"] == "decode"


# Issue 28's targets, on every head config of the run.
GPU_TARGETS: tuple[T.Target, ...] = (
    T.SpeedupWhere(
        "decode: faster than FA3 at every case",
        others=("fa3",),
        factor=1.0,
        where=_decode,
    ),
    T.PctFloorAtLeast(
        "decode: >= 97% of the KV-bytes floor at batch x context >= 32 x 8k",
        pct=97.0,
        where=lambda c: _decode(c) and c["batch"] * c["ctx"] >= 32 * 8192,
    ),
    T.TimeAtMost(
        "decode: <= 6 us at 1 x 1024 (32/8x128)",
        limit_us=lambda c: 6.0,
        where=lambda c: _decode(c)
        and c["heads"] == "32/8x128"
        and (c["batch"], c["ctx"]) == (1, 1024),
    ),
    T.SpeedupWhere(
        "prefill: faster than vLLM's Triton kernel at every case",
        others=("triton",),
        factor=1.0,
        where=lambda c: c["kind"] == "prefill",
    ),
    T.SpeedupWhere(
        "mixed batch (decode rows + a prefill chunk): faster than FA3",
        others=("fa3",),
        factor=1.0,
        where=lambda c: c["kind"] == "mixed",
    ),
    T.SpeedupWhere(
        "prefill: >= 0.95x FA3 from 2k tokens",
        others=("fa3",),
        factor=0.95,
        where=lambda c: c["kind"] == "prefill" and c["ctx"] >= 2048,
    ),
)

CPU_SPEEDUP_VS_VLLM = 1.2
CPU_TARGETS: tuple[T.Target, ...] = (
    T.SpeedupWhere(
        f"CPU decode batch 8 x 2k: ours >= {CPU_SPEEDUP_VS_VLLM}x vLLM-CPU CPU_ATTN",
        others=("cpu_attn",),
        factor=CPU_SPEEDUP_VS_VLLM,
        where=lambda c: c["kind"] == "decode" and c["batch"] == 8 and c["ctx"] == 2048,
    ),
)
