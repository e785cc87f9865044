# SPDX-License-Identifier: Apache-2.0
"""The layernorm family (RMSNorm): vLLM IR providers (ir_providers), how the
plugin registers them (registration), FP32 references (reference) and
typical calls for `vllm-myops doctor` (doctor_calls)."""
