# SPDX-License-Identifier: Apache-2.0
"""End-to-end benchmarks: vLLM serving with and without our kernels."""
