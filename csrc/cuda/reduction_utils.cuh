// SPDX-License-Identifier: Apache-2.0
//
// Sum reductions across lanes of a warp and across a thread block.
//
// Both return the total in every participating thread, and every thread adds
// the partial sums in the same order, so all threads hold bit-identical
// results (a row's threads then scale by exactly the same factor).
#pragma once

#include <cuda_runtime.h>

namespace vllm_myops::cuda {

constexpr int kWarpSize = 32;

// Sum over each aligned group of kGroupLanes lanes (a power of two <= 32).
// All 32 lanes of the warp must call it (it shuffles with a full mask).
template <int kGroupLanes>
__device__ __forceinline__ float warp_group_sum(float v) {
  static_assert(kGroupLanes >= 1 && kGroupLanes <= kWarpSize &&
                    (kGroupLanes & (kGroupLanes - 1)) == 0,
                "group must be a power of two of at most 32 lanes");
#pragma unroll
  for (int offset = kGroupLanes / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// Shared memory for block_sum: one partial per warp of a block of up to
// kMaxThreads threads, padded to whole 16-byte reads.
template <int kMaxThreads>
struct BlockSumStorage {
  static_assert(kMaxThreads % kWarpSize == 0, "whole warps");
  static constexpr int kSlots = (kMaxThreads / kWarpSize + 3) / 4 * 4;
  alignas(16) float partials[kSlots];
};

// Sum of v over the block, whose size must be a multiple of 32 and at most
// kMaxThreads. Costs a warp reduction, one __syncthreads and kSlots / 4
// broadcast shared-memory reads. The storage is written once: calling this
// again with the same storage needs a __syncthreads in between.
template <int kMaxThreads>
__device__ __forceinline__ float block_sum(float v,
                                           BlockSumStorage<kMaxThreads>& s) {
  constexpr int kSlots = BlockSumStorage<kMaxThreads>::kSlots;
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  v = warp_group_sum<kWarpSize>(v);
  if (lane == 0) s.partials[warp] = v;
  // Slots of warps this block does not have read as zero (kSlots <= 32).
  const int num_warps = blockDim.x / kWarpSize;
  if (warp == 0 && lane >= num_warps && lane < kSlots) s.partials[lane] = 0.f;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int i = 0; i < kSlots; i += 4) {
    const float4 p = *reinterpret_cast<const float4*>(&s.partials[i]);
    total += (p.x + p.y) + (p.z + p.w);
  }
  return total;
}

}  // namespace vllm_myops::cuda
