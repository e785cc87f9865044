# SPDX-License-Identifier: Apache-2.0
"""Where a served model's step time goes: a torch.profiler trace of vLLM's
worker (Chrome trace JSON, as vLLM's ``--profiler-config`` writes it) summed
per kernel family.

GPU traces: every kernel, memcpy and memset event (``cat`` kernel /
gpu_memcpy / gpu_memset), kernels inside CUDA graph replays included (CUPTI
reports them one by one). CPU traces (no GPU events): the top-level
operators on the worker's threads (``cpu_op`` events not nested in another
``cpu_op``), so nothing is counted twice.

Families, by kernel or op name, first match wins (case-insensitive):
RMSNorm (ours, vLLM's CUDA kernels, and Inductor's fused ``...rsqrt...``
reductions, which is what vLLM's native RMSNorm becomes under torch.compile),
attention, GEMM, memcpy/memset, counting (our opt-in counters' op), other.

Steps: vLLM's worker annotates every profiled iteration
``execute_context_N(tokens)_generation_M(tokens)`` (on the CPU timeline, and
on the GPU timeline as ``gpu_user_annotation``). Decode steps are the ones
with no context (prefill) request; only events that start inside a decode
step are summed, so the result is per decode step: family time / steps, and
the step's wall time (annotation length) next to the busy time of its kernels.
Without annotations everything is summed and steps is 0.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("rmsnorm", re.compile(r"rms_?norm|layer_?norm|rsqrt", re.I)),
    (
        "attention",
        re.compile(
            r"attn|attention|flash|fmha|paged|reshape_and_cache|kv_cache|sdpa|"
            r"softmax",
            re.I,
        ),
    ),
    (
        "gemm",
        re.compile(
            r"gemm|gemv|cutlass|nvjet|xmma|cublas|matmul|aten::mm\b|aten::addmm|"
            r"aten::linear|_linear|_mm_|splitk|marlin|machete",
            re.I,
        ),
    ),
    ("memcpy", re.compile(r"memcpy|memset|aten::copy_", re.I)),
    ("counting", re.compile(r"myops_obs::tick", re.I)),
)
OTHER = "other"
FAMILY_NAMES = tuple(name for name, _ in FAMILIES) + (OTHER,)
OURS = re.compile(r"vllm_myops|_myops_C", re.I)
STEP = re.compile(r"execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def family_of(name: str) -> str:
    for family, pattern in FAMILIES:
        if pattern.search(name):
            return family
    return OTHER


def load_trace(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:  # type: ignore[operator]
        data = json.load(f)
    return data.get("traceEvents", data) if isinstance(data, dict) else data


def _top_level_cpu_ops(events: list[dict[str, Any]]) -> Iterable[dict[str, Any]]:
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for e in events:
        if e.get("cat") == "cpu_op" and e.get("ph") == "X":
            by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
        end = float("-inf")
        for e in evs:
            if e["ts"] >= end:
                end = e["ts"] + e.get("dur", 0)
                yield e


def decode_windows(
    events: list[dict[str, Any]], gpu: bool
) -> list[tuple[float, float]]:
    """(start, end) of every decode-only step, on the GPU timeline when the
    trace has one, else on the CPU one."""
    cats = ("gpu_user_annotation",) if gpu else ("user_annotation",)
    windows = []
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in cats:
            continue
        m = STEP.search(str(e.get("name", "")))
        if m and int(m.group(1)) == 0 and int(m.group(3)) > 0:
            windows.append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
    return sorted(windows)


def _inside(ts: float, windows: list[tuple[float, float]]) -> bool:
    i = bisect.bisect_right(windows, (ts, float("inf"))) - 1
    return i >= 0 and windows[i][0] <= ts < windows[i][1]


def breakdown(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-family time (µs) per decode step, share, launch count; the steps'
    wall time; the top kernels."""
    gpu = [e for e in events if e.get("cat") in GPU_CATS and e.get("ph") == "X"]
    timed = gpu if gpu else list(_top_level_cpu_ops(events))
    windows = decode_windows(events, bool(gpu))
    if windows:
        timed = [e for e in timed if _inside(float(e["ts"]), windows)]
    steps = len(windows)
    fam = {f: {"us": 0.0, "count": 0} for f in FAMILY_NAMES}
    ours = {"us": 0.0, "count": 0}
    names: dict[str, list[float]] = {}
    for e in timed:
        name = str(e.get("name", ""))
        dur = float(e.get("dur", 0.0))
        f = family_of(name) if e.get("cat") == "kernel" or not gpu else "memcpy"
        fam[f]["us"] += dur
        fam[f]["count"] += 1
        if OURS.search(name):
            ours["us"] += dur
            ours["count"] += 1
        agg = names.setdefault(name, [0.0, 0])
        agg[0] += dur
        agg[1] += 1
    total = sum(v["us"] for v in fam.values())
    for v in fam.values():
        v["share"] = v["us"] / total if total else 0.0
        v["us_per_step"] = v["us"] / steps if steps else None
        v["count_per_step"] = v["count"] / steps if steps else None
    wall = sum(b - a for a, b in windows)
    top = sorted(names.items(), key=lambda kv: -kv[1][0])[:12]
    return {
        "source": "gpu kernels" if gpu else "cpu ops (top level)",
        "steps": steps,
        "total_us": total,
        "us_per_step": total / steps if steps else None,
        "step_wall_us": wall / steps if steps else None,
        "families": fam,
        "ours": ours,
        "top": [
            {"name": n[:160], "us": v[0], "count": int(v[1]), "family": family_of(n)}
            for n, v in top
        ],
    }


def breakdown_dir(trace_dir: str | Path) -> dict[str, Any]:
    """The breakdown of the worker trace in `trace_dir` (vLLM writes one file
    per process; the one with the most timed events is the worker's)."""
    files = sorted(
        p
        for p in Path(trace_dir).rglob("*")
        if p.is_file() and (p.name.endswith(".json") or p.name.endswith(".json.gz"))
    )
    if not files:
        raise FileNotFoundError(f"no trace files under {trace_dir}")
    best: tuple[int, dict[str, Any], Path] | None = None
    for f in files:
        events = load_trace(f)
        result = breakdown(events)
        n = sum(v["count"] for v in result["families"].values())
        if best is None or n > best[0]:
            best = (n, result, f)
    assert best is not None
    best[1]["trace_file"] = best[2].name
    return best[1]


def format_table(results: dict[str, dict[str, Any]]) -> str:
    """Side-by-side table, one column per provider."""
    provs = list(results)
    lines = [
        f"{'family':<10}" + "".join(f"{p + ' us/step':>16}{'share':>8}" for p in provs)
    ]
    for f in FAMILY_NAMES:
        row = f"{f:<10}"
        for p in provs:
            v = results[p]["families"][f]
            per = v["us_per_step"]
            row += f"{(per if per is not None else v['us']):>16.1f}{v['share']:>8.1%}"
        lines.append(row)
    row = f"{'busy':<10}"
    for p in provs:
        per = results[p]["us_per_step"]
        row += f"{(per if per is not None else results[p]['total_us']):>16.1f}{'':>8}"
    lines.append(row)
    row = f"{'step wall':<10}"
    for p in provs:
        wall = results[p]["step_wall_us"]
        row += f"{(wall or 0.0):>16.1f}{'':>8}"
    lines.append(row)
    lines.append(
        "decode steps: " + ", ".join(f"{p} {results[p]['steps']}" for p in provs)
        + "; source: " + ", ".join(results[p]["source"] for p in provs)
    )  # fmt: skip
    return "\n".join(lines)
