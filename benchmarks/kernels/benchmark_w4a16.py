# SPDX-License-Identifier: Apache-2.0
"""W4A16 GEMM benchmark: our kernels beside every anchor, against the weight
floor and the roofline.

Method (docs/project/design.md has the long form, docs/quantization/design.md
this family's; the sweep, tables, flags and results are benchmarks/common's,
this file and benchmarks/kernels/w4a16/ declare the family's cases,
implementations, check, bytes/FLOP models and targets):
- A case is `a [M, K] @ W [K, N]` with W int4 (GPTQ interchange format,
  vllm_myops.quantization.reference), group `--group`, symmetric or with zero
  points (`--zp`), plain or act-order (`--order`, below). Each buffer set
  holds its own weight (every layer of a model has its own), so the sets
  rotate over > 3x the last-level cache and every call reads its weight
  from DRAM/HBM. Every implementation converts the set's weight into its
  own layout before timing (Impl.prepare), from the same codes and scales:
  the same checkpoint everywhere.
- bytes: int4 weights + scales (+ zero points) + A + C (+ the int32 [K]
  permutation for act-order); FLOPs: 2*M*N*K.
- floor: one pass over the int4 weight bytes (act-order: and the [K]
  permutation, in one buffer of the set's own) at the case's size, timed like
  the op (CUDA: torch.neg, an SM pass; CPU: memcpy, Tensor.copy_, half the
  bytes read, half written). At M <= 16 a GEMM cannot beat it.
- ceilings measured in the same run: a large copy (bytes read + written) and
  a bf16 matmul (cuBLAS / the CPU's bf16 path): % of ceiling and % of the
  roofline (max of the two roofs) are in every record.
- Every implementation's output is checked against the fp64 reference
  (reference.w4a16_gemm_ref) on fresh inputs of the case before it is timed;
  one that disagrees is reported "wrong", loudly, and never counts as an anchor.
  Act-order cases are checked against the reference with the case's g_idx.
- Act-order (`--order plain,act`, default plain): a GPTQ desc_act checkpoint.
  Its g_idx is what GPTQ writes with desc_act: the columns are quantized in
  a random order (GPTQ's: descending Hessian diagonal) and g_idx[k] =
  (position of k in that order) // group, so group ids are non-monotonic
  along K (a fixed seed: every implementation sees the same g_idx). Such a
  case has op `w4a16_gemm_act_order` in its records (plain: `w4a16_gemm`,
  as before the option, so plain records match earlier results and
  baselines) and `act` in its label. Group -1 has no act-order (one group:
  g_idx is all zeros) and is left out of act. Per implementation:
    ours     exactly the served layer: load = linear_method's steps
             (reference.act_order_perm, rows of the codes permuted,
             w4a16_layer.install_weights), call = w4a16_layer.w4a16_apply
             (the activation column gather, then w4a16_gemm; no vLLM
             needed)
    gather   that gather alone (w4a16_permute_cols(x, w4a16_perm)), so its share
             of ours is visible (its xours column); not checked (ours'
             check covers it)
    marlin   as vLLM 0.24's gptq_marlin: marlin_sort_g_idx, rows sorted
             (gptq_marlin_repack's perm), g_idx + g_idx_sort_indices,
             is_k_full=True; symmetric only (vLLM builds Marlin's act-order
             kernels for uint4b8 only)
    machete  as vLLM 0.24's MacheteLinearKernel: rows permuted by
             argsort(g_idx) before machete_prepack_B, the activation's
             columns by vLLM's permute_cols each call
    mm, tinygemm, cpu_wna16: no act-order input, reported missing
  The anchor targets are for plain cases; act-order's (the issue's) is ours
  within 3% of the same case in plain order, with the gather's share.

Implementations (--impls, comma separated):
  floor      the weight-bytes pass above
  ours       vllm_myops._custom_ops.w4a16_gemm on w4a16_repack's layout
  mm         torch.mm bf16/fp16 on the dequantized weight (cuBLAS on CUDA)
  tinygemm   torch._weight_int4pack_mm (CUDA) / _weight_int4pack_mm_for_cpu (CPU)
  cpu_wna16  vLLM-CPU torch.ops._C.cpu_gemm_wna16, weights prepared as
             vllm/model_executor/kernels/linear/mixed_precision/cpu.py does
  marlin     vLLM 0.24 apply_gptq_marlin_linear, weights packed by
             marlin_quantize's steps (marlin_weights, marlin_permute_scales)
  machete    vLLM 0.24 machete_mm on machete_prepack_B (sm_90)
  gather     act-order cases only: ours' activation column gather alone
             (added by default when --order has act)
  CUDA anchors load vLLM's library from --vllm-lib / VLLM_ANCHOR_LIB and its
  Python package (the carried vLLM 0.24 tree) where importable.

Examples:
  python -m benchmarks.kernels.benchmark_w4a16 --save out/w4a16.json --plot out/w4a16.png
  python -m benchmarks.kernels.benchmark_w4a16 --preset cpu --save cpu.json
  python -m benchmarks.kernels.benchmark_w4a16 --m 1,16 --nk 28672x4096 --zp sym,asym
  python -m benchmarks.kernels.benchmark_w4a16 --m 1,16,256 --zp sym,asym --order plain,act
  python -m benchmarks.kernels.benchmark_w4a16 --dry-run
  python -m benchmarks.kernels.benchmark_w4a16 --compare-baseline w4a16_bf16  # baselines/<this GPU>/
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence

import torch

from benchmarks.common import cli, roofline, timing
from benchmarks.common import targets as T
from benchmarks.common.sweep import Benchmark, Column, Impl, Unavailable
from benchmarks.kernels.w4a16.cases import (
    ACT_ORDER_SEED,
    ANCHORS,
    CPU_DEFAULT_IMPLS,
    CPU_GROUP,
    CPU_M,
    CPU_NK,
    DRY_M,
    DRY_NK,
    DTYPES,
    GPU_M,
    GPU_NK,
    GROUPS,
    OP,
    OP_ACT,
    ORDERS,
    ZPS,
    act_order_g_idx,
    case_bytes,
    case_g_idx,
    codes_of,
    dequantized,
    group_list,
    int_list,
    is_act,
    label,
    nk_list,
    no_act_order,
    order_list,
    order_of,
    served_perm,
    set_specs,
    set_zeros,
    weight_bytes,
    zero_codes,
    zp_list,
)
from benchmarks.kernels.w4a16.check import ATOL_OF_RMS, RTOL, check, check_inputs
from benchmarks.kernels.w4a16.impls_anchors import (
    CpuWna16,
    Machete,
    Marlin,
    Mm,
    Tinygemm,
    load_vllm_cuda,
)
from benchmarks.kernels.w4a16.impls_ours import Floor, Gather, Ours, W4Impl
from benchmarks.kernels.w4a16.targets import (
    ACT_BAND,
    ACT_TARGET,
    CPU_PCT_MEMCPY,
    CPU_SPEEDUP_VS_VLLM,
    CPU_TARGETS,
    GPU_TARGETS,
    ActOrderVsPlain,
    plain,
)
from vllm_myops.quantization import reference as R

# The names this module has always had: tests and tools import them from here.
__all__ = [
    "ACT_BAND",
    "ACT_ORDER_SEED",
    "ACT_TARGET",
    "ANCHORS",
    "ATOL_OF_RMS",
    "BENCHMARK",
    "CPU_DEFAULT_IMPLS",
    "CPU_GROUP",
    "CPU_M",
    "CPU_NK",
    "CPU_PCT_MEMCPY",
    "CPU_SPEEDUP_VS_VLLM",
    "CPU_TARGETS",
    "DRY_M",
    "DRY_NK",
    "DTYPES",
    "GPU_M",
    "GPU_NK",
    "GPU_TARGETS",
    "GROUPS",
    "IMPL_CLASSES",
    "OP",
    "OP_ACT",
    "ORDERS",
    "RTOL",
    "ZPS",
    "ActOrderVsPlain",
    "CpuWna16",
    "Floor",
    "Gather",
    "Machete",
    "Marlin",
    "Mm",
    "Ours",
    "R",
    "T",
    "Tinygemm",
    "Unavailable",
    "W4A16Benchmark",
    "W4Impl",
    "act_order_g_idx",
    "case_bytes",
    "case_g_idx",
    "check",
    "check_inputs",
    "codes_of",
    "dequantized",
    "group_list",
    "int_list",
    "is_act",
    "label",
    "load_vllm_cuda",
    "main",
    "nk_list",
    "no_act_order",
    "order_list",
    "order_of",
    "plain",
    "served_perm",
    "set_specs",
    "set_zeros",
    "weight_bytes",
    "zero_codes",
    "zp_list",
]

IMPL_CLASSES: dict[str, type[Impl]] = {
    c.name: c for c in (Floor, Ours, Mm, Tinygemm, CpuWna16, Marlin, Machete, Gather)
}


class W4A16Benchmark(Benchmark):
    name = "w4a16"
    title = "W4A16 GEMM"
    case_fields = ("op", "dtype", "zp", "group", "n", "k", "m")
    ops = (OP,)
    dtypes = DTYPES
    impls = IMPL_CLASSES
    anchors = ANCHORS
    gpu_targets = GPU_TARGETS
    cpu_targets = CPU_TARGETS
    cpu_default_impls = CPU_DEFAULT_IMPLS
    plot_panel_fields = ("dtype", "zp", "group", "op")
    plot_shape_fields = ("n", "k", "m")
    compute_ceiling_dtype = torch.bfloat16  # the tensor-core (CPU: AMX/AVX-512) roof
    detail_columns = (
        Column("dtype", 5, "<", lambda c: c["dtype"]),
        Column("zp", 4, "<", lambda c: c["zp"]),
        Column("order", 5, "<", order_of),
        Column("group", 5, ">", lambda c: str(c["group"])),
        Column("N", 6, ">", lambda c: str(c["n"])),
        Column("K", 6, ">", lambda c: str(c["k"])),
        Column("M", 5, ">", lambda c: str(c["m"])),
    )
    summary_columns = (
        Column(
            "case",
            16,
            "<",
            lambda c: f"{c['dtype']} {c['zp']}{' act' if is_act(c) else ''} {c['group']}",
        ),
        Column("NxK", 11, ">", lambda c: f"{c['n']}x{c['k']}"),
        Column("M", 5, ">", lambda c: str(c["m"])),
    )

    def add_arguments(self, ap):
        ap.add_argument(
            "--preset",
            choices=("gpu", "cpu"),
            default=None,
            help="shape set: gpu (Llama-3-8B/70B layers x M up to 4096) or cpu "
            "(SmolLM2 layers + 4096x4096, M 1 and 32, group 64); default by device",
        )
        ap.add_argument(
            "--m", type=int_list, default=None, help="comma list of M (rows of A)"
        )
        ap.add_argument(
            "--nk",
            type=nk_list,
            default=None,
            help="comma list of NxK weight shapes (N outputs, K inputs)",
        )
        ap.add_argument(
            "--group",
            type=group_list,
            default=None,
            help=f"comma list of group sizes from {GROUPS} (-1: per channel); "
            f"default 128 (cpu preset {CPU_GROUP})",
        )
        ap.add_argument(
            "--zp",
            type=zp_list,
            default=["sym"],
            help="comma list of sym (zero 8, as GPTQ) and asym (zero points)",
        )
        ap.add_argument(
            "--order",
            type=order_list,
            default=["plain"],
            help="comma list of plain (g_idx k // group) and act (GPTQ desc_act: "
            "a permuted g_idx; ours gathers the activation's columns, as served; "
            "adds the 'gather' implementation; group -1 has no act-order)",
        )
        ap.add_argument(
            "--vllm-lib",
            default=None,
            help="path of vLLM's kernel library (_C_stable_libtorch.abi3.so) to load with "
            "torch.ops.load_library (default: env VLLM_ANCHOR_LIB)",
        )

    def finish_args(self, args, device):
        preset = args.preset or ("cpu" if device.type == "cpu" else "gpu")
        if args.dry_run:
            nk, ms, group = DRY_NK, DRY_M, 64
        elif preset == "cpu":
            nk, ms, group = CPU_NK, CPU_M, CPU_GROUP
        else:
            nk, ms, group = GPU_NK, GPU_M, 128
        args.preset = preset
        args.nk = args.nk or list(nk)
        args.m = args.m or list(ms)
        args.group = args.group or [group]
        bad_m = [m for m in args.m if m < 1]
        if bad_m:
            raise SystemExit(f"--m: {bad_m}: M must be >= 1 to be timed")
        if args.order == ["act"] and args.group == [-1]:
            raise SystemExit("--order act: group -1 (one group) has no act-order")
        if not args.impls and "act" not in args.order:
            # The default implementations, without the act-order-only gather.
            names = (
                CPU_DEFAULT_IMPLS
                if device.type == "cpu" and not args.dry_run
                else tuple(IMPL_CLASSES)
            )
            args.impls = ",".join(n for n in names if n != "gather")
        self.load_at_start = timing.load_average()

    def cases(self, args):
        # Orders innermost: a case's plain and act-order runs are timed one
        # after the other (the act-order target compares them).
        return [
            {"op": op, "dtype": d, "zp": zp, "group": g, "n": n, "k": k, "m": m}
            for d in args.dtypes
            for zp in args.zp
            for g in args.group
            for n, k in args.nk
            for m in args.m
            for op in (OP if o == "plain" else OP_ACT for o in args.order)
            if not (op == OP_ACT and g == -1)
        ]

    def case_label(self, case):
        return label(case)

    def buffer_specs(self, case, *, check=False):
        return set_specs(case)

    def check(self, fn, case, device):
        return check(fn, case, device)

    def bytes(self, case):
        return case_bytes(case)

    def flops(self, case):
        return roofline.flops_done(case["op"], m=case["m"], n=case["n"], k=case["k"])

    def config(self, args):
        return {
            "dtypes": args.dtypes,
            "preset": args.preset,
            "m": args.m,
            "nk": [list(x) for x in args.nk],
            "group": args.group,
            "zp": args.zp,
            "order": args.order,
            "act_order_seed": ACT_ORDER_SEED if "act" in args.order else None,
            # A shared 2-core box: CPU numbers mean little without the load.
            "load_avg_1_5_15_start": getattr(self, "load_at_start", None),
            "load_avg_1_5_15_end": timing.load_average(),
            "vllm_cpu_int4_w4a8": os.environ.get("VLLM_CPU_INT4_W4A8"),
        }


BENCHMARK = W4A16Benchmark()


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(BENCHMARK, argv, __doc__ or "")


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
