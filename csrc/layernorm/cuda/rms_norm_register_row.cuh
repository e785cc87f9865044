// SPDX-License-Identifier: Apache-2.0
//
// RMSNorm CUDA kernels for rows held in registers: a row is read from global
// memory once and kept in registers between the sum of squares and the
// output pass. rms_norm_row_in_registers is the row body shared by
// rms_norm_warp_rows_kernel (8, 16 or 32 lanes per row, shuffle reduction
// only) and rms_norm_block_row_kernel (one row per block, block reduction);
// the host side (rms_norm_kernels.cu) picks the layout from the width.
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

// ---- Row held in registers --------------------------------------------------
// One row is normalised by a group of `group_size` threads (part of a warp,
// or the whole block); thread `rank` owns body vectors rank + k * group_size
// and edge elements rank + s * group_size. Everything a thread will write is
// loaded first, so a row is fully read before any of it is written (in-place
// ops), and all loads of a thread are in flight together.
// group_sum(v) must return the sum of v over the group.

template <typename T, int kVecsPerThread, int kEdgeSlots, Variant kVariant,
          typename GroupSum>
__device__ __forceinline__ void rms_norm_row_in_registers(
    const RmsNormKernelArgs& p, int64_t row, bool row_active, int rank,
    int group_size, GroupSum&& group_sum) {
  using Vec = Vec16<T>;
  constexpr int kVecElems = Vec::kElems;
  constexpr int kMinAlign = sizeof(T);
  constexpr LoadPath kXPath = kInputPath<kVariant>;
  constexpr bool kFused = kVariant == Variant::kFusedAdd;

  const RowPointers<T> ptr = row_pointers<T, kVariant>(p, row);
  const RowSplit<int> split =
      row_active ? split_row<T, int>(ptr.x, p.width) : RowSplit<int>{};
  const int num_edges = split.num_edges();
  const T* x_body = ptr.x + split.head;  // 16-byte aligned

  auto body_index = [&](int k) { return rank + k * group_size; };
  auto edge_index = [&](int s) { return rank + s * group_size; };
  auto edge_column = [&](int e) {
    return split.template edge_column<kVecElems>(e);
  };

  // Everything above is arithmetic on kernel arguments, which may overlap
  // the previous kernel; memory is touched only after this.
  wait_for_prior_grids();

  // -- loads: x, residual, weight; all before the first use --
  Vec v[kVecsPerThread];
  T edge[kEdgeSlots];
#pragma unroll
  for (int k = 0; k < kVecsPerThread; ++k) {
    const int i = body_index(k);
    v[k] = i < split.body_vecs
               ? cuda::load_vec16<kXPath, 16>(x_body + i * kVecElems)
               : zero_vec16<T>();
  }
#pragma unroll
  for (int s = 0; s < kEdgeSlots; ++s) {
    const int e = edge_index(s);
    edge[s] = e < num_edges ? cuda::load_element<kXPath>(ptr.x + edge_column(e))
                            : cuda::from_float<T>(0.f);
  }

  Vec res[kFused ? kVecsPerThread : 1];
  T res_edge[kFused ? kEdgeSlots : 1];
  int res_align = 16;
  if constexpr (kFused) {
    res_align = cuda::relative_alignment(ptr.residual, ptr.x);
    const T* res_body = ptr.residual + split.head;
    cuda::with_alignment<kMinAlign>(res_align, [&](auto align) {
#pragma unroll
      for (int k = 0; k < kVecsPerThread; ++k) {
        const int i = body_index(k);
        res[k] = i < split.body_vecs
                     ? cuda::load_vec16<LoadPath::kCoherent, align.value>(
                           res_body + i * kVecElems)
                     : zero_vec16<T>();
      }
    });
#pragma unroll
    for (int s = 0; s < kEdgeSlots; ++s) {
      const int e = edge_index(s);
      res_edge[s] = e < num_edges ? cuda::load_element<LoadPath::kCoherent>(
                                        ptr.residual + edge_column(e))
                                  : cuda::from_float<T>(0.f);
    }
  }

  // Weight column c pairs with x column c, so the weight's 16-byte phase
  // relative to x is fixed per row; when it differs, each vector comes from
  // two aligned granule loads and a funnel shift (the weight is read-only and
  // L1-resident). Without a weight nothing is loaded (zeros).
  const bool has_weight = ptr.weight != nullptr;
  Vec w[kVecsPerThread];
  T w_edge[kEdgeSlots];
  auto load_weight = [&] {
    const int weight_vecs = has_weight ? split.body_vecs : 0;
    const int weight_edges = has_weight ? num_edges : 0;
    const cuda::GranuleCursor<T> w_body(ptr.weight + split.head);
    const T* weight_end = ptr.weight + p.width;
    cuda::with_granule_offset(w_body.byte_offset, [&](auto offset) {
#pragma unroll
      for (int k = 0; k < kVecsPerThread; ++k) {
        const int i = body_index(k);
        w[k] = i < weight_vecs
                   ? w_body.template load_bounded<LoadPath::kReadOnly>(
                         i, offset, weight_end)
                   : zero_vec16<T>();
      }
    });
#pragma unroll
    for (int s = 0; s < kEdgeSlots; ++s) {
      const int e = edge_index(s);
      w_edge[s] = e < weight_edges ? cuda::load_element<LoadPath::kReadOnly>(
                                         ptr.weight + edge_column(e))
                                   : cuda::from_float<T>(0.f);
    }
  };
  // x, residual and weight of 8 vectors per thread would need more than the
  // 128 registers a 512-thread block allows; the weight then waits for the
  // add and its latency overlaps the reduction instead.
  constexpr bool kLoadWeightWithInputs = !(kFused && kVecsPerThread >= 8);
  if constexpr (kLoadWeightWithInputs) load_weight();
  allow_dependent_grids_to_launch();

  // -- fused add: s = T(x + residual) replaces x and is stored to residual --
  if constexpr (kFused) {
#pragma unroll
    for (int k = 0; k < kVecsPerThread; ++k) v[k] = rounded_sum(v[k], res[k]);
#pragma unroll
    for (int s = 0; s < kEdgeSlots; ++s) {
      edge[s] = cuda::from_float<T>(cuda::to_float(edge[s]) +
                                    cuda::to_float(res_edge[s]));
    }
    T* res_body = ptr.residual + split.head;
    cuda::with_alignment<kMinAlign>(res_align, [&](auto align) {
#pragma unroll
      for (int k = 0; k < kVecsPerThread; ++k) {
        const int i = body_index(k);
        if (i < split.body_vecs) {
          cuda::store_vec16<align.value>(res_body + i * kVecElems, v[k]);
        }
      }
    });
#pragma unroll
    for (int s = 0; s < kEdgeSlots; ++s) {
      const int e = edge_index(s);
      if (e < num_edges) ptr.residual[edge_column(e)] = edge[s];
    }
  }

  if constexpr (!kLoadWeightWithInputs) load_weight();

  // -- reduction (slots that hold no data are zero) --
  float partial[kVecsPerThread];
#pragma unroll
  for (int k = 0; k < kVecsPerThread; ++k) partial[k] = sum_of_squares(v[k]);
#pragma unroll
  for (int stride = 1; stride < kVecsPerThread; stride *= 2) {
#pragma unroll
    for (int k = 0; k + stride < kVecsPerThread; k += 2 * stride) {
      partial[k] += partial[k + stride];
    }
  }
  float sumsq = partial[0];
#pragma unroll
  for (int s = 0; s < kEdgeSlots; ++s) {
    const float f = cuda::to_float(edge[s]);
    sumsq = fmaf(f, f, sumsq);
  }
  const float inv_rms = inverse_rms(group_sum(sumsq), p.width, p.epsilon);

  // -- output --
#pragma unroll
  for (int k = 0; k < kVecsPerThread; ++k) {
    v[k] = normalize(v[k], inv_rms);
    if (has_weight) v[k] = scale(v[k], w[k]);
  }
  T* out_body = ptr.out + split.head;
  cuda::with_alignment<kMinAlign>(
      cuda::relative_alignment(ptr.out, ptr.x), [&](auto align) {
#pragma unroll
        for (int k = 0; k < kVecsPerThread; ++k) {
          const int i = body_index(k);
          if (i < split.body_vecs) {
            cuda::store_vec16<align.value>(out_body + i * kVecElems, v[k]);
          }
        }
      });
#pragma unroll
  for (int s = 0; s < kEdgeSlots; ++s) {
    const int e = edge_index(s);
    if (e < num_edges) {
      const int64_t c = edge_column(e);
      ptr.out[c] = normalize_element(edge[s], inv_rms, has_weight, w_edge[s]);
    }
  }
}

// Rows of up to kLanesPerRow * kVecsPerThread vectors: kLanesPerRow (8, 16 or
// 32) lanes per row, 32 / kLanesPerRow rows per warp, blockDim.x / 32 warps
// per block; shuffle reduction only.
constexpr int kWarpRowsMaxThreads = 128;

template <typename T, int kLanesPerRow, int kVecsPerThread, Variant kVariant>
__global__ void __launch_bounds__(kWarpRowsMaxThreads)
    rms_norm_warp_rows_kernel(const RmsNormKernelArgs p) {
  const int rows_per_block = blockDim.x / kLanesPerRow;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * rows_per_block +
                      threadIdx.x / kLanesPerRow;
  // Lanes of rows past the end still join the shuffles (full-mask), with no
  // memory access.
  rms_norm_row_in_registers<T, kVecsPerThread, edge_slots<T>(kLanesPerRow),
                            kVariant>(
      p, row, row < p.rows, threadIdx.x % kLanesPerRow, kLanesPerRow,
      [](float v) { return cuda::warp_group_sum<kLanesPerRow>(v); });
}

// One row per block of blockDim.x <= kMaxThreads threads, each holding up to
// kVecsPerThread vectors.
template <typename T, int kVecsPerThread, int kMaxThreads, Variant kVariant>
__global__ void __launch_bounds__(kMaxThreads)
    rms_norm_block_row_kernel(const RmsNormKernelArgs p) {
  __shared__ cuda::BlockSumStorage<kMaxThreads> reduce_storage;
  rms_norm_row_in_registers<T, kVecsPerThread, edge_slots<T>(kWarpSize),
                            kVariant>(
      p, blockIdx.x, true, threadIdx.x, blockDim.x,
      [&](float v) { return cuda::block_sum(v, reduce_storage); });
}

}  // namespace vllm_myops::layernorm_cuda
