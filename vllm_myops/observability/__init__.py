# SPDX-License-Identifier: Apache-2.0
"""Seeing that our kernels ran: per-provider call counters of the registry's
ops (counters), the stats files and their verdict (stats_files), a start-up
log line per op naming the provider vLLM chose (choice_log), and what
counting changes in vllm.ir impls (ir_impls)."""
