// SPDX-License-Identifier: Apache-2.0
// Every host entry point of the extension, declared once.
// Schemas live in torch_bindings.cpp; they match vLLM's so the ops are drop-in
// replacements for torch.ops._C.*.
#pragma once

#include <optional>

#include <string>

#include <ATen/core/Tensor.h>
#include <torch/library.h>

// ---- RMSNorm (CPU: csrc/cpu/layernorm_kernels.cpp) ----
void rms_norm_cpu(at::Tensor& result, const at::Tensor& input,
                  const std::optional<at::Tensor>& weight, double epsilon);

void fused_add_rms_norm_cpu(at::Tensor& input, at::Tensor& residual,
                            const std::optional<at::Tensor>& weight,
                            double epsilon);

// Name of the vector ISA the CPU kernels dispatch to on this machine
// ("avx512", "avx2" or "default"), for diagnostics.
std::string cpu_kernel_isa();

#ifdef VLLM_MYOPS_WITH_CUDA
// ---- RMSNorm (CUDA: csrc/layernorm_kernels.cu) ----
void rms_norm_cuda(at::Tensor& result, const at::Tensor& input,
                   const std::optional<at::Tensor>& weight, double epsilon);

void fused_add_rms_norm_cuda(at::Tensor& input, at::Tensor& residual,
                             const std::optional<at::Tensor>& weight,
                             double epsilon);
#endif
