# SPDX-License-Identifier: Apache-2.0
"""The sweep every kernel benchmark runs, and the small protocol a benchmark
implements to get it.

A benchmark (one file under benchmarks/kernels/) declares what is particular
to its op family: the case fields, the cases of a run, the buffer specs of one
call, the implementations (ours, the floor, the anchors), the correctness
check against the family's reference, and the bytes (and, where the family
has them, FLOPs) a case must move. Everything else is here: buffer sets over
the cache, the timer, the check-then-time order, records with their status,
metrics against the floor and the ceilings, speedups and the progress line.
"""

from __future__ import annotations

import argparse
import functools
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.common import roofline, timing

# fn(set) -> what the call produced (a tuple of tensors, None where the
# implementation has no such output), for the correctness check.
CallFn = Callable[[Any], Any]
Case = dict[str, Any]


def log(*a: Any) -> None:
    print(*a, flush=True)


def short_error(e: BaseException, limit: int = 240) -> str:
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    msg = f"{type(e).__name__}: {lines[0] if lines else ''}"
    # Errors whose first line is generic: add the most specific later line.
    if len(lines) > 1 and len(msg) < 60:
        msg += " | " + lines[-1]
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def installed_version(distribution: str) -> str:
    """The installed version of a distribution, '?' when unknown (a carried
    wheel unpacked on PYTHONPATH may lack metadata)."""
    try:
        from importlib.metadata import version  # noqa: PLC0415

        return version(distribution)
    except Exception:  # noqa: BLE001
        return "?"


class Unavailable(Exception):
    """The implementation is not installed / not loadable here."""


class Impl:
    """One implementation of a benchmark's ops."""

    name = ""
    description = ""
    is_anchor = True
    checked = True  # compared with the reference before timing

    def __init__(self, args: argparse.Namespace, device: torch.device):
        self.args = args
        self.device = device
        self._avail: tuple[bool, str] | None = None

    def availability(self) -> tuple[bool, str]:
        if self._avail is None:
            try:
                self._avail = (True, self.load() or "")
            except Unavailable as e:
                self._avail = (False, str(e))
            except Exception as e:  # noqa: BLE001
                self._avail = (False, short_error(e))
        return self._avail

    def load(self) -> str | None:
        """Import / load; raise Unavailable(reason). Returns a version note."""
        return None

    def make(self, case: Case) -> CallFn:
        raise NotImplementedError

    def prepare(self, case: Case, sets: Sequence[Any]) -> None:
        """Called with the timing sets after the check, before timing: an
        implementation whose operands need a per-set conversion (e.g. a
        weight repacked into its own layout) does it here, outside the timed
        region (and outside CUDA-graph capture)."""

    def release(self, sets: Sequence[Any]) -> None:
        """Called after timing: drop what prepare() attached to the sets."""


@dataclass(frozen=True)
class Column:
    """A case column of the printed tables: header, width, alignment, text."""

    header: str
    width: int
    align: str  # "<" or ">"
    text: Callable[[Case], str]

    def cell(self, case: Case) -> str:
        return f"{self.text(case):{self.align}{self.width}}"

    def head(self) -> str:
        return f"{self.header:{self.align}{self.width}}"


class Benchmark:
    """What one op family's benchmark declares. Subclass and fill in."""

    name = ""  # the results JSON's "benchmark"
    title = ""  # for log lines and plot titles
    case_fields: tuple[str, ...] = ()  # a record's case: these, then impl and method
    ops: tuple[str, ...] = ()
    dtypes: dict[str, torch.dtype] = {}
    impls: dict[str, type[Impl]] = {}  # canonical order, floor first
    anchors: tuple[str, ...] = ()
    cpu_default_impls: tuple[str, ...] = ()
    detail_columns: tuple[Column, ...] = ()
    summary_columns: tuple[Column, ...] = ()
    # The plot: one panel per value of these fields, shapes along x.
    plot_panel_fields: tuple[str, ...] = ("op", "dtype")
    plot_shape_fields: tuple[str, ...] = ("rows", "hidden")
    # dtype of the measured compute ceiling (None: roofline's device default).
    compute_ceiling_dtype: torch.dtype | None = None

    def add_arguments(self, ap: argparse.ArgumentParser) -> None:
        """The family's own flags (sizes, library paths)."""

    def finish_args(self, args: argparse.Namespace, device: torch.device) -> None:
        """Defaults that depend on the device (e.g. the sizes swept)."""

    def cases(self, args: argparse.Namespace) -> list[Case]:
        raise NotImplementedError

    def case_label(self, case: Case) -> str:
        return " ".join(str(case[f]) for f in self.case_fields)

    def buffer_specs(
        self, case: Case, *, check: bool = False
    ) -> dict[str, timing.TensorSpec]:
        raise NotImplementedError

    def check(
        self, fn: CallFn, case: Case, device: torch.device
    ) -> tuple[bool, str, float | None]:
        """(ok, reason, max_abs_err) of one call on fresh inputs vs the reference."""
        raise NotImplementedError

    def bytes(self, case: Case) -> int:
        raise NotImplementedError

    def flops(self, case: Case) -> int | None:
        """FLOPs of a case; None for a memory-bound family (bytes roof only)."""
        return None

    def config(self, args: argparse.Namespace) -> dict[str, Any]:
        """The family's part of the results JSON's config."""
        return {}

    def extra_estimate_s(self, args: argparse.Namespace, impls: Sequence[str]) -> float:
        """Seconds a sweep spends beyond timing (e.g. compiling per shape)."""
        return 0.0

    # The family's targets (benchmarks.common.targets), as data: GPU ones are
    # also evaluated on a dry run (CPU tensors), to exercise their logic.
    gpu_targets: Sequence[Any] = ()
    cpu_targets: Sequence[Any] = ()

    def verdicts(
        self, records: Sequence[dict[str, Any]], device_type: str, dry_run: bool
    ) -> list[dict[str, Any]]:
        from benchmarks.common import targets

        cpu = device_type == "cpu" and not dry_run
        return targets.evaluate(
            records,
            self.cpu_targets if cpu else self.gpu_targets,
            case_fields=self.case_fields,
            label=self.case_label,
            anchors=self.anchors,
        )


def compare_outputs(
    pairs: Sequence[tuple[str, torch.Tensor, torch.Tensor]], tolerance: dict[str, Any]
) -> tuple[bool, str, float | None]:
    """(name, got, reference) pairs against assert_close(**tolerance):
    (ok, reason, max_abs_err over all pairs)."""
    max_err = 0.0
    for name, got, ref in pairs:
        if got.shape != ref.shape or got.dtype != ref.dtype:
            return (
                False,
                f"{name}: got {tuple(got.shape)} {got.dtype}, expected {tuple(ref.shape)} {ref.dtype}",
                None,
            )
        diff = (got.float() - ref.float()).abs()
        err = float(diff.nan_to_num(float("inf")).max()) if diff.numel() else 0.0
        max_err = max(max_err, err)
        try:
            torch.testing.assert_close(got, ref, **tolerance)
        except AssertionError as e:
            nans = int(torch.isnan(got).sum())
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            detail = (
                "; ".join(lines[1:3]) if len(lines) > 1 else lines[0] if lines else ""
            )
            return (
                False,
                f"{name} mismatch vs FP32 reference ({nans} NaN): {detail}",
                max_err,
            )
    return True, "", max_err


# ---------------------------------------------------------------------------
# Running the sweep
# ---------------------------------------------------------------------------


def timer_method(args: argparse.Namespace, device: torch.device) -> str:
    if args.dry_run:
        return "dry_run"
    return "cuda_graph" if device.type == "cuda" else "cpu_loop"


def make_timer(
    args: argparse.Namespace, device: torch.device
) -> Callable[..., timing.Timing]:
    if args.dry_run:
        return timing.time_dry_run
    if device.type == "cuda":
        return functools.partial(
            timing.time_cuda_graph,
            target_s=args.target_s,
            min_replays=args.min_replays,
            max_replays=args.max_replays,
        )
    return functools.partial(timing.time_cpu, target_s=args.target_s)


@dataclass
class Ceilings:
    """The roofs measured in this run (None where not measured)."""

    memory: roofline.Ceiling | None = None
    compute: roofline.ComputeCeiling | None = None


def fill_metrics(
    rec: dict[str, Any], floor_us: float | None, ceilings: Ceilings
) -> None:
    t = rec.get("median_us")
    if t is None:
        return
    nbytes = rec["bytes"]
    rec["gbps"] = roofline.bandwidth(nbytes, t) / 1e9
    rec["pct_floor"] = (
        roofline.pct_of_floor(floor_us, t) if rec["impl"] != "floor" else 100.0
    )
    rec["floor_us"] = floor_us
    ceiling = ceilings.memory
    if ceiling is not None:
        rec["pct_ceiling"] = roofline.pct_of_ceiling(nbytes, t, ceiling.bandwidth_bps)
        rec["pct_datasheet"] = roofline.pct_of_ceiling(nbytes, t, ceiling.datasheet_bps)
    flops = rec.get("flops")
    if flops is not None:
        bw = ceiling.bandwidth_bps if ceiling is not None else None
        peak = ceilings.compute.flops_per_s if ceilings.compute is not None else None
        rec["tflops"] = flops / (t * 1e-6) / 1e12
        rec["bound"] = roofline.bound(nbytes, flops, bw, peak)
        rec["pct_roofline"] = roofline.pct_of_roofline(nbytes, flops, t, bw, peak)


def run_sweep(
    bench: Benchmark,
    args: argparse.Namespace,
    device: torch.device,
    impls: list[Impl],
    ceilings: Ceilings,
    deadline: float | None,
) -> list[dict[str, Any]]:
    timer = make_timer(args, device)
    cache_bytes = 64 * 1024 if args.dry_run else timing.cache_bytes_for(device)
    records: list[dict[str, Any]] = []
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        mem_budget = int(min(args.max_set_gib * 1024**3, free * 0.4))
    else:
        mem_budget = int(args.max_set_gib * 1024**3)
    cases = bench.cases(args)
    log(
        f"\n{len(cases)} cases x {len(impls)} implementations; timer: "
        f"{timing.describe_method(timer_method(args, device))}"
    )
    t_sweep = time.perf_counter()
    for ci, case in enumerate(cases):
        base = {**case, "bytes": bench.bytes(case)}
        flops = bench.flops(case)
        if flops is not None:
            base["flops"] = flops
        if deadline is not None and time.perf_counter() > deadline:
            for impl in impls:
                records.append(
                    {
                        **base,
                        "impl": impl.name,
                        "method": "none",
                        "status": "skipped",
                        "reason": "time budget (--max-seconds) exhausted",
                    }
                )
            continue
        t_case = time.perf_counter()
        specs = bench.buffer_specs(case)
        per_set = timing.set_bytes(specs)
        k = timing.num_buffer_sets(
            per_set,
            cache_bytes,
            max_total_bytes=mem_budget,
            max_sets=64 if args.dry_run else args.max_sets,
        )
        try:
            if args.cache == "hot":
                # One buffer set called K times: data stays in cache (L2 / L3).
                # (In-place ops accumulate over the calls: an fp16 fused add's
                # residual can reach inf after ~10^4; use cold mode there.)
                one = timing.alloc_sets(specs, 1, device)
                k = min(k, 1000)
                sets = one * k
                working = per_set
            else:
                sets = timing.alloc_sets(specs, k, device)
                working = k * per_set
        except Exception as e:  # noqa: BLE001  (out of memory, or a sticky CUDA error)
            for impl in impls:
                records.append(
                    {
                        **base,
                        "impl": impl.name,
                        "method": "none",
                        "status": "failed",
                        "reason": f"buffer sets (K={k}): {short_error(e)}",
                    }
                )
            log(
                f"[{ci + 1}/{len(cases)}] {bench.case_label(case)}: buffer sets failed: {short_error(e)}"
            )
            recover(device)
            continue
        case_recs: list[dict[str, Any]] = []
        floor_us = None
        for impl in impls:
            rec = {
                **base,
                "impl": impl.name,
                "method": "none",
                "status": "ok",
                "reason": "",
                "sets": k,
                "working_set_bytes": working,
                "cache_coverage": working / cache_bytes if cache_bytes else None,
            }
            ok, why = impl.availability()
            if not ok:
                rec.update(status="missing", reason=why)
                case_recs.append(rec)
                continue
            try:
                fn = impl.make(case)
            except Unavailable as e:
                rec.update(status="missing", reason=str(e))
                case_recs.append(rec)
                continue
            except Exception as e:  # noqa: BLE001
                rec.update(status="failed", reason=f"setup: {short_error(e)}")
                case_recs.append(rec)
                continue
            if impl.checked:
                try:
                    good, why, err = bench.check(fn, case, device)
                    rec["max_abs_err"] = err
                    if not good:
                        rec.update(status="wrong", reason=why)
                except Exception as e:  # noqa: BLE001
                    rec.update(status="failed", reason=f"check: {short_error(e)}")
                    if args.verbose:
                        traceback.print_exc()
                    case_recs.append(rec)
                    recover(device)
                    continue
            try:
                impl.prepare(case, sets)
            except Exception as e:  # noqa: BLE001
                rec.update(status="failed", reason=f"prepare: {short_error(e)}")
                if args.verbose:
                    traceback.print_exc()
                impl.release(sets)
                case_recs.append(rec)
                recover(device)
                continue
            try:
                t = timer(fn, sets, working_set_bytes=working, cache_bytes=cache_bytes)
                rec.update(
                    method=t.method + ("_hot" if args.cache == "hot" else ""),
                    median_us=t.median_us,
                    p90_us=t.p90_us,
                    min_us=t.min_us,
                    mean_us=t.mean_us,
                    samples=t.samples,
                    setup_s=round(t.setup_s, 3),
                    time_s=round(t.total_s, 3),
                )
                if t.calls_per_sample != k:
                    rec["calls_per_sample"] = t.calls_per_sample
            except Exception as e:  # noqa: BLE001
                rec.update(status="failed", reason=f"timing: {short_error(e)}")
                if args.verbose:
                    traceback.print_exc()
                recover(device)
            finally:
                impl.release(sets)
            if impl.name == "floor" and rec.get("median_us") is not None:
                floor_us = rec["median_us"]
            case_recs.append(rec)
            if (
                args.do_bench
                and device.type == "cuda"
                and rec.get("median_us") is not None
                and impl.name in args.do_bench_impls
            ):
                case_recs.append(
                    do_bench_record(bench, rec, fn, sets, working, cache_bytes)
                )
        for rec in case_recs:
            fill_metrics(rec, floor_us, ceilings)
        speedups(case_recs)
        records.extend(case_recs)
        del sets
        recover(device, quiet=True)
        log(
            progress_line(
                ci,
                len(cases),
                bench.case_label(case),
                case_recs,
                k,
                time.perf_counter() - t_case,
                time.perf_counter() - t_sweep,
            )
        )
    return records


def do_bench_record(
    bench: Benchmark,
    rec: dict[str, Any],
    fn: CallFn,
    sets: Sequence[Any],
    working: int,
    cache_bytes: int,
) -> dict[str, Any]:
    """The same call timed with triton's do_bench (eager, L2 flushed)."""
    fields = (*bench.case_fields, "bytes", "impl", "sets")
    out = {k: rec[k] for k in fields}
    out.update(status=rec["status"], reason=rec["reason"])
    try:
        t = timing.time_do_bench(
            fn, sets, working_set_bytes=working, cache_bytes=cache_bytes
        )
        out.update(
            method=t.method,
            median_us=t.median_us,
            p90_us=t.p90_us,
            min_us=t.min_us,
            mean_us=t.mean_us,
            samples=t.samples,
        )
    except Exception as e:  # noqa: BLE001
        out.update(
            method="do_bench_l2_flush",
            status="failed",
            reason=f"do_bench: {short_error(e)}",
        )
    return out


def recover(device: torch.device, quiet: bool = False) -> None:
    """After a failure (or between cases): surface async errors, free memory."""
    if device.type != "cuda":
        return
    try:
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001
        if not quiet:
            log(f"  ! CUDA error after failure: {short_error(e)}")
    torch.cuda.empty_cache()


def speedups(case_recs: list[dict[str, Any]]) -> None:
    """ours_speedup on each record: impl time / ours time (> 1: ours faster)."""
    ours = {
        r["method"]: r for r in case_recs if r["impl"] == "ours" and r.get("median_us")
    }
    for r in case_recs:
        o = ours.get(r["method"])
        if o and r.get("median_us") and r["impl"] != "ours":
            r["ours_speedup"] = r["median_us"] / o["median_us"]


def progress_line(
    ci: int,
    n: int,
    label: str,
    recs: list[dict[str, Any]],
    k: int,
    dt: float,
    total: float,
) -> str:
    parts = []
    for r in recs:
        if r.get("method") == "do_bench_l2_flush":
            continue
        if r.get("median_us") is not None:
            mark = "" if r["status"] == "ok" else "!" + r["status"].upper()
            parts.append(f"{r['impl']} {r['median_us']:.2f}{mark}")
        else:
            parts.append(f"{r['impl']} {r['status']}")
    return f"[{ci + 1}/{n} {total:6.1f}s] {label} K={k} ({dt:.1f}s): " + ", ".join(
        parts
    )
