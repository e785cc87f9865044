// SPDX-License-Identifier: Apache-2.0
//
// The launcher of paged_attention's prefill_m128 kernel
// (attention/cuda/prefill_m128.cuh: 128 rows per CTA, D 64 and 128), in a
// translation unit of its own; paged_attention.cu chooses it (plan.cuh).

#include <cstdint>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention/cuda/params.cuh"
#include "attention/cuda/plan.cuh"
#include "attention/cuda/prefill_m128.cuh"
#include "attention/cuda/traits.cuh"
#include "cuda/launch.cuh"

namespace vllm_myops::attention_cuda {

template <typename T, int D>
void launch_prefill_m128(const Params& p, int64_t num_seqs,
                         int64_t num_kv_heads, int64_t row_tiles,
                         cudaStream_t stream) {
  constexpr int bytes = PrefillM128Traits<D>::kSmemBytes;
  cuda::allow_dynamic_smem<prefill_m128_kernel<T, D>>(bytes);
  // All of the unified L1 / shared memory as shared memory (a hint): two
  // CTAs of 96 KB per SM need ~194 KB; the kernel does not use L1 (cp.async
  // .cg, no other global loads in the loop).
  C10_CUDA_CHECK(cudaFuncSetAttribute(
      prefill_m128_kernel<T, D>, cudaFuncAttributePreferredSharedMemoryCarveout,
      cudaSharedmemCarveoutMaxShared));
  const dim3 grid{unsigned(num_seqs), unsigned(num_kv_heads),
                  unsigned(row_tiles)};
  prefill_m128_kernel<T, D><<<grid, kThreads, bytes, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template void launch_prefill_m128<__half, 64>(const Params&, int64_t, int64_t,
                                              int64_t, cudaStream_t);
template void launch_prefill_m128<__half, 128>(const Params&, int64_t, int64_t,
                                               int64_t, cudaStream_t);
template void launch_prefill_m128<__nv_bfloat16, 64>(const Params&, int64_t,
                                                     int64_t, int64_t,
                                                     cudaStream_t);
template void launch_prefill_m128<__nv_bfloat16, 128>(const Params&, int64_t,
                                                      int64_t, int64_t,
                                                      cudaStream_t);

}  // namespace vllm_myops::attention_cuda
