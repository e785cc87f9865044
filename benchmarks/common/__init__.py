# SPDX-License-Identifier: Apache-2.0
"""Shared benchmark utilities (timing, roofline, results, plots).

Kept free of any one kernel: a benchmark describes its cases, its buffer sets
and its byte counts; these modules time them the same way for every
implementation, put them against the memory ceiling measured in the same run,
save them with enough metadata to compare later runs, and plot them.

- timing:   CUDA-graph-over-rotating-buffers timer, optional do_bench with an
            L2 flush, a CPU timer, and a dry-run timer for machines without a GPU.
- roofline: bytes models, copy-bandwidth ceiling, datasheet figures, floors.
- results:  JSON with metadata, loading, and the regression gate.
- plot:     PNG of % of floor / ceiling per shape per implementation.
"""
