# SPDX-License-Identifier: Apache-2.0
"""The paged attention benchmark's parts, declared for the shared harness
(benchmarks/common) and assembled by benchmarks/kernels/benchmark_attention.py
(the entry module: the benchmark class, its command line and main):
- cases.py: the case constants (kinds, head configs, the GPU / CPU / dry-run
  grids), a case's geometry (query groups, pairs, blocks), its bytes/FLOP
  models, buffer sets, block-table metadata and the KV layouts the anchors take;
- impls.py: the implementations (floor, ours and the anchors SDPA, CPU_ATTN,
  FA3, FA2, Triton) and IMPL_CLASSES;
- check.py: the per-element check against the fp32 reference;
- targets.py: the issue's GPU and CPU targets (the run's verdicts).
"""
