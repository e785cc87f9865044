// SPDX-License-Identifier: Apache-2.0
// Op schemas and their per-device implementations, grouped by op family.
// Kept thin: argument checking lives in each family's *_args.cpp (on
// core/checks.h), kernels in their own files.
#include "core/registration.h"
#include "ops.h"

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  // ---- Core ----
  // Which vector ISA the CPU kernels run with on this machine.
  ops.def("cpu_kernel_isa() -> str", &cpu_kernel_isa);

  // ---- RMSNorm ----
  // Root Mean Square normalisation over the last dim:
  //   result = (input / sqrt(mean(input^2) + epsilon)).to(dtype) * weight
  // weight=None means no scale.
  ops.def(
      "rms_norm(Tensor! result, Tensor input, Tensor? weight, float epsilon) "
      "-> ()");
  ops.impl("rms_norm", c10::kCPU, &rms_norm_cpu);

  // In place: residual = input + residual (rounded to the dtype), then
  // input = rms_norm(residual) * weight.
  ops.def(
      "fused_add_rms_norm(Tensor! input, Tensor! residual, Tensor? weight, "
      "float epsilon) -> ()");
  ops.impl("fused_add_rms_norm", c10::kCPU, &fused_add_rms_norm_cpu);

  // ---- W4A16 GEMM (int4 weights, fp16/bf16 activations) ----
  // GPTQ qweight int32 [ceil(size_k/8), size_n] -> the device's tile layout,
  // int32 [ceil(size_n/64), ceil(size_k/64), 512]. Once, at load.
  ops.def("w4a16_repack(Tensor qweight, int size_k, int size_n) -> Tensor");
  ops.impl("w4a16_repack", c10::kCPU, &w4a16_repack_cpu);

  // Act-order (GPTQ desc_act): out[M, K] = a[:, perm], the activation's
  // columns in the order of the repacked weight's rows. Per call, before
  // w4a16_gemm.
  ops.def("w4a16_permute_cols(Tensor a, Tensor perm) -> Tensor");
  ops.impl("w4a16_permute_cols", c10::kCPU, &w4a16_permute_cols_cpu);

  // out[M, size_n] = a[M, size_k] @ ((q - zeros) * scales) + bias, fp32
  // accumulation; zeros=None is symmetric (zero code 8); group_size -1, 32,
  // 64 or 128 (the last group may be partial).
  ops.def(
      "w4a16_gemm(Tensor a, Tensor b_packed, Tensor scales, Tensor? zeros, "
      "Tensor? bias, int size_k, int size_n, int group_size) -> Tensor");
  ops.impl("w4a16_gemm", c10::kCPU, &w4a16_gemm_cpu);

  // ---- Paged attention ----
  // KV cache [num_blocks, H_kv, block_size, 2*D] (K in [..., :D], V in
  // [..., D:]). Writes key/value [T, H_kv, D] into slot_mapping[t] (block
  // slot / block_size, offset slot % block_size); a slot < 0 is skipped.
  ops.def(
      "paged_kv_write(Tensor key, Tensor value, Tensor(a!) kv_cache, "
      "Tensor slot_mapping) -> ()");
  ops.impl("paged_kv_write", c10::kCPU, &paged_kv_write_cpu);

  // out[t] = causal softmax(scale * q k^T) v over sequence b's cached
  // context (seq_lens[b] tokens, its q_len = qsl[b+1] - qsl[b] new ones
  // last), GQA/MQA by H_q / H_kv; fp32 softmax and accumulation.
  // max_query_len / max_seq_len are upper bounds (host-side hints).
  ops.def(
      "paged_attention(Tensor(a!) out, Tensor query, Tensor kv_cache, "
      "Tensor query_start_loc, Tensor seq_lens, Tensor block_table, "
      "float scale, int max_query_len, int max_seq_len) -> ()");
  ops.impl("paged_attention", c10::kCPU, &paged_attention_cpu);

#ifdef VLLM_MYOPS_WITH_CUDA
  ops.impl("rms_norm", c10::kCUDA, &rms_norm_cuda);
  ops.impl("fused_add_rms_norm", c10::kCUDA, &fused_add_rms_norm_cuda);
  ops.impl("w4a16_repack", c10::kCUDA, &w4a16_repack_cuda);
  ops.impl("w4a16_permute_cols", c10::kCUDA, &w4a16_permute_cols_cuda);
  ops.impl("w4a16_gemm", c10::kCUDA, &w4a16_gemm_cuda);
  ops.impl("paged_kv_write", c10::kCUDA, &paged_kv_write_cuda);
  ops.impl("paged_attention", c10::kCUDA, &paged_attention_cuda);
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
