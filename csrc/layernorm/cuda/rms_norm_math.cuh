// SPDX-License-Identifier: Apache-2.0
//
// RMSNorm CUDA kernels: the math on one 16-byte vector (or one edge
// element). Values are widened to fp32, and rounded back to T exactly where
// vLLM rounds: the fused-add sum, the normalised value, and the weighted
// value; sums of squares stay in fp32.
#pragma once

#include <cstdint>

#include "cuda/dispatch_utils.cuh"
#include "cuda/vectorized_access.cuh"

namespace vllm_myops::layernorm_cuda {

using cuda::Vec16;

// ---- Per-vector math --------------------------------------------------------

template <typename T>
__device__ __forceinline__ Vec16<T> zero_vec16() {
  return cuda::vec16_from_bits<T>(make_uint4(0, 0, 0, 0));
}

// T(a + b), the value fused add stores to residual and normalises.
template <typename T>
__device__ __forceinline__ Vec16<T> rounded_sum(const Vec16<T>& a,
                                                const Vec16<T>& b) {
  float fa[Vec16<T>::kElems], fb[Vec16<T>::kElems];
  cuda::vec16_to_floats(a, fa);
  cuda::vec16_to_floats(b, fb);
#pragma unroll
  for (int j = 0; j < Vec16<T>::kElems; ++j) fa[j] += fb[j];
  return cuda::vec16_from_floats<T>(fa);
}

template <typename T>
__device__ __forceinline__ float sum_of_squares(const Vec16<T>& v) {
  float f[Vec16<T>::kElems];
  cuda::vec16_to_floats(v, f);
  // Two chains halve the dependent-FMA latency on the small-batch path.
  float even = 0.f, odd = 0.f;
#pragma unroll
  for (int j = 0; j < Vec16<T>::kElems; j += 2) {
    even = fmaf(f[j], f[j], even);
    odd = fmaf(f[j + 1], f[j + 1], odd);
  }
  return even + odd;
}

// T(x * inv_rms), then T(that * w) when there is a weight: the normalised
// value is rounded to T before the weight multiply (vLLM / HF semantics).
template <typename T>
__device__ __forceinline__ Vec16<T> normalize(const Vec16<T>& x,
                                              float inv_rms) {
  float f[Vec16<T>::kElems];
  cuda::vec16_to_floats(x, f);
#pragma unroll
  for (int j = 0; j < Vec16<T>::kElems; ++j) f[j] *= inv_rms;
  return cuda::vec16_from_floats<T>(f);
}

template <typename T>
__device__ __forceinline__ Vec16<T> scale(const Vec16<T>& y,
                                          const Vec16<T>& w) {
  float fy[Vec16<T>::kElems], fw[Vec16<T>::kElems];
  cuda::vec16_to_floats(y, fy);
  cuda::vec16_to_floats(w, fw);
#pragma unroll
  for (int j = 0; j < Vec16<T>::kElems; ++j) fy[j] *= fw[j];
  return cuda::vec16_from_floats<T>(fy);
}

template <typename T>
__device__ __forceinline__ T normalize_element(T x, float inv_rms,
                                               bool has_weight, T w) {
  T y = cuda::from_float<T>(cuda::to_float(x) * inv_rms);
  if (has_weight)
    y = cuda::from_float<T>(cuda::to_float(y) * cuda::to_float(w));
  return y;
}

__device__ __forceinline__ float inverse_rms(float sumsq, int64_t width,
                                             float epsilon) {
  return rsqrtf(sumsq / static_cast<float>(width) + epsilon);
}

}  // namespace vllm_myops::layernorm_cuda
