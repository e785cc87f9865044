# SPDX-License-Identifier: Apache-2.0
"""The attention family (paged attention over vLLM's KV cache): the vLLM
backend ``--attention-backend CUSTOM`` (backend, metadata, registration,
vllm_compat) and the FP32 reference (reference)."""
