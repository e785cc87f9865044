// SPDX-License-Identifier: Apache-2.0
// Every host entry point of the extension, declared once, grouped by op
// family. Schemas live in torch_bindings.cpp; they match vLLM's so the ops
// are drop-in replacements for torch.ops._C.*.
#pragma once

#include <optional>

#include <string>

#include <ATen/core/Tensor.h>
#include <torch/library.h>

// ---- Core (csrc/cpu/isa.cpp) ----
// Name of the vector ISA the CPU kernels dispatch to on this machine
// ("avx512", "avx2" or "default"), for diagnostics.
std::string cpu_kernel_isa();

// ---- RMSNorm (CPU: csrc/layernorm/cpu/rms_norm_kernels.cpp) ----
void rms_norm_cpu(at::Tensor& result, const at::Tensor& input,
                  const std::optional<at::Tensor>& weight, double epsilon);

void fused_add_rms_norm_cpu(at::Tensor& input, at::Tensor& residual,
                            const std::optional<at::Tensor>& weight,
                            double epsilon);

#ifdef VLLM_MYOPS_WITH_CUDA
// ---- RMSNorm (CUDA: csrc/layernorm/rms_norm_kernels.cu) ----
void rms_norm_cuda(at::Tensor& result, const at::Tensor& input,
                   const std::optional<at::Tensor>& weight, double epsilon);

void fused_add_rms_norm_cuda(at::Tensor& input, at::Tensor& residual,
                             const std::optional<at::Tensor>& weight,
                             double epsilon);
#endif
