# SPDX-License-Identifier: Apache-2.0
"""The command line every kernel benchmark shares, and its main flow:
flags, device, implementations, ceilings, the sweep, tables, the results
JSON, the plot, the regression gate against a saved file (--compare PATH) or
against this device's named baseline (--compare-baseline NAME:
benchmarks/results/baselines/<device>/NAME.json, benchmarks/common/baselines.py)
and the exit status (1: slower than the baseline by more than --threshold;
2: ours wrong, failing or missing somewhere; 3: both; 4: --compare-baseline
names no baseline of this device, before anything is measured). A benchmark adds its own flags
(sweep.Benchmark.add_arguments) and calls `main(benchmark, argv, __doc__)`."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch

from benchmarks.common import baselines, roofline, sweep, tables, timing
from benchmarks.common import results as bresults
from benchmarks.common.sweep import Benchmark, log, short_error


def build_parser(bench: Benchmark, doc: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=doc.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(doc.split("\n\n")[1:]),
    )
    ap.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default=None,
        help="default: cuda if available, else cpu",
    )
    ap.add_argument(
        "--dtype",
        default="bf16",
        help=f"{'|'.join(bench.dtypes)}, or a comma list (default bf16)",
    )
    ap.add_argument(
        "--ops",
        default=",".join(bench.ops),
        help=f"comma list of {','.join(bench.ops)}",
    )
    bench.add_arguments(ap)
    ap.add_argument(
        "--impls",
        default=None,
        help=f"comma list from {','.join(bench.impls)} (default: all on CUDA; "
        f"{','.join(bench.cpu_default_impls)} on CPU); 'ours' and 'floor' are always added",
    )
    ap.add_argument("--save", help="write results JSON here")
    ap.add_argument(
        "--plot", help="write a PNG here (%% of floor and of ceiling per shape)"
    )
    gate = ap.add_mutually_exclusive_group()
    gate.add_argument(
        "--compare",
        metavar="PATH",
        help="saved JSON to gate against: exit 1 if ours is slower by more "
        "than --threshold percent at any case (exit 2: ours wrong/failed/missing "
        "somewhere; 3: both)",
    )
    gate.add_argument(
        "--compare-baseline",
        metavar="NAME",
        help="gate against this device's named baseline, "
        "benchmarks/results/baselines/<device>/NAME.json, the device folder from "
        "the GPU's name (NVIDIA H100 80GB HBM3 -> h100, NVIDIA H200 -> h200; CPU -> "
        f"cpu; env {baselines.DEVICE_ENV} overrides); exit 4 before measuring when "
        "that file does not exist",
    )
    ap.add_argument(
        "--threshold", type=float, default=3.0, help="regression threshold in percent"
    )
    ap.add_argument(
        "--summarize",
        nargs="+",
        metavar="JSON",
        help="no measurement: load saved results (merged), print tables and verdicts",
    )
    ap.add_argument(
        "--dry-run",
        action="store_true",
        help="run the GPU benchmark's harness on CPU tensors with a tiny budget (no graphs); "
        "numbers are meaningless",
    )
    ap.add_argument(
        "--do-bench",
        action="store_true",
        help="also time with triton.testing.do_bench (eager, L2 flushed), labelled separately",
    )
    ap.add_argument(
        "--do-bench-impls",
        default=",".join(i for i in bench.impls if i not in ("floor", "eager")),
        help="impls to time with --do-bench",
    )
    ap.add_argument(
        "--target-s",
        type=float,
        default=None,
        help="seconds of timed replays per measurement (default 0.15 CUDA, 0.4 CPU)",
    )
    ap.add_argument("--min-replays", type=int, default=5)
    ap.add_argument("--max-replays", type=int, default=100)
    ap.add_argument(
        "--max-sets",
        type=int,
        default=timing.MAX_SETS,
        help="cap on buffer sets per graph (default %(default)s)",
    )
    ap.add_argument(
        "--max-set-gib",
        type=float,
        default=8.0,
        help="cap on the memory of all buffer sets of one case (GiB)",
    )
    ap.add_argument(
        "--max-seconds",
        type=float,
        default=None,
        help="stop starting new cases after this many seconds (rest reported 'skipped')",
    )
    ap.add_argument(
        "--cache",
        choices=("cold", "hot"),
        default="cold",
        help="cold (default): rotate over buffer sets > 3x the last-level cache, every call "
        "reads from DRAM/HBM; hot: call on one set repeatedly (cache-resident), "
        "recorded with method '<timer>_hot'",
    )
    ap.add_argument(
        "--no-ceiling", action="store_true", help="skip the copy-ceiling measurement"
    )
    ap.add_argument(
        "--threads", type=int, default=None, help="CPU: torch.set_num_threads"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "-v", "--verbose", action="store_true", help="print tracebacks of failures"
    )
    return ap


def parse_args(
    bench: Benchmark, argv: Sequence[str] | None = None, doc: str = ""
) -> argparse.Namespace:
    ap = build_parser(bench, doc)
    args = ap.parse_args(argv)
    args.dtypes = [d.strip() for d in args.dtype.split(",") if d.strip()]
    for d in args.dtypes:
        if d not in bench.dtypes:
            ap.error(f"--dtype {d}: choose from {','.join(bench.dtypes)}")
    args.ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    for o in args.ops:
        if o not in bench.ops:
            ap.error(f"--ops {o}: choose from {','.join(bench.ops)}")
    args.do_bench_impls = [i.strip() for i in args.do_bench_impls.split(",")]
    return args


def resolve_device(args: argparse.Namespace) -> torch.device:
    if args.dry_run:
        return torch.device("cpu")
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit(
            "--device cuda: torch sees no GPU (use --device cpu or --dry-run)"
        )
    return torch.device(args.device)


def select_impls(
    bench: Benchmark, args: argparse.Namespace, device: torch.device
) -> list[str]:
    known = list(bench.impls)
    if args.impls:
        names = [i.strip() for i in args.impls.split(",") if i.strip()]
        bad = [n for n in names if n not in known]
        if bad:
            raise SystemExit(f"--impls: unknown {bad}; choose from {','.join(known)}")
    elif device.type == "cpu" and not args.dry_run:
        names = list(bench.cpu_default_impls)
    else:
        names = known
    for must in ("ours", "floor"):
        if must not in names:
            names.append(must)
    return [n for n in known if n in names]  # canonical order, floor first


def resolve_compare_baseline(name: str, device: torch.device) -> str:
    """The path of this device's baseline NAME (baselines.BaselineNotFound
    when there is none)."""
    slug = baselines.current_device_slug(device)
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    return str(baselines.resolve_baseline(name, slug, device_name=dev_name))


def plot(
    records: Sequence[dict[str, Any]],
    path: str,
    title: str,
    bench: Benchmark | None = None,
) -> None:
    try:
        from benchmarks.common import plot as bplot  # noqa: PLC0415

        graph = [r for r in records if r.get("method") != "do_bench_l2_flush"]
        fields: dict[str, Any] = {}
        if bench is not None:
            fields = {
                "panel_fields": bench.plot_panel_fields,
                "shape_fields": bench.plot_shape_fields,
            }
        out = bplot.plot_records(
            graph,
            path,
            metrics=("pct_floor", "pct_ceiling", "median_us"),
            title=title,
            **fields,
        )
        log(f"plot: {out}")
    except Exception as e:  # noqa: BLE001
        log(f"plot: not written ({short_error(e)})")


def summarize_files(bench: Benchmark, args: argparse.Namespace) -> int:
    docs = [bresults.load_results(p) for p in args.summarize]
    records = [r for d in docs for r in d["records"]]
    impls = [i for i in bench.impls if any(r["impl"] == i for r in records)]
    for p, d in zip(args.summarize, docs):
        m = d["metadata"]
        c = d.get("ceiling") or {}
        log(
            f"{p}: {m.get('device')} torch {m.get('torch')} {m.get('date')} git "
            f"{str(m.get('git', {}).get('commit'))[:12]} ceiling "
            f"{tables.fmt((c.get('bandwidth_bps') or 0) / 1e12, '.2f')} TB/s"
        )
    device_type = (
        "cuda"
        if any(str(r.get("method", "")).startswith("cuda_graph") for r in records)
        else "cpu"
    )
    dry = any(r.get("method") == "dry_run" for r in records)
    tables.print_compact_table(bench, records, impls)
    if args.plot:
        plot(
            records,
            args.plot,
            f"{bench.title}: {docs[-1]['metadata'].get('device')}",
            bench,
        )
    tables.print_verdicts(bench.verdicts(records, device_type, dry), dry)
    return 0


def measure_ceilings(
    bench: Benchmark, args: argparse.Namespace, device: torch.device
) -> sweep.Ceilings:
    ceilings = sweep.Ceilings()
    if args.no_ceiling or args.dry_run:
        return ceilings
    ceiling = ceilings.memory = roofline.measure_copy_ceiling(device)
    extra = ""
    if ceiling.extra.get("neg_pass_bandwidth_bps"):
        extra = f"; large torch.neg pass {ceiling.extra['neg_pass_bandwidth_bps'] / 1e12:.2f} TB/s"
    sheet = (
        f", datasheet {ceiling.datasheet_bps / 1e12:.2f} TB/s"
        if ceiling.datasheet_bps
        else ""
    )
    log(
        f"\nCeiling: {ceiling.bandwidth_bps / 1e9:.1f} GB/s ({ceiling.method}, "
        f"{ceiling.nbytes / 2**20:.0f} MiB buffer, bytes read + written){sheet}{extra}"
    )
    if any(bench.flops(c) is not None for c in bench.cases(args)):
        compute = ceilings.compute = roofline.measure_compute_ceiling(
            device, dtype=bench.compute_ceiling_dtype
        )
        log(
            f"Compute ceiling: {compute.flops_per_s / 1e12:.1f} TFLOP/s ({compute.method}, "
            f"{compute.dtype} {'x'.join(map(str, compute.shape))})"
        )
    return ceilings


def main(bench: Benchmark, argv: Sequence[str] | None = None, doc: str = "") -> int:
    args = parse_args(bench, argv, doc)
    if args.summarize:
        return summarize_files(bench, args)
    device = resolve_device(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.target_s is None:
        args.target_s = 0.15 if device.type == "cuda" else 0.4
    if args.compare_baseline:
        try:
            args.compare = str(resolve_compare_baseline(args.compare_baseline, device))
        except baselines.BaselineNotFound as e:
            print(f"error: --compare-baseline: {e}", file=sys.stderr, flush=True)
            return 4
        log(f"gate baseline: {bresults.portable_arg(args.compare)}")
    bench.finish_args(args, device)
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    deadline = t0 + args.max_seconds if args.max_seconds else None

    meta = bresults.metadata(device)
    log(
        f"{bench.title} benchmark on {meta.get('device')} | torch {meta['torch']} | triton {meta.get('triton')} "
        f"| git {str(meta['git']['commit'])[:12]}{'+dirty' if meta['git'].get('dirty') else ''} "
        f"| sources {meta['source_hash']}"
    )
    if args.dry_run:
        log(
            "DRY RUN: CPU tensors, CPU loop instead of CUDA graphs, few samples; checks the harness only."
        )
    if device.type == "cuda":
        log(
            f"L2 {timing.cuda_l2_bytes(device) / 2**20:.0f} MiB, {meta.get('sm_count')} SMs, "
            f"SM clock now {meta.get('clocks_sm_mhz')} (max {meta.get('clocks_max_sm_mhz')}), "
            f"driver {meta.get('driver')}"
        )
    elif not args.dry_run:
        log(
            f"CPU threads {torch.get_num_threads()}, LLC {timing.cpu_llc_bytes() / 2**20:.0f} MiB"
        )

    names = select_impls(bench, args, device)
    impls = [bench.impls[n](args, device) for n in names]
    with torch.no_grad():
        tables.print_impl_status(impls)
        ceilings = measure_ceilings(bench, args, device)
        n_cases = len(bench.cases(args))
        if device.type == "cuda":
            # Rough model: graph capture + replays per measurement, plus the
            # family's extras (compiles).
            est = n_cases * len(impls) * (
                0.25 + args.target_s
            ) + bench.extra_estimate_s(args, names)
            log(
                f"Estimated sweep time ~{est:.0f} s for {n_cases} cases "
                f"(budget {args.max_seconds or 'none'} s); per-case progress below"
            )
        records = sweep.run_sweep(bench, args, device, impls, ceilings, deadline)

    ceiling = ceilings.memory
    tables.print_detail_table(bench, records)
    config = {
        **bench.config(args),
        "impls": names,
        "device": device.type,
        "dry_run": args.dry_run,
        "target_s": args.target_s,
        "key_fields": [*bench.case_fields, "impl", "method"],
        "cache": args.cache,
        "timer": timing.describe_method(sweep.timer_method(args, device)),
        "floor": bench.impls["floor"].description,
        "impl_notes": {
            i.name: {
                "available": i.availability()[0],
                "note": i.availability()[1],
                "description": i.description,
            }
            for i in impls
        },
        "cache_factor": timing.CACHE_FACTOR,
    }
    vs = bench.verdicts(records, device.type, args.dry_run)
    if args.save:
        extra: dict[str, Any] = {}
        if ceilings.compute is not None:
            extra["compute_ceiling"] = ceilings.compute.to_dict()
        bresults.save_results(
            args.save,
            bench.name,
            records,
            meta=meta,
            config=config,
            ceiling=ceiling.to_dict() if ceiling else None,
            **extra,
            verdicts=vs,
            wall_s=round(time.perf_counter() - t0, 1),
        )
        log(f"\nsaved: {args.save}")
    if args.plot:
        plot(
            records,
            args.plot,
            f"{bench.title} {','.join(args.dtypes)} on {meta.get('device')}",
            bench,
        )

    rc = 0
    if args.compare:
        new_doc = {"metadata": meta, "config": config, "records": records}
        log("")
        if bresults.compare(
            bresults.load_results(args.compare), new_doc, threshold_pct=args.threshold
        ):
            rc = 1

    ours_bad = [
        r
        for r in records
        if r["impl"] == "ours" and r["status"] in ("wrong", "failed", "missing")
    ]
    if ours_bad:
        rc |= 2  # ours wrong, failing or absent: never a silent pass

    tables.print_compact_table(bench, records, names)
    if ceiling is not None:
        log(
            f"(ceiling {ceiling.bandwidth_bps / 1e9:.1f} GB/s measured in this run"
            + (
                f"; datasheet {ceiling.datasheet_bps / 1e12:.1f} TB/s"
                if ceiling.datasheet_bps
                else ""
            )
            + ")"
        )
    tables.print_verdicts(vs, args.dry_run)
    log(f"\nwall time {time.perf_counter() - t0:.1f} s; exit {rc}")
    return rc
