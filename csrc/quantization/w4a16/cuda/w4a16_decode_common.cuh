// SPDX-License-Identifier: Apache-2.0
//
// Block-level pieces shared by the two decode kernels (M <= 16:
// cuda/w4a16_ring_decode.cuh and cuda/w4a16_swap_decode.cuh): the block
// shape, A loads from global memory, the k-tiles of one warp, and the store
// of the block's summed tile to the output or to its split's workspace.
//
// A block is kWarps warps on one (n-tile, M-tile, K-split); the warps split
// the k-tiles of the split and are summed in shared memory in a fixed order.
// Grid: (M-tile, n-tile, K-split), M-tiles fastest so the blocks that read
// the same weight tiles run together and all but the first hit L2.
#pragma once

#include <cstdint>

#include "cuda/dispatch_utils.cuh"
#include "quantization/w4a16/cuda/w4a16_layout.cuh"
#include "quantization/w4a16/cuda/w4a16_mma_common.cuh"

namespace vllm_myops::w4a16::decode {

namespace layout = cuda_layout;
using dev::GemmArgs;

constexpr int kWarps = 4;  // warps per GEMM block
constexpr int kThreads = kWarps * 32;

// Two consecutive elements (k, k + 1) of row `row` of A as a T2, zero past
// M and K.
template <typename T>
__device__ __forceinline__ uint32_t load_a_pair(const GemmArgs& p, int row,
                                                int k) {
  if (row >= p.m || k >= p.k) return 0u;
  const T* ptr = static_cast<const T*>(p.a) + row * p.a_stride + k;
  if (p.a_aligned4 && k + 1 < p.k) {
    return __ldg(reinterpret_cast<const unsigned int*>(ptr));
  }
  const uint32_t lo = __ldg(reinterpret_cast<const unsigned short*>(ptr));
  const uint32_t hi =
      k + 1 < p.k ? __ldg(reinterpret_cast<const unsigned short*>(ptr) + 1)
                  : 0u;
  return lo | (hi << 16);
}

// The block's summed tile in shared memory -> the output tile (+ bias,
// rounded once) or this split's fp32 slice of the workspace. Whole block.
template <typename T, int kRows>
__device__ __forceinline__ void store_partial(
    const GemmArgs& p, const float (&partial)[kRows][layout::kTileN], int row0,
    int nt, int split) {
  const int n0 = nt * layout::kTileN;
  for (int idx = threadIdx.x; idx < kRows * layout::kTileN; idx += kThreads) {
    const int r = idx / layout::kTileN, c = idx % layout::kTileN;
    const int row = row0 + r, col = n0 + c;
    if (row >= p.m || col >= p.n) continue;
    const float v = partial[r][c];
    if (p.splits == 1) {
      const float b = p.bias != nullptr
                          ? cuda::to_float(static_cast<const T*>(p.bias)[col])
                          : 0.f;
      static_cast<T*>(p.out)[static_cast<int64_t>(row) * p.n + col] =
          cuda::from_float<T>(v + b);
    } else {
      p.workspace[(static_cast<int64_t>(split) * p.m + row) * p.n + col] = v;
    }
  }
}

// The k-tiles one warp of a block takes from its K-split: tile
// first + i * stride for i < count.
struct WarpTiles {
  int first;
  int count;
  int stride;
};

}  // namespace vllm_myops::w4a16::decode
