# SPDX-License-Identifier: Apache-2.0
"""The tables a benchmark prints: every record in detail, one summary line per
case (floor, ours, the anchors and the best anchor), the implementations'
availability and the targets' verdicts. The case columns come from the
benchmark (sweep.Benchmark.detail_columns / summary_columns)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.common.sweep import Benchmark, Impl, log

CaseRecords = dict[tuple[Any, ...], dict[str, dict[str, Any]]]

METHOD_NAMES = {
    "cuda_graph": "graph",
    "do_bench_l2_flush": "do_bench",
    "cpu_loop": "cpu_loop",
    "dry_run": "DRY",
    "none": "-",
    "cuda_graph_hot": "graph_hot",
    "cpu_loop_hot": "cpu_hot",
}


def fmt(v: float | None, spec: str = ".2f", none: str = "-") -> str:
    return none if v is None else format(v, spec)


def records_by_case(
    records: Sequence[dict[str, Any]],
    case_fields: Sequence[str],
    method: str | None = None,
) -> CaseRecords:
    """{case key: {impl: record}}; do_bench records left out unless asked for."""
    cases: CaseRecords = {}
    for r in records:
        if method is not None and r.get("method") not in (method, "none"):
            continue
        if method is None and r.get("method") == "do_bench_l2_flush":
            continue
        key = tuple(r[f] for f in case_fields)
        cases.setdefault(key, {})[r["impl"]] = r
    return cases


def case_of(key: tuple[Any, ...], case_fields: Sequence[str]) -> dict[str, Any]:
    return dict(zip(case_fields, key))


def best_anchor(
    by: dict[str, dict[str, Any]], anchors: Sequence[str]
) -> dict[str, Any] | None:
    ok = [
        by[a]
        for a in anchors
        if a in by and by[a]["status"] == "ok" and by[a].get("median_us")
    ]
    return min(ok, key=lambda r: r["median_us"]) if ok else None


def cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "n/a"
    if r.get("median_us") is None:
        return r["status"]
    s = f"{r['median_us']:.2f}"
    if r["status"] != "ok":
        s += f"!{r['status']}"
    return s


def print_detail_table(bench: Benchmark, records: Sequence[dict[str, Any]]) -> None:
    log(
        "\nDetailed results (us per call; %floor = floor time / time; %ceil = achieved GB/s over the "
        "copy ceiling measured in this run; %sheet = over the datasheet bandwidth; xours = time / ours time)"
    )
    case_head = " ".join(c.head() for c in bench.detail_columns)
    hdr = (
        f"{case_head} {'impl':<8} {'method':<10} {'status':<7} "
        f"{'median':>9} {'p90':>9} {'%floor':>7} {'%ceil':>6} {'%sheet':>6} {'GB/s':>8} {'xours':>6} K/reason"
    )
    log(hdr)
    log("-" * len(hdr))
    for r in records:
        method = METHOD_NAMES.get(r.get("method", "none"), r.get("method"))
        tail = r.get("reason") or (f"K={r.get('sets')}" if r.get("sets") else "")
        case = " ".join(c.cell(r) for c in bench.detail_columns)
        log(
            f"{case} {r['impl']:<8} {method:<10} "
            f"{r['status']:<7} {fmt(r.get('median_us')):>9} {fmt(r.get('p90_us')):>9} "
            f"{fmt(r.get('pct_floor'), '.1f'):>7} {fmt(r.get('pct_ceiling'), '.1f'):>6} "
            f"{fmt(r.get('pct_datasheet'), '.1f'):>6} {fmt(r.get('gbps'), '.1f'):>8} "
            f"{fmt(r.get('ours_speedup'), '.2f'):>6} {tail}"
        )


def print_compact_table(
    bench: Benchmark, records: Sequence[dict[str, Any]], impls: Sequence[str]
) -> None:
    cases = records_by_case(records, bench.case_fields)
    anchors = [i for i in impls if i in bench.anchors]
    cols = [i for i in ("floor", "ours") if i in impls] + anchors
    # A family with FLOPs (GEMM) also shows ours' % of the roofline (max of
    # the bytes and the FLOP roofs), the fair figure where it is compute-bound.
    roof = any(r.get("pct_roofline") is not None for r in records)
    ours_w = 32 if roof else 26
    log(
        "\nSummary (median us per call; ours: [p90] %floor %ceil"
        + (" %roofline" if roof else "")
        + "; anchors: time and ours' speedup)"
    )
    hdr = (
        " ".join(c.head() for c in bench.summary_columns)
        + " "
        + " ".join(f"{c:>{ours_w if c == 'ours' else 15}}" for c in cols)
        + "  best anchor -> ours vs best"
    )
    log(hdr)
    log("-" * len(hdr))
    for key, by in cases.items():
        cells = []
        for c in cols:
            r = by.get(c)
            if c == "ours" and r is not None and r.get("median_us") is not None:
                txt = (
                    f"{cell(r)} [{fmt(r.get('p90_us'))}] {fmt(r.get('pct_floor'), '.0f')}%f "
                    f"{fmt(r.get('pct_ceiling'), '.0f')}%c"
                )
                if roof:
                    txt += f" {fmt(r.get('pct_roofline'), '.0f')}%r"
                cells.append(f"{txt:>{ours_w}}")
            elif (
                c in bench.anchors
                and r is not None
                and r.get("ours_speedup") is not None
            ):
                cells.append(
                    f"{cell(r) + ' ' + format(r['ours_speedup'], '.2f') + 'x':>15}"
                )
            else:
                cells.append(f"{cell(r):>{ours_w if c == 'ours' else 15}}")
        best = best_anchor(by, anchors)
        ours = by.get("ours")
        tail = "-"
        if best is not None:
            tail = f"{best['impl']} {best['median_us']:.2f}"
            if ours is not None and ours.get("median_us") and ours["status"] == "ok":
                tail += f" -> {best['median_us'] / ours['median_us']:.3f}x"
        case = case_of(key, bench.case_fields)
        log(
            " ".join(c.cell(case) for c in bench.summary_columns)
            + " "
            + " ".join(cells)
            + "  "
            + tail
        )


def print_impl_status(impls: Sequence[Impl]) -> None:
    log("\nImplementations:")
    for impl in impls:
        ok, why = impl.availability()
        state = "available" if ok else "MISSING"
        log(
            f"  {impl.name:<8} {state:<9} {impl.description}"
            + (f" [{why}]" if why else "")
        )


def print_verdicts(vs: Sequence[dict[str, Any]], dry_run: bool) -> None:
    log(
        "\nVerdicts"
        + (
            " (DRY RUN: CPU tensors, numbers meaningless; logic check only)"
            if dry_run
            else ""
        )
    )
    for v in vs:
        log(f"  [{v['status']:<10}] {v['target']}: {v['detail']}")
