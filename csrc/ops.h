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

// ---- W4A16 GEMM (CPU: csrc/quantization/w4a16/cpu/w4a16_kernels.cpp) ----
// GPTQ qweight int32 [ceil(K/8), N] -> int32 [ceil(N/64), ceil(K/64), 512]
// in the CPU tile arrangement.
at::Tensor w4a16_repack_cpu(const at::Tensor& qweight, int64_t size_k,
                            int64_t size_n);

// a[:, perm] (act-order column gather), new contiguous [M, K].
at::Tensor w4a16_permute_cols_cpu(const at::Tensor& a, const at::Tensor& perm);

// (a @ dequant(b_packed)) + bias, fp32 accumulation, new [M, N] in a's dtype.
at::Tensor w4a16_gemm_cpu(const at::Tensor& a, const at::Tensor& b_packed,
                          const at::Tensor& scales,
                          const std::optional<at::Tensor>& zeros,
                          const std::optional<at::Tensor>& bias, int64_t size_k,
                          int64_t size_n, int64_t group_size);

// ---- Paged attention (CPU: csrc/attention/cpu/attention_kernels.cpp) ----
// key/value [T, H_kv, D] -> kv_cache [num_blocks, H_kv, block_size, 2*D] at
// slot_mapping[t] (< 0: skip the token).
void paged_kv_write_cpu(const at::Tensor& key, const at::Tensor& value,
                        at::Tensor& kv_cache, const at::Tensor& slot_mapping);

// Causal attention of query [T, H_q, D] over each sequence's paged context,
// written into out [T, H_q, D] (rows past query_start_loc[B] untouched).
void paged_attention_cpu(at::Tensor& out, const at::Tensor& query,
                         const at::Tensor& kv_cache,
                         const at::Tensor& query_start_loc,
                         const at::Tensor& seq_lens,
                         const at::Tensor& block_table, double scale,
                         int64_t max_query_len, int64_t max_seq_len);

#ifdef VLLM_MYOPS_WITH_CUDA
// ---- RMSNorm (CUDA: csrc/layernorm/rms_norm_kernels.cu) ----
void rms_norm_cuda(at::Tensor& result, const at::Tensor& input,
                   const std::optional<at::Tensor>& weight, double epsilon);

void fused_add_rms_norm_cuda(at::Tensor& input, at::Tensor& residual,
                             const std::optional<at::Tensor>& weight,
                             double epsilon);

// ---- W4A16 GEMM (CUDA: csrc/quantization/w4a16/w4a16_gemm.cu,
// w4a16_repack.cu, w4a16_permute_cols.cu) ----
at::Tensor w4a16_repack_cuda(const at::Tensor& qweight, int64_t size_k,
                             int64_t size_n);

at::Tensor w4a16_permute_cols_cuda(const at::Tensor& a, const at::Tensor& perm);

at::Tensor w4a16_gemm_cuda(const at::Tensor& a, const at::Tensor& b_packed,
                           const at::Tensor& scales,
                           const std::optional<at::Tensor>& zeros,
                           const std::optional<at::Tensor>& bias,
                           int64_t size_k, int64_t size_n, int64_t group_size);

// ---- Paged attention (CUDA: csrc/attention/paged_kv_write.cu,
// paged_attention.cu) ----
void paged_kv_write_cuda(const at::Tensor& key, const at::Tensor& value,
                         at::Tensor& kv_cache, const at::Tensor& slot_mapping);

void paged_attention_cuda(at::Tensor& out, const at::Tensor& query,
                          const at::Tensor& kv_cache,
                          const at::Tensor& query_start_loc,
                          const at::Tensor& seq_lens,
                          const at::Tensor& block_table, double scale,
                          int64_t max_query_len, int64_t max_seq_len);
#endif
