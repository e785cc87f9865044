# SPDX-License-Identifier: Apache-2.0
"""The RMSNorm family: FP32 references and the vLLM IR providers."""
