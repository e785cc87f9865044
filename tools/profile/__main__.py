# SPDX-License-Identifier: Apache-2.0
"""python -m tools.profile {triage,system,rules} ...

triage REPORT [--log LOG] [--benchmark MODULE [--case LABEL]] [--bytes N --flops N]
       [--results JSON | --baseline NAME | --bandwidth-gbps X --tflops Y] [--json OUT]
       [-- BENCHMARK FLAGS]
    REPORT: an ncu raw CSV (ncu --import R --page raw --csv) or a .ncu-rep (needs ncu).
triage --run --benchmark MODULE --export PATH [...] -- BENCHMARK FLAGS
    profile the benchmark's cases under ncu first (GPU machine), then triage them.
system (--model DIR | --tiny llama) [--concurrency 1,64] [--decode-steps N] [--out DIR]
compare SUMMARY.json...  system runs side by side (e.g. plugin vs native, concurrency 1 vs 64)
hot REPORT [--top N] [--context N] [-- NCU IMPORT FILTERS]
    warp-state samples per SASS instruction and opcode. REPORT: a .ncu-rep profiled
    with --section SourceCounters (needs ncu), or its `--page source --csv
    --print-source sass` CSV.
rules   print the decision tree (the rule table)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from tools.profile import ncu, tree
from tools.profile import triage as tr


def _triage(args: argparse.Namespace, bench_args: list[str]) -> int:
    log = args.log
    if args.run:
        if not args.benchmark or not args.export:
            raise SystemExit("triage --run needs --benchmark and --export")
        report, log = ncu.run_profile(
            args.export, ncu.benchmark_program(args.benchmark, bench_args)
        )
    elif args.report is None:
        raise SystemExit("triage: give a REPORT (raw csv / .ncu-rep) or --run")
    else:
        report = args.report
    kernels = ncu.load(report, log)
    ceilings: dict[str, float | None] = {}
    if args.baseline:
        from benchmarks.common import baselines  # noqa: PLC0415

        slug = args.baseline_device or baselines.current_device_slug()
        try:
            args.results = str(baselines.resolve_baseline(args.baseline, slug))
        except baselines.BaselineNotFound as e:
            raise SystemExit(f"triage --baseline: {e}") from None
    if args.results:
        ceilings = tr.ceilings_from_results(args.results)
    if args.bandwidth_gbps:
        ceilings["bandwidth_bps"] = args.bandwidth_gbps * 1e9
    if args.tflops:
        ceilings["flops_per_s"] = args.tflops * 1e12
    if args.datasheet_gbps:
        ceilings["datasheet_bps"] = args.datasheet_gbps * 1e9
    bench = tr.BenchmarkModels(args.benchmark, bench_args) if args.benchmark else None
    if args.kernel is not None:
        kernels = [k for k in kernels if k.index in args.kernel]
    models = tr.models_for(
        kernels,
        ceilings=ceilings,
        bench=bench,
        case=args.case,
        nbytes=args.bytes,
        flops=args.flops,
    )
    results = [tr.triage_kernel(k, m) for k, m in zip(kernels, models)]
    for r in results:
        print("\n".join(r.lines()))
        print()
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.to_dict() for r in results], f, indent=1)
    return 0


def _hot(args: argparse.Namespace, extra: list[str]) -> int:
    from tools.profile import hot  # noqa: PLC0415

    text = (
        hot.import_source(args.report, extra)
        if str(args.report).endswith(".ncu-rep")
        else Path(args.report).read_text(errors="replace")
    )
    tables = hot.parse_source_csv(text)
    if not tables:
        raise SystemExit(
            f"hot: no per-instruction warp-state samples in {args.report} "
            "(profile with --section SourceCounters)"
        )
    for n, table in enumerate(tables):
        print(f"== kernel {n}: {table.kernel}")
        lines = hot.report_lines(table.instructions, top=args.top, context=args.context)
        print("\n".join(lines))
    return 0


def _rules() -> int:
    for node in tree.NODES:
        print(f"[{node}]")
        for r in tree.RULES:
            if r.node != node:
                continue
            when = " and ".join(f"{c.fact} {c.text()}" for c in r.when) or "otherwise"
            then = f"-> {r.goto}" if r.goto else f"=> {r.verdict}"
            print(f"  {r.id}: if {when} {then}")
            if r.next_change:
                print(f"      next: {r.next_change}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m tools.profile",
        description=__doc__.split("\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("triage", help="ncu report -> decision tree verdicts")
    t.add_argument("report", nargs="?", help="ncu raw csv or .ncu-rep")
    t.add_argument(
        "--log", help="the profiled program's output (`profile case K: LABEL`)"
    )
    t.add_argument("--benchmark", help="benchmark module for the bytes/FLOPs model")
    t.add_argument(
        "--case", help="the case label for every kernel (default: from --log)"
    )
    t.add_argument(
        "--bytes", type=float, help="bytes the op must move (instead of a benchmark)"
    )
    t.add_argument("--flops", type=float, help="FLOPs of the op")
    res = t.add_mutually_exclusive_group()
    res.add_argument(
        "--results", help="benchmark results JSON with the measured ceilings"
    )
    res.add_argument(
        "--baseline",
        metavar="NAME",
        help="the ceilings of this device's named baseline, "
        "benchmarks/results/baselines/<device>/NAME.json (device from the GPU's "
        "name: h100, h200, ...; or --baseline-device)",
    )
    t.add_argument(
        "--baseline-device",
        metavar="SLUG",
        help="with --baseline: the device folder (e.g. h200 for a report "
        "recorded there), instead of this machine's GPU",
    )
    t.add_argument("--bandwidth-gbps", type=float, help="measured copy ceiling, GB/s")
    t.add_argument("--tflops", type=float, help="measured compute ceiling, TFLOP/s")
    t.add_argument(
        "--datasheet-gbps", type=float, help="datasheet DRAM bandwidth, GB/s"
    )
    t.add_argument(
        "--kernel", type=lambda s: [int(x) for x in s.split(",")], help="kernel indices"
    )
    t.add_argument("--json", help="write the verdicts as JSON here")
    t.add_argument(
        "--run", action="store_true", help="profile under ncu first (needs ncu, a GPU)"
    )
    t.add_argument("--export", help="with --run: ncu report path (without .ncu-rep)")
    s = sub.add_parser("system", help="torch.profiler over vLLM steps in process")
    from tools.profile import system  # noqa: PLC0415

    system.add_system_arguments(s)
    c = sub.add_parser("compare", help="system summaries side by side")
    c.add_argument("summaries", nargs="+", help="profile_*.json written by system")
    sub.add_parser("rules", help="print the decision tree")
    h = sub.add_parser("hot", help="warp-state samples per SASS instruction")
    h.add_argument("report", help=".ncu-rep (with SourceCounters) or its source CSV")
    h.add_argument("--top", type=int, default=15, help="instructions to show")
    h.add_argument("--context", type=int, default=2, help="neighbours shown")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    bench_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, bench_args = argv[:i], argv[i + 1 :]
    args = build_parser().parse_args(argv)
    if args.command == "triage":
        return _triage(args, bench_args)
    if args.command == "rules":
        return _rules()
    if args.command == "hot":
        return _hot(args, bench_args)
    from tools.profile import system  # noqa: PLC0415

    if args.command == "compare":
        return system.main_compare(args.summaries)

    return system.main_system(args)


if __name__ == "__main__":
    sys.exit(main())
