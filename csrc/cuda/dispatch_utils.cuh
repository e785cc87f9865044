// SPDX-License-Identifier: Apache-2.0
//
// DType -> CUDA element type dispatch and float <-> element conversions for
// float, __half and __nv_bfloat16.
//
// Kernels compute in fp32 and convert only at loads and stores. Conversions
// go through the explicit cuda_fp16/cuda_bf16 intrinsics (never implicit
// operators), so this compiles with or without torch's
// -D__CUDA_NO_HALF_CONVERSIONS__ family of flags, and every rounding is
// round-to-nearest-even, the rounding the CPU kernels and references use.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/dtype.h"

namespace vllm_myops::cuda {

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with the CUDA element type of `dtype`. Returns false
// (and calls nothing) for a dtype it does not know, so the caller can report
// it with its own error machinery.
template <typename F>
bool dispatch_floating_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      f(TypeTag<float>{});
      return true;
    case DType::kFloat16:
      f(TypeTag<__half>{});
      return true;
    case DType::kBFloat16:
      f(TypeTag<__nv_bfloat16>{});
      return true;
  }
  return false;
}

// ---- element <-> float ------------------------------------------------------

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Rounds v to T and back: the value a T store of v would hold.
template <typename T>
__device__ __forceinline__ float round_to(float v) {
  return to_float(from_float<T>(v));
}

// ---- two elements at a time -------------------------------------------------
// Two adjacent elements as one packed value. The 16-bit types convert a pair
// with one instruction (F2FP.*.PACK_AB) instead of two.

template <typename T>
struct PackedPair;

template <>
struct PackedPair<float> {
  using type = float2;
  static __device__ __forceinline__ type from_floats(float a, float b) {
    return make_float2(a, b);
  }
  static __device__ __forceinline__ float2 to_floats(type v) { return v; }
};

template <>
struct PackedPair<__half> {
  using type = __half2;
  static __device__ __forceinline__ type from_floats(float a, float b) {
    return __floats2half2_rn(a, b);
  }
  static __device__ __forceinline__ float2 to_floats(type v) {
    return __half22float2(v);
  }
};

template <>
struct PackedPair<__nv_bfloat16> {
  using type = __nv_bfloat162;
  static __device__ __forceinline__ type from_floats(float a, float b) {
    return __floats2bfloat162_rn(a, b);
  }
  static __device__ __forceinline__ float2 to_floats(type v) {
    return __bfloat1622float2(v);
  }
};

}  // namespace vllm_myops::cuda
