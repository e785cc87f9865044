# SPDX-License-Identifier: Apache-2.0
"""Ours and the anchors on the same shapes, one call each inside the CUDA
profiler window, for ncu to profile side by side:

  ncu --profile-from-start off ... python -m benchmarks.kernels.profile_anchors \\
      --case rms_norm:bf16:8192x8192 --case fused_add_rms_norm:bf16:8192x4096 \\
      --impls ours,compile,liger,vllm

(`tools/gpu/device_session.sh profile_anchors` runs exactly that and tabulates
it with tools/gpu/ncu_table.py; its `profile` stage runs `--impls ours` over
more shapes.) The implementations, their inputs and their loading
are benchmark_layernorm.py's; each is called twice before the window (warm-up,
torch.compile's compilation), then once inside it. One line per profiled call,
in launch order: `profile case K: IMPL OP DTYPE ROWSxHIDDEN`. An implementation
that launches more than one kernel (eager) shows up as several kernels.
"""

from __future__ import annotations

import argparse
import sys

import torch

from benchmarks.common import cli, timing
from benchmarks.common.sweep import short_error
from benchmarks.kernels import benchmark_layernorm as bench


def parse_case(text: str) -> tuple[str, str, int, int]:
    try:
        op, dtype, shape = text.split(":")
        rows, hidden = (int(v) for v in shape.split("x"))
    except ValueError as e:
        raise argparse.ArgumentTypeError(
            f"--case {text!r}: expected OP:DTYPE:ROWSxHIDDEN, e.g. rms_norm:bf16:8192x8192"
        ) from e
    if op not in bench.OPS or dtype not in bench.DTYPES:
        raise argparse.ArgumentTypeError(
            f"--case {text!r}: op one of {bench.OPS}, dtype one of {tuple(bench.DTYPES)}"
        )
    return op, dtype, rows, hidden


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", type=parse_case, action="append", required=True)
    ap.add_argument("--impls", default="ours,compile,liger,vllm,quack")
    ap.add_argument("--vllm-lib", default=None)
    args = ap.parse_args(argv)
    device = torch.device("cuda")
    bench_args = cli.parse_args(bench.BENCHMARK, ["--device", "cuda"])
    bench_args.vllm_lib = args.vllm_lib

    impls = []
    for name in args.impls.split(","):
        impl = bench.IMPL_CLASSES[name](bench_args, device)
        ok, why = impl.availability()
        if ok:
            impls.append(impl)
        else:
            print(f"skipped {name}: {why}", flush=True)

    calls = []
    for op, dname, rows, hidden in args.case:
        case = {"op": op, "dtype": dname, "rows": rows, "hidden": hidden}
        specs = bench.BENCHMARK.buffer_specs(case)
        for impl in impls:
            try:
                fn = impl.make(case)
                # A buffer set of its own (the fused ops write their inputs),
                # with the same values for every implementation.
                seeded = torch.Generator(device).manual_seed(0)
                s = timing.alloc_sets(specs, 1, device, generator=seeded)[0]
                fn(s)
                fn(s)
            except Exception as e:  # noqa: BLE001
                print(
                    f"skipped {impl.name} {op} {dname} {rows}x{hidden}: {short_error(e)}"
                )
                continue
            calls.append((f"{impl.name} {op} {dname} {rows}x{hidden}", fn, s))
    torch.cuda.synchronize()

    torch.cuda.cudart().cudaProfilerStart()
    for k, (label, fn, s) in enumerate(calls):
        print(f"profile case {k}: {label}", flush=True)
        fn(s)
        torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
