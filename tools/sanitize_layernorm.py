#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Workloads for compute-sanitizer and ncu over our RMSNorm ops.

  python3 tools/sanitize_layernorm.py            # memcheck workload: many shapes,
                                                 # layouts, dtypes; results checked
  python3 tools/sanitize_layernorm.py --quick    # racecheck/synccheck: fewer cases
  python3 tools/sanitize_layernorm.py --profile  # ncu: one launch per case between
                                                 # cudaProfilerStart/Stop
  ... --device cpu                               # same cases on the CPU kernels

Under compute-sanitizer run with PYTORCH_NO_CUDA_MEMORY_CACHING=1: with the
caching allocator, a tensor sits inside a larger cached block and an
out-of-bounds access past its end is invisible to memcheck.

Layouts: contiguous; rowstride (rows padded by 64 elements, a slice);
offset (base pointer one element past an aligned allocation: misaligned for
vector loads, out misaligned too); 3d ([2, rows/2, hidden]); transposed
(last-dim stride != 1, which the op handles through a dense copy).
Every case compares with vllm_myops.reference (unless --no-check) on a
NaN-poisoned output; exit status 1 if any case gives a wrong result, raises
anything but an argument check, or leaves a CUDA error. Calls the op refuses
with a RuntimeError (TORCH_CHECK) are listed as REJECTED and counted apart.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

EPS = 1e-6
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
OPS = ("rms_norm", "fused_add_rms_norm")

# Widths: tiny, odd, every vector-width remainder, the model widths, the
# unaligned 5125, and wide ones past a register-resident row.
FULL_HIDDEN = (
    1,
    7,
    8,
    64,
    127,
    128,
    1000,
    2048,
    4096,
    5120,
    5125,
    8192,
    12288,
    16384,
    16385,
    32768,
)
FULL_ROWS = (1, 33)
LAYOUT_HIDDEN = (8, 127, 4096, 5125)
LAYOUT_ROWS = (3, 129)
LAYOUTS = ("rowstride", "offset", "3d", "transposed")
QUICK_HIDDEN = (8, 127, 1000, 4096, 5125, 8192, 16384)
QUICK_ROWS = (1, 33)
PROFILE_SHAPES = (
    (1, 4096),
    (16, 4096),
    (16, 5120),
    (16, 5125),
    (1024, 4096),
    (8192, 2048),
    (8192, 4096),
    (8192, 5120),
    (8192, 5125),
    (8192, 8192),
    (32768, 8192),
)


def cases(mode: str) -> list[tuple[str, str, int, int, str, bool]]:
    """(op, dtype, rows, hidden, layout, has_weight)."""
    out = []
    if mode == "profile":
        for op in OPS:
            for rows, hidden in PROFILE_SHAPES:
                out.append((op, "bf16", rows, hidden, "contiguous", True))
        out.append(("rms_norm", "fp32", 8192, 4096, "contiguous", True))
        out.append(("rms_norm", "fp16", 8192, 4096, "contiguous", True))
        return out
    if mode == "quick":
        for op in OPS:
            for dt in ("bf16", "fp32"):
                for rows in QUICK_ROWS:
                    for h in QUICK_HIDDEN:
                        out.append((op, dt, rows, h, "contiguous", True))
        return out
    for op in OPS:
        for dt in ("bf16", "fp16", "fp32"):
            for rows in FULL_ROWS:
                for h in FULL_HIDDEN:
                    if dt == "fp16" and h not in (7, 127, 4096, 5125, 16385):
                        continue
                    out.append((op, dt, rows, h, "contiguous", True))
        for dt in ("bf16", "fp16"):
            for layout in LAYOUTS:
                for rows in LAYOUT_ROWS:
                    for h in LAYOUT_HIDDEN:
                        out.append((op, dt, rows, h, layout, True))
        for dt in ("bf16", "fp32"):
            for h in (127, 4096, 5125):
                out.append((op, dt, 17, h, "contiguous", False))
    return out


def make(
    layout: str, rows: int, hidden: int, dtype: torch.dtype, device: str
) -> torch.Tensor:
    """A (rows, hidden)-shaped input (or [2, rows/2, hidden] for 3d) in the layout."""
    if layout == "contiguous":
        return torch.randn(rows, hidden, dtype=dtype, device=device)
    if layout == "rowstride":
        return torch.randn(rows, hidden + 64, dtype=dtype, device=device)[:, :hidden]
    if layout == "offset":
        flat = torch.randn(rows * hidden + 1, dtype=dtype, device=device)
        return flat[1:].view(rows, hidden)
    if layout == "3d":
        return torch.randn(2, (rows + 1) // 2, hidden, dtype=dtype, device=device)
    if layout == "transposed":
        return torch.randn(hidden, rows, dtype=dtype, device=device).t()
    raise ValueError(layout)


def empty_out(x: torch.Tensor, layout: str) -> torch.Tensor:
    """A contiguous, NaN-poisoned result tensor (misaligned for 'offset')."""
    if layout == "offset":
        flat = torch.full(
            (x.numel() + 1,), float("nan"), dtype=x.dtype, device=x.device
        )
        return flat[1:].view(x.shape)
    return torch.full(x.shape, float("nan"), dtype=x.dtype, device=x.device)


def run_case(ops, reference, case, device: str, check: bool) -> str | None:
    """Runs one case; returns an error string or None."""
    op, dname, rows, hidden, layout, has_w = case
    dtype = DTYPES[dname]
    x = make(layout, rows, hidden, dtype, device)
    w = (torch.randn(hidden, dtype=dtype, device=device) * 0.1 + 1.0) if has_w else None
    if op == "rms_norm":
        out = empty_out(x, layout)
        x0 = x.clone()
        ops.rms_norm(out, x, w, EPS)
        if not check:
            return None
        if not torch.equal(x, x0):
            return "input modified"
        pairs = [("out", out, reference.rms_norm_ref(x0, w, EPS))]
    else:
        r = make(layout, rows, hidden, dtype, device)
        x0, r0 = x.clone(), r.clone()
        ops.fused_add_rms_norm(x, r, w, EPS)
        if not check:
            return None
        ref_out, ref_res = reference.fused_add_rms_norm_ref(x0, r0, w, EPS)
        pairs = [("out", x, ref_out), ("residual", r, ref_res)]
    for name, got, ref in pairs:
        try:
            torch.testing.assert_close(got, ref, **tolerances.tolerance(dtype))
        except AssertionError as e:
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            return f"{name}: " + "; ".join(lines[:3])
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick", action="store_true", help="fewer cases (racecheck/synccheck)"
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="ncu workload: one launch per case inside cudaProfilerStart/Stop",
    )
    ap.add_argument(
        "--no-check", action="store_true", help="skip the reference comparison"
    )
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no GPU visible to torch; use --device cpu", file=sys.stderr)
        return 2

    from vllm_myops import _custom_ops as ops  # noqa: PLC0415
    from tests.kernels import tolerances  # noqa: PLC0415
    from vllm_myops.layernorm import reference  # noqa: PLC0415

    mode = "profile" if args.profile else "quick" if args.quick else "full"
    todo = cases(mode)
    torch.manual_seed(0)
    t0 = time.perf_counter()

    if mode == "profile":
        # Inputs first, one warm-up launch each, then exactly one launch per case
        # inside the profiler window, in this order:
        prepared = []
        for i, (op, dname, rows, hidden, layout, has_w) in enumerate(todo):
            dtype = DTYPES[dname]
            x = torch.randn(rows, hidden, dtype=dtype, device=args.device)
            w = torch.randn(hidden, dtype=dtype, device=args.device) * 0.1 + 1.0
            other = torch.empty_like(x) if op == "rms_norm" else torch.randn_like(x)
            prepared.append((op, x, other, w))
            print(f"profile case {i}: {op} {dname} {rows}x{hidden}", flush=True)

        def launch_all() -> None:
            for op, x, other, w in prepared:
                if op == "rms_norm":
                    ops.rms_norm(other, x, w, EPS)
                else:
                    ops.fused_add_rms_norm(x, other, w, EPS)

        launch_all()  # warm-up, outside the profiler window
        if args.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStart()
        launch_all()
        if args.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()
        print(
            f"profile workload: {len(prepared)} launches in {time.perf_counter() - t0:.1f} s"
        )
        return 0

    failures = rejected = 0
    for i, case in enumerate(todo):
        try:
            err = run_case(ops, reference, case, args.device, check=not args.no_check)
        except RuntimeError as e:
            # The op refused the arguments (a TORCH_CHECK): not a memory-safety
            # problem, but a valid call refused is a limitation worth knowing.
            msg = str(e).splitlines()[0] if str(e) else ""
            if "CUDA" in msg or "cuda" in msg.split(":")[0]:
                err = f"raised RuntimeError: {msg}"
            else:
                rejected += 1
                op, dname, rows, hidden, layout, has_w = case
                print(
                    f"REJECTED {op} {dname} {rows}x{hidden} {layout} weight={has_w}: {msg}",
                    flush=True,
                )
                continue
        except Exception as e:  # noqa: BLE001
            err = (
                f"raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            )
        if args.device == "cuda":
            try:
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001
                err = (err or "") + f" | CUDA error: {e}"
        if err:
            failures += 1
            op, dname, rows, hidden, layout, has_w = case
            print(
                f"FAIL {op} {dname} {rows}x{hidden} {layout} weight={has_w}: {err}",
                flush=True,
            )
    dt = time.perf_counter() - t0
    print(
        f"sanitize workload ({mode}, {args.device}): {len(todo)} cases, {failures} failures, "
        f"{rejected} rejected by argument checks, {dt:.1f} s",
        flush=True,
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
