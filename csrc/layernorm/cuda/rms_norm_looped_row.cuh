// SPDX-License-Identifier: Apache-2.0
//
// RMSNorm CUDA kernel for rows too wide to hold in registers: one row per
// block in two passes over the row, the second re-reading from L2 what the
// first read (or, for fused add, wrote).
#pragma once

#include <cstdint>

#include "cuda/dispatch_utils.cuh"
#include "cuda/launch.cuh"
#include "cuda/reduction_utils.cuh"
#include "cuda/vectorized_access.cuh"
#include "layernorm/cuda/rms_norm_math.cuh"
#include "layernorm/cuda/rms_norm_row.cuh"

namespace vllm_myops::layernorm_cuda {

using cuda::allow_dependent_grids_to_launch;
using cuda::kWarpSize;
using cuda::LoadPath;
using cuda::Vec16;
using cuda::wait_for_prior_grids;

// ---- Rows too wide for registers --------------------------------------------
// One row per block; a first pass accumulates the sum of squares (and stores
// the fused-add residual), a second pass re-reads the row (x, or the residual
// just written) from L2 and writes the output. Each thread revisits exactly
// the elements it handled in the first pass, so the second pass reads only
// this thread's own writes (ordinary coherent loads, no extra barrier).
constexpr int kLoopedRowThreads = 256;
// At least two blocks per SM, so one block's reduction barrier overlaps
// another block's loads.
constexpr int kLoopedRowMinBlocks = 2;
constexpr int kLoopedRowUnroll = 4;  // vectors per thread in flight per step

template <typename T, Variant kVariant>
__global__ void __launch_bounds__(kLoopedRowThreads, kLoopedRowMinBlocks)
    rms_norm_looped_row_kernel(const RmsNormKernelArgs p) {
  using Vec = Vec16<T>;
  constexpr int kVecElems = Vec::kElems;
  constexpr int kMinAlign = sizeof(T);
  constexpr int kUnroll = kLoopedRowUnroll;
  constexpr LoadPath kXPath = kInputPath<kVariant>;
  constexpr bool kFused = kVariant == Variant::kFusedAdd;
  static_assert(edge_slots<T>(kWarpSize) == 1);
  __shared__ cuda::BlockSumStorage<kLoopedRowThreads> reduce_storage;

  const RowPointers<T> ptr = row_pointers<T, kVariant>(p, blockIdx.x);
  const RowSplit<int64_t> split = split_row<T, int64_t>(ptr.x, p.width);
  const int64_t step = static_cast<int64_t>(kUnroll) * blockDim.x;
  const T* x_body = ptr.x + split.head;
  T* res_body = kFused ? ptr.residual + split.head : nullptr;
  const int res_align =
      kFused ? cuda::relative_alignment(ptr.residual, ptr.x) : 16;
  const int edge = threadIdx.x;  // edge element of this thread, if any
  const bool has_edge = edge < split.num_edges();
  const int64_t edge_col = split.template edge_column<kVecElems>(edge);

  wait_for_prior_grids();

  // -- pass 1: sum of squares (fused add: also residual = T(x + residual)) --
  float sumsq = 0.f;
  for (int64_t base = threadIdx.x; base < split.body_vecs; base += step) {
    Vec v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
      v[u] = i < split.body_vecs
                 ? cuda::load_vec16<kXPath, 16>(x_body + i * kVecElems)
                 : zero_vec16<T>();
    }
    if constexpr (kFused) {
      Vec r[kUnroll];
      cuda::with_alignment<kMinAlign>(res_align, [&](auto align) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
          r[u] = i < split.body_vecs
                     ? cuda::load_vec16<LoadPath::kCoherent, align.value>(
                           res_body + i * kVecElems)
                     : zero_vec16<T>();
        }
      });
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = rounded_sum(v[u], r[u]);
      cuda::with_alignment<kMinAlign>(res_align, [&](auto align) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
          if (i < split.body_vecs) {
            cuda::store_vec16<align.value>(res_body + i * kVecElems, v[u]);
          }
        }
      });
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) sumsq += sum_of_squares(v[u]);
  }
  if (has_edge) {
    T e = cuda::load_element<kXPath>(ptr.x + edge_col);
    if constexpr (kFused) {
      e = cuda::from_float<T>(
          cuda::to_float(e) +
          cuda::to_float(cuda::load_element<LoadPath::kCoherent>(ptr.residual +
                                                                 edge_col)));
      ptr.residual[edge_col] = e;
    }
    const float f = cuda::to_float(e);
    sumsq = fmaf(f, f, sumsq);
  }
  allow_dependent_grids_to_launch();
  const float inv_rms =
      inverse_rms(cuda::block_sum(sumsq, reduce_storage), p.width, p.epsilon);

  // -- pass 2: normalise what pass 1 read (fused add: the new residual, which
  // kXPath reads coherently) --
  const T* src = kFused ? ptr.residual : ptr.x;
  const T* src_body = src + split.head;
  const int src_align = kFused ? res_align : 16;
  const bool has_weight = ptr.weight != nullptr;
  const int64_t weight_vecs = has_weight ? split.body_vecs : 0;
  const int out_align = cuda::relative_alignment(ptr.out, ptr.x);
  T* out_body = ptr.out + split.head;
  const cuda::GranuleCursor<T> w_body(ptr.weight + split.head);
  for (int64_t base = threadIdx.x; base < split.body_vecs; base += step) {
    Vec v[kUnroll];
    Vec w[kUnroll];
    cuda::with_alignment<kMinAlign>(src_align, [&](auto align) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
        v[u] = i < split.body_vecs ? cuda::load_vec16<kXPath, align.value>(
                                         src_body + i * kVecElems)
                                   : zero_vec16<T>();
      }
    });
    cuda::with_granule_offset(w_body.byte_offset, [&](auto offset) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
        w[u] = i < weight_vecs
                   ? w_body.template load<LoadPath::kReadOnly>(i, offset)
                   : zero_vec16<T>();
      }
    });
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      v[u] = normalize(v[u], inv_rms);
      if (has_weight) v[u] = scale(v[u], w[u]);
    }
    cuda::with_alignment<kMinAlign>(out_align, [&](auto align) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
        if (i < split.body_vecs) {
          cuda::store_vec16<align.value>(out_body + i * kVecElems, v[u]);
        }
      }
    });
  }
  if (has_edge) {
    const T e = cuda::load_element<kXPath>(src + edge_col);
    const T w =
        has_weight
            ? cuda::load_element<LoadPath::kReadOnly>(ptr.weight + edge_col)
            : cuda::from_float<T>(0.f);
    ptr.out[edge_col] = normalize_element(e, inv_rms, has_weight, w);
  }
}

}  // namespace vllm_myops::layernorm_cuda
