# SPDX-License-Identifier: Apache-2.0
"""The quantization family (W4A16: int4 weights, fp16/bf16 activations):
the weight format and FP32 references (reference)."""
