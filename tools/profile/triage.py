# SPDX-License-Identifier: Apache-2.0
"""Kernel-level triage: an ncu row + the case's bytes/FLOPs model + the
measured ceilings -> facts -> the decision tree (tools/profile/tree.py) ->
a verdict, its evidence (metric, value, threshold) and the next change.

    python -m tools.profile triage raw.csv --log profile.log \\
        --benchmark benchmarks.kernels.benchmark_layernorm \\
        --baseline layernorm_bf16      # this GPU's baselines/<device>/ file

The case of each kernel comes from the profiled program's log
(`profile case K: IMPL LABEL`, as benchmarks/kernels/profile_cases.py and
profile_anchors.py print it) or from --case LABEL; its bytes and FLOPs from
the benchmark's own model (BENCHMARK.bytes/flops of the case with that
label, over the benchmark's GPU cases or the flags after `--`), or from
--bytes/--flops. Ceilings: --results JSON ("ceiling", "compute_ceiling" as
benchmarks/common writes them, or a "ceilings" object), --baseline NAME
(benchmarks/results/baselines/<device>/NAME.json, the device from the GPU's
name or --baseline-device; benchmarks/common/baselines.py) or
--bandwidth-gbps / --tflops.
"""

from __future__ import annotations

import importlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.gpu.ncu_table import STALL
from tools.profile import tree
from tools.profile.ncu import Kernel

# sm_90 (H100/H200) per-SM limits, for occupancy limiters when the report
# has no launch__occupancy_limit_* (e.g. rows rebuilt from a table).
SM90 = {
    "sms": 132,
    "max_warps": 64,
    "max_blocks": 32,
    "regs": 65536,
    "reg_unit": 256,  # registers allocated per warp in units of 256
    "smem": 233472,  # 228 KiB
    "smem_reserved_per_block": 1024,
}
LIMITERS = {
    "launch__occupancy_limit_registers": "registers",
    "launch__occupancy_limit_shared_mem": "shared memory",
    "launch__occupancy_limit_warps": "block size (warps per SM)",
    "launch__occupancy_limit_blocks": "blocks per SM",
}
PIPE = re.compile(
    r"^sm__(?:inst_executed_pipe_|pipe_)([a-z0-9_]+?)(?:_cycles_active)?"
    r"\.avg\.pct_of_peak_sustained_active$"
)
STALL_PCT = re.compile(r"^smsp__warp_issue_stalled_([a-z_]+)_per_warp_active\.pct$")


@dataclass
class Model:
    """A case's bytes/FLOPs and the ceilings they are held against."""

    bytes: float | None = None
    flops: float | None = None
    bandwidth_bps: float | None = None  # measured copy ceiling (read + write)
    flops_per_s: float | None = None  # measured compute ceiling
    datasheet_bps: float | None = None
    case: str | None = None
    # All kernels of the case (an op may launch several, e.g. a split-K GEMM
    # and its reduce): the roof is held against their sum, not each one.
    case_time_us: float | None = None


def occupancy_limits(regs: float, block: float, smem: float = 0.0) -> dict[str, int]:
    """Resident blocks per SM allowed by each resource on sm_90."""
    warps = max(1, math.ceil(block / 32))
    per_warp = math.ceil(regs * 32 / SM90["reg_unit"]) * SM90["reg_unit"]
    return {
        "launch__occupancy_limit_registers": int(
            SM90["regs"] // max(1, warps * per_warp)
        ),
        "launch__occupancy_limit_warps": int(SM90["max_warps"] // warps),
        "launch__occupancy_limit_blocks": SM90["max_blocks"],
        "launch__occupancy_limit_shared_mem": int(
            SM90["smem"] // (smem + SM90["smem_reserved_per_block"])
        )
        if smem
        else SM90["max_blocks"],
    }


def _fmt(v: Any, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def facts_of(k: Kernel, model: Model | None = None) -> dict[str, Any]:
    """The tree's facts (tree.FACTS) of one kernel, plus text for templates."""
    g = k.get
    f: dict[str, Any] = {"kernel": k.name, "label": k.label or k.name}
    ns = g("gpu__time_duration.sum")
    f["time_us"] = None if ns is None else ns / 1e3
    f["sol_mem_pct"] = g(
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
    )
    f["sol_sm_pct"] = g("sm__throughput.avg.pct_of_peak_sustained_elapsed")
    f["dram_pct"] = g(
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    )
    f["occupancy_pct"] = g("sm__warps_active.avg.pct_of_peak_sustained_active")
    f["l2_hit_pct"] = g("lts__t_sector_hit_rate.pct")
    f["l2_pct"] = g("lts__throughput.avg.pct_of_peak_sustained_elapsed")
    f["eligible_warps"] = g("smsp__warps_eligible.avg.per_cycle_active")
    f["issue_active_pct"] = g("smsp__issue_active.avg.pct_of_peak_sustained_active")

    for kind in ("ld", "st"):
        sec = g(f"l1tex__t_sectors_pipe_lsu_mem_global_op_{kind}.sum")
        req = g(f"l1tex__t_requests_pipe_lsu_mem_global_op_{kind}.sum")
        v = sec / req if sec is not None and req else None
        if v is None:
            v = g(
                f"l1tex__average_t_sectors_per_request_pipe_lsu_mem_global_op_{kind}.ratio"
            )
        f[f"{kind}_sectors_per_req"] = v
    conf = g("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum")
    wav = g("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum")
    f["bank_conflicts_per_wavefront"] = conf / wav if conf is not None and wav else None

    # Launch and occupancy limiters.
    regs, block, grid = (
        g("launch__registers_per_thread"),
        g("launch__block_size"),
        g("launch__grid_size"),
    )
    smem = (g("launch__shared_mem_per_block_static") or 0.0) + (
        g("launch__shared_mem_per_block_dynamic") or 0.0
    )
    f["regs"], f["block"], f["grid"] = regs, block, grid
    limits = {n: g(n) for n in LIMITERS if g(n) is not None}
    estimated = False
    if not limits and regs is not None and block is not None:
        limits = {n: float(v) for n, v in occupancy_limits(regs, block, smem).items()}
        estimated = True
    blocks_per_sm = min(limits.values()) if limits else None
    f["blocks_per_sm"] = blocks_per_sm
    if limits and block:
        assert blocks_per_sm is not None
        names = [LIMITERS[n] for n, v in limits.items() if v == blocks_per_sm]
        warps = math.ceil(block / 32)
        detail = f"{int(blocks_per_sm)} blocks of {int(block)} threads per SM"
        if "registers" in names and regs is not None:
            detail = f"{int(regs)} registers/thread: " + detail
        f["limiter"] = (
            " and ".join(names)
            + f" ({detail}{', sm_90 estimate' if estimated else ''})"
        )
        theo = 100.0 * min(blocks_per_sm * warps, SM90["max_warps"]) / SM90["max_warps"]
    else:
        f["limiter"] = "unknown (no Occupancy/LaunchStats section)"
        theo = None
    f["theoretical_occupancy_pct"] = g("sm__maximum_warps_per_active_cycle_pct") or theo
    if f["occupancy_pct"] is not None and f["theoretical_occupancy_pct"]:
        f["achieved_over_theoretical"] = (
            f["occupancy_pct"] / f["theoretical_occupancy_pct"]
        )
    waves = g("launch__waves_per_multiprocessor")
    if waves is None and grid is not None and blocks_per_sm:
        sms = (
            g("launch__sm_count", "device__attribute_multiprocessor_count")
            or SM90["sms"]
        )
        waves = grid / (sms * blocks_per_sm)
    f["waves"] = waves

    # Stalls: share of a warp's cycles per issued instruction.
    ratios: dict[str, float] = {}
    pcts: dict[str, float] = {}
    for name, v in k.metrics.items():
        if m := STALL.match(name):
            ratios[m.group(1) or m.group(2)] = v
        elif m := STALL_PCT.match(name):
            pcts[m.group(1)] = v
    total = g("smsp__average_warp_latency_per_inst_issued.ratio") or sum(
        ratios.values()
    )
    shares = {n: 100.0 * v / total for n, v in ratios.items()} if total else {}
    shares.update({n: v for n, v in pcts.items() if n not in shares})
    for n, v in shares.items():
        f[f"stall_{n}_pct"] = v
    waiting = {n: v for n, v in shares.items() if n != "selected"}
    top = sorted(waiting.items(), key=lambda kv: -kv[1])[:2]
    f["top_stall"] = (
        ", ".join(f"{n} {v:.0f}%" for n, v in top)
        if top
        else "unknown (no WarpStateStats)"
    )

    # Pipes.
    pipes: dict[str, float] = {}
    tensor: list[float] = []
    for name, v in k.metrics.items():
        if m := PIPE.match(name):
            p = m.group(1)
            if p.startswith("tensor"):
                tensor.append(v)
            else:
                pipes[p] = max(v, pipes.get(p, 0.0))
    f["tensor_pipe_pct"] = max(tensor) if tensor else None
    if pipes:
        name, v = max(pipes.items(), key=lambda kv: kv[1])
        f["top_pipe"], f["top_pipe_pct"] = name, v
    else:
        f["top_pipe"], f["top_pipe_pct"] = "?", None

    # The model and the roof.
    moved = (g("dram__bytes_read.sum") or 0.0) + (g("dram__bytes_write.sum") or 0.0)
    f["dram_bytes"] = moved or None
    f["roof_pct"] = f["roof_us"] = None
    f["bound"] = "?"
    mem_us = comp_us = None
    if model is not None:
        if model.bytes and model.bandwidth_bps:
            mem_us = model.bytes / model.bandwidth_bps * 1e6
        if model.flops and model.flops_per_s:
            comp_us = model.flops / model.flops_per_s * 1e6
        if model.bytes and model.flops:
            f["flops_per_byte"] = model.flops / model.bytes
        if model.bytes and moved:
            f["bytes_over_model"] = moved / model.bytes
        if f["dram_pct"] is not None and model.bandwidth_bps and model.datasheet_bps:
            f["dram_ceiling_pct"] = (
                f["dram_pct"] * model.datasheet_bps / model.bandwidth_bps
            )
    roofs = {b: t for b, t in (("memory", mem_us), ("compute", comp_us)) if t}
    if roofs and f["time_us"]:
        f["bound"], f["roof_us"] = max(roofs.items(), key=lambda kv: kv[1])
        spent = (model.case_time_us if model else None) or f["time_us"]
        f["roof_pct"] = 100.0 * f["roof_us"] / spent
    if f["bound"] != "?" and (mem_us is not None):
        f["memory_dominant"] = 1 if f["bound"] == "memory" else 0
    elif f["sol_mem_pct"] is not None and f["sol_sm_pct"] is not None:
        f["memory_dominant"] = 1 if f["sol_mem_pct"] >= f["sol_sm_pct"] else 0
    f["roof_note"] = (
        f" ({f['roof_pct']:.1f}% of the {f['bound']} roof)"
        if f["roof_pct"] is not None
        else ""
    )
    # Text forms for templates (a missing number prints "-").
    for name in ("ld_sectors_per_req", "occupancy_pct", "blocks_per_sm"):
        f[f"{name}_s"] = _fmt(f.get(name))
    f["grid_s"], f["block_s"] = _fmt(grid, ".0f"), _fmt(block, ".0f")
    f["blocks_per_sm_s"] = _fmt(blocks_per_sm, ".0f")
    return f


@dataclass
class Triage:
    kernel: Kernel
    facts: dict[str, Any]
    verdict: tree.Verdict
    model: Model | None

    def lines(self) -> list[str]:
        f, v = self.facts, self.verdict
        head = f"[{self.kernel.index}] {f['label']}"
        if self.kernel.label and self.kernel.label != self.kernel.name:
            head += f"  ({self.kernel.name[:60]})"
        out = [head]
        t = f.get("time_us")
        if t is not None:
            extra = ""
            if f.get("roof_us") is not None:
                extra = (
                    f", {f['bound']} roof {f['roof_us']:.2f} us = {f['roof_pct']:.0f}%"
                )
            out.append(f"  time {t:.2f} us (ncu){extra}")
        out.append(f"  verdict: {v.final.text}")
        final = v.final.rule
        if final.next_change:
            out.append(f"  next: {_render(final.next_change, f)}")
        if final.why:
            out.append(f"  why: {final.why}")
        out.append(
            "  path: " + " -> ".join(f"{s.rule.node}:{s.rule.id}" for s in v.steps)
        )
        out.append("  evidence:")
        for s in v.steps:
            for fact, value, cond in s.evidence:
                out.append(
                    f"    {fact:<28} {_fmt(value, '.2f') if isinstance(value, float | int) else value!s:>8}  {cond:<12} "
                    f"[{tree.FACTS.get(fact, fact)}]"
                )
        ctx = [
            ("occupancy_pct", "achieved occupancy %"),
            ("theoretical_occupancy_pct", "theoretical %"),
            ("regs", "registers"),
            ("block", "block"),
            ("grid", "grid"),
        ]
        known = [
            f"{lbl} {_fmt(f.get(n), '.0f')}" for n, lbl in ctx if f.get(n) is not None
        ]
        if known:
            out.append(
                "  context: " + ", ".join(known) + f"; top stalls {f['top_stall']}"
            )
        if final.goto is None and "limiter" in final.next_change + final.verdict:
            out.append(f"  limiter: {f['limiter']}")
        if v.missing:
            out.append("  not in the report (rules skipped): " + ", ".join(v.missing))
        return out

    def to_dict(self) -> dict[str, Any]:
        final = self.verdict.final.rule
        return {
            "index": self.kernel.index,
            "kernel": self.kernel.name,
            "label": self.kernel.label,
            "verdict": self.verdict.final.text,
            "rule": final.id,
            "next_change": _render(final.next_change, self.facts),
            "why": final.why,
            "path": self.verdict.path,
            "evidence": [
                {
                    "fact": fact,
                    "value": value,
                    "threshold": cond,
                    "source": tree.FACTS.get(fact, fact),
                }
                for s in self.verdict.steps
                for fact, value, cond in s.evidence
            ],
            "missing": self.verdict.missing,
            "facts": {
                k: v
                for k, v in self.facts.items()
                if isinstance(v, int | float | str) and not k.endswith("_s")
            },
        }


def _render(template: str, facts: Mapping[str, Any]) -> str:
    return tree._render(template, facts)


def triage_kernel(k: Kernel, model: Model | None = None) -> Triage:
    facts = facts_of(k, model)
    return Triage(k, facts, tree.walk(facts), model)


# ---------------------------------------------------------------------------
# Models from a benchmark, ceilings from a results JSON
# ---------------------------------------------------------------------------


def ceilings_from_results(path: str | Path) -> dict[str, float | None]:
    d = json.loads(Path(path).read_text())
    c = d.get("ceilings") or {}
    mem = c.get("memory") or d.get("ceiling") or {}
    comp = c.get("compute") or d.get("compute_ceiling") or {}
    return {
        "bandwidth_bps": mem.get("bandwidth_bps"),
        "datasheet_bps": mem.get("datasheet_bps"),
        "flops_per_s": comp.get("flops_per_s"),
    }


class BenchmarkModels:
    """bytes/FLOPs of a benchmark's cases by label (BENCHMARK.case_label)."""

    def __init__(self, module: str, bench_args: Sequence[str] = ()) -> None:
        import torch  # noqa: PLC0415 - only this path needs torch

        from benchmarks.common import cli  # noqa: PLC0415

        self.bench = importlib.import_module(module).BENCHMARK
        args = cli.parse_args(self.bench, list(bench_args))
        # The GPU cases: the benchmark's defaults for a CUDA device (only
        # the device type is read, no GPU is needed).
        self.bench.finish_args(args, torch.device("cuda"))
        self.cases = {self.bench.case_label(c): c for c in self.bench.cases(args)}

    def lookup(self, label: str) -> tuple[str, float, float | None] | None:
        """(case label, bytes, flops) of a case label, or of a log label
        `IMPL CASE-LABEL` (the implementation's name first)."""
        for cand in (label, label.split(" ", 1)[-1]):
            c = self.cases.get(cand.replace("fused ", "fused_add_rms_norm "))
            if c is None:
                c = self.cases.get(cand)
            if c is not None:
                return cand, float(self.bench.bytes(c)), self.bench.flops(c)
        return None


def models_for(
    kernels: Sequence[Kernel],
    *,
    ceilings: Mapping[str, float | None],
    bench: BenchmarkModels | None = None,
    case: str | None = None,
    nbytes: float | None = None,
    flops: float | None = None,
) -> list[Model]:
    out = []
    for k in kernels:
        m = Model(
            bytes=nbytes,
            flops=flops,
            bandwidth_bps=ceilings.get("bandwidth_bps"),
            flops_per_s=ceilings.get("flops_per_s"),
            datasheet_bps=ceilings.get("datasheet_bps"),
        )
        label = case or k.label
        if bench is not None and label and nbytes is None:
            hit = bench.lookup(label)
            if hit is None:
                raise SystemExit(
                    f"triage: case {label!r} is not one of {bench.bench.name}'s cases "
                    "(give the benchmark's flags after `--` so it is, or --bytes/--flops)"
                )
            m.case, m.bytes, m.flops = (
                hit[0],
                hit[1],
                (flops if flops is not None else hit[2]),
            )
        out.append(m)
    # Kernels sharing a case label split its bytes: each is held against
    # the case's total time.
    totals: dict[str, float] = {}
    for k in kernels:
        ns = k.get("gpu__time_duration.sum")
        if k.label and ns is not None:
            totals[k.label] = totals.get(k.label, 0.0) + ns / 1e3
    for k, m in zip(kernels, out):
        if case is None and k.label and m.bytes is not None:
            m.case_time_us = totals.get(k.label)
    return out
