// SPDX-License-Identifier: Apache-2.0
// Plain description of one RMSNorm launch, shared by the CPU and CUDA kernels.
//
// It holds no ATen types on purpose: the host wrappers (layernorm_args.cpp)
// validate tensors and fill it, the kernels only read it. Moving the wrappers
// to PyTorch's stable ABI later touches the wrappers alone.
#pragma once

#include <cstdint>

#include "core/dtype.h"

#if defined(__CUDACC__)
  #define MYOPS_HOST_DEVICE __host__ __device__ __forceinline__
#else
  #define MYOPS_HOST_DEVICE inline
#endif

namespace vllm_myops {

// Maps a logical row index to the element offset of its first element.
// Any stack of leading dims collapses to at most two strided levels
// (e.g. q/k-norm views [tokens, heads, head_dim] of a fused qkv buffer), so
// rows may be strided without a copy:
//   offset(r) = (r / inner_rows) * outer_stride + (r % inner_rows) *
//   inner_stride
struct RowLayout {
  int64_t inner_rows = 1;
  int64_t outer_stride = 0;
  int64_t inner_stride = 0;

  MYOPS_HOST_DEVICE int64_t offset(int64_t row) const {
    if (inner_rows == 1) return row * outer_stride;
    const int64_t outer = row / inner_rows;
    return outer * outer_stride + (row - outer * inner_rows) * inner_stride;
  }
  // True when offset(r) == r * width, i.e. the rows tile one dense buffer.
  MYOPS_HOST_DEVICE bool is_dense(int64_t width) const {
    return (inner_rows == 1 && outer_stride == width) ||
           (inner_stride == width && outer_stride == inner_rows * width);
  }
};

// out[r] = rms_norm(in[r] (+ residual[r])) * weight, r in [0, rows).
// rms_norm:           in = input, out = result, residual = nullptr.
// fused_add_rms_norm: in = out = input (read, then overwritten in place);
//                     residual is read and overwritten with in + residual,
//                     rounded to the dtype, before it is normalised.
struct RmsNormParams {
  void* out = nullptr;
  RowLayout out_rows;
  const void* in = nullptr;
  RowLayout in_rows;
  void* residual = nullptr;  // nullptr: plain rms_norm
  RowLayout residual_rows;
  const void* weight = nullptr;  // nullptr: no scale; else contiguous [width]
  int64_t rows = 0;
  int64_t width = 0;
  float epsilon = 0.f;
  DType dtype = DType::kFloat32;
};

}  // namespace vllm_myops
