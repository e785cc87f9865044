# SPDX-License-Identifier: Apache-2.0
"""The W4A16 GEMM benchmark's targets (the run's verdicts): the issue's GPU
targets (floor bandwidth at small M, Marlin / Machete / cuBLAS speedups) and
CPU targets (vLLM-CPU speedup, memcpy bandwidth), defined on plain-order
cases, and act-order's own: ours within 3% of the same case in plain order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks.common import targets as T
from benchmarks.common.sweep import Case
from benchmarks.kernels.w4a16.cases import OP, is_act


def plain(c: Case) -> bool:
    """Plain order: the targets below are defined there (mm, tinygemm and
    vLLM-CPU have no act-order); act-order has its own, relative to plain."""
    return c["op"] == OP


ACT_BAND = 1.03


@dataclass(frozen=True)
class ActOrderVsPlain:
    """ours' act-order time <= band x ours' plain time of the same case (dtype,
    zp, group, shape, M); the gather's share of ours in the detail."""

    target: str
    band: float

    def evaluate(self, ctx: T.Context) -> dict[str, Any]:
        fails, n, shares = [], 0, []
        for case, by in ctx.items():
            o = by.get("ours")
            if not is_act(case) or not o or o.get("median_us") is None:
                continue
            p = (ctx.find({**case, "op": OP}) or {}).get("ours")
            if not p or p.get("median_us") is None:
                continue
            n += 1
            g = by.get("gather")
            if g and g["status"] == "ok" and g.get("median_us"):
                shares.append(g["median_us"] / o["median_us"] * 100.0)
            ratio = o["median_us"] / p["median_us"]
            if o["status"] != "ok" or p["status"] != "ok" or ratio > self.band:
                fails.append(
                    f"{ctx.label(case)}: {o['median_us']:.2f} vs plain "
                    f"{p['median_us']:.2f} ({(ratio - 1) * 100:+.1f}%)"
                )
        detail = f"{n - len(fails)}/{n} cases pass"
        if shares:
            detail += (
                f"; the gather alone is {min(shares):.1f}-{max(shares):.1f}% of "
                "ours' act-order time"
            )
        if fails:
            detail += "; " + "; ".join(fails[:10])
        status = "FAIL" if fails else ("PASS" if n else "N/A")
        return {"target": self.target, "status": status, "detail": detail}


ACT_TARGET = ActOrderVsPlain(
    f"act-order: ours within {(ACT_BAND - 1) * 100:.0f}% of plain order "
    "(same dtype, zp, group, shape, M)",
    band=ACT_BAND,
)

GPU_TARGETS: tuple[T.Target, ...] = (
    T.PctFloorAtLeast(
        "M <= 16: >= 80% of the weight-bytes floor's bandwidth",
        pct=80.0,
        where=lambda c: plain(c) and c["m"] <= 16,
    ),
    T.SpeedupWhere(
        "M <= 16: faster than Marlin and Machete at every shape",
        others=("marlin", "machete"),
        factor=1.0,
        where=lambda c: plain(c) and c["m"] <= 16,
    ),
    T.SpeedupWhere(
        "M = 64: >= 1.5x cuBLAS bf16",
        others=("mm",),
        factor=1.5,
        where=lambda c: plain(c) and c["m"] == 64,
    ),
    T.SpeedupWhere(
        "M = 256: not slower than cuBLAS bf16",
        others=("mm",),
        factor=1.0,
        where=lambda c: plain(c) and c["m"] == 256,
    ),
    T.SpeedupWhere(
        "M >= 1024: within 5% of cuBLAS bf16 or faster",
        others=("mm",),
        factor=1 / 1.05,
        where=lambda c: plain(c) and c["m"] >= 1024,
    ),
    ACT_TARGET,
)

CPU_SPEEDUP_VS_VLLM = 1.2
CPU_PCT_MEMCPY = 70.0
CPU_TARGETS: tuple[T.Target, ...] = (
    T.SpeedupWhere(
        f"CPU M = 1 and 32: ours >= {CPU_SPEEDUP_VS_VLLM}x vLLM-CPU cpu_gemm_wna16",
        others=("cpu_wna16",),
        factor=CPU_SPEEDUP_VS_VLLM,
        where=lambda c: plain(c) and c["m"] in (1, 32),
    ),
    T.MetricAtLeast(
        f"CPU M = 1: >= {CPU_PCT_MEMCPY:.0f}% of the measured memcpy bandwidth "
        "(bytes ~ weight bytes at M = 1)",
        metric="pct_ceiling",
        value=CPU_PCT_MEMCPY,
        where=lambda c: plain(c) and c["m"] == 1,
    ),
    ACT_TARGET,
)
