# SPDX-License-Identifier: Apache-2.0
"""Any benchmark's cases x implementations, one call each inside the CUDA
profiler window, for ncu (or nsys) to profile side by side:

  ncu --profile-from-start off --clock-control none ... \\
      python -m benchmarks.kernels.profile_cases benchmarks.kernels.benchmark_w4a16 \\
      --m 1,16 --nk 28672x4096 --impls ours,mm,marlin

The first argument names the benchmark module (its BENCHMARK object); the
rest are that benchmark's own flags, so a case is chosen exactly as the
benchmark chooses it and every implementation is built and loaded the same
way. Each call runs twice before the window (warm-up, compilation, layout
conversion), then once inside it. One line per profiled call, in launch
order: `profile case K: IMPL LABEL`. An implementation that launches several
kernels shows up as several kernels of one case.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

import torch

from benchmarks.common import cli, timing
from benchmarks.common.sweep import short_error


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    bench = importlib.import_module(argv[0]).BENCHMARK
    args = cli.parse_args(bench, argv[1:], __doc__ or "")
    device = cli.resolve_device(args)
    if device.type != "cuda":
        print("profile_cases: needs a CUDA device (--device cuda)", file=sys.stderr)
        return 2
    bench.finish_args(args, device)
    torch.manual_seed(args.seed)
    impls = [
        bench.impls[n](args, device) for n in cli.select_impls(bench, args, device)
    ]
    profiled = 0
    with torch.no_grad():
        for case in bench.cases(args):
            label = bench.case_label(case)
            sets = timing.alloc_sets(bench.buffer_specs(case), 1, device)
            for impl in impls:
                ok, why = impl.availability()
                if not ok:
                    print(f"skip {impl.name} {label}: {why}")
                    continue
                try:
                    fn = impl.make(case)
                    impl.prepare(case, sets)
                    fn(sets[0])
                    fn(sets[0])
                    torch.cuda.synchronize(device)
                except Exception as e:  # noqa: BLE001 - report and go on
                    print(f"skip {impl.name} {label}: {short_error(e)}")
                    continue
                torch.cuda.cudart().cudaProfilerStart()
                fn(sets[0])
                torch.cuda.synchronize(device)
                torch.cuda.cudart().cudaProfilerStop()
                print(f"profile case {profiled}: {impl.name} {label}", flush=True)
                profiled += 1
                impl.release(sets)
    return 0 if profiled else 1


if __name__ == "__main__":
    sys.exit(main())
