// SPDX-License-Identifier: Apache-2.0
//
// The second pass of split-K, shared by every GEMM path that splits K (the
// decode kernels and the tc kernel): each split wrote its fp32 partial to
// its own [M, N] slice of a workspace; this sums the slices in split order,
// adds the bias and rounds once (deterministic, no atomics).
#pragma once

#include <cstdint>

#include "cuda/dispatch_utils.cuh"

namespace vllm_myops::w4a16::splitk {

// out = T(sum over splits of workspace + bias), splits summed in order.
template <typename T>
__global__ void w4a16_splitk_reduce_kernel(const float* __restrict__ ws,
                                           const T* __restrict__ bias,
                                           T* __restrict__ out, int64_t mn,
                                           int n, int splits) {
  for (int64_t idx =
           blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       idx < mn; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = 0.f;
    for (int s = 0; s < splits; ++s) v += ws[s * mn + idx];
    if (bias != nullptr) v += cuda::to_float(bias[idx % n]);
    out[idx] = cuda::from_float<T>(v);
  }
}

}  // namespace vllm_myops::w4a16::splitk
