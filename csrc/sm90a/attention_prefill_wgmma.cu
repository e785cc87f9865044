// SPDX-License-Identifier: Apache-2.0
//
// The launcher of paged_attention's prefill_wgmma kernel
// (attention/cuda/prefill_wgmma.cuh: FlashAttention-3-style, one producer
// and two consumer warpgroups, wgmma; D 64 and 128). Built only for sm_90a
// (csrc/sm90a/); paged_attention.cu reaches it only in builds with sm_90a
// (VLLM_MYOPS_WITH_SM90A) on a device of compute capability 9.0, when
// `auto` takes it (prefill_wgmma_by_default in plan.cuh) or
// VLLM_MYOPS_ATTENTION_CUDA_PREFILL=wgmma forces it.

#include <cstdint>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention/cuda/params.cuh"
#include "attention/cuda/plan.cuh"
#include "attention/cuda/prefill_wgmma.cuh"
#include "attention/cuda/prefill_wgmma_traits.cuh"
#include "cuda/launch.cuh"

namespace vllm_myops::attention_cuda {

template <typename T, int D>
void launch_prefill_wgmma(const Params& p, int64_t num_seqs,
                          int64_t num_kv_heads, int64_t row_tiles,
                          cudaStream_t stream) {
  using C = PrefillWgmmaTraits<D>;
  static_assert(C::kRows == kPrefillWgmmaRows, "plan.cuh's row tile");
  constexpr int bytes = C::kSmemBytes;
  const dim3 grid{unsigned(num_seqs), unsigned(num_kv_heads),
                  unsigned(row_tiles)};
  cuda::allow_dynamic_smem<prefill_wgmma_kernel<T, D>>(bytes);
  prefill_wgmma_kernel<T, D><<<grid, C::kThreads, bytes, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template void launch_prefill_wgmma<__half, 64>(const Params&, int64_t, int64_t,
                                               int64_t, cudaStream_t);
template void launch_prefill_wgmma<__half, 128>(const Params&, int64_t, int64_t,
                                                int64_t, cudaStream_t);
template void launch_prefill_wgmma<__nv_bfloat16, 64>(const Params&, int64_t,
                                                      int64_t, int64_t,
                                                      cudaStream_t);
template void launch_prefill_wgmma<__nv_bfloat16, 128>(const Params&, int64_t,
                                                       int64_t, int64_t,
                                                       cudaStream_t);

}  // namespace vllm_myops::attention_cuda
