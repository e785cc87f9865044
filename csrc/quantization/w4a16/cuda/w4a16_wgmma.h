// SPDX-License-Identifier: Apache-2.0
//
// The Hopper W4A16 GEMM (path "wgmma_tma" of w4a16_gemm.cu; the kernel is
// csrc/sm90a/w4a16_wgmma_tma.cu, compiled for sm_90a only): what the host
// plan needs to size its grid and K splits, and the launcher.
//
// The problem is computed transposed, out^T [N, M] = W^T [N, K] a^T [K, M],
// so that N (thousands) is wgmma's M side and the tokens are its N side
// (16 .. 256 per tile, not mostly padding at small M). A warpgroup owns one
// 64-column layout n-tile of W: the packed word of k16 step s that lane l of
// warp w reads (cuda/w4a16_layout.cuh, pair p = w) is exactly its A
// fragment, dequantized in registers; the activations are the shared-memory
// B operand. The weight layout is the one every other CUDA path reads: no
// second copy of the weight.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>

#include "quantization/w4a16/cuda/w4a16_mma_common.cuh"

namespace vllm_myops::w4a16::wgmma {

// Warpgroups per block, each on its own 64-column n-tile.
constexpr int kWarpgroups = 2;
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kBlockN = 64 * kWarpgroups;  // out columns per block

// Token tile (wgmma N up to 64; 2 or 4 n64 instructions at 128 and 256) for
// M tokens: the smallest that holds them, the largest above it.
inline int token_tile(int64_t m) {
  return m <= 16 ? 16 : m <= 32 ? 32 : m <= 64 ? 64 : m <= 128 ? 128 : 256;
}

// f(std::integral_constant<int, kBN>{}) for the token tile of M tokens: the
// one place a runtime M picks a build.
template <class F>
decltype(auto) with_token_tile(int64_t m, F&& f) {
  switch (token_tile(m)) {
    case 16:
      return f(std::integral_constant<int, 16>{});
    case 32:
      return f(std::integral_constant<int, 32>{});
    case 64:
      return f(std::integral_constant<int, 64>{});
    case 128:
      return f(std::integral_constant<int, 128>{});
    default:
      return f(std::integral_constant<int, 256>{});
  }
}

// Pipeline depth (k-tiles per block in flight) and resident blocks per SM of
// the build that runs M tokens (the host's K-split choice needs both).
int stages(int64_t m);
int resident_blocks(int64_t m, bool is_half);

// Launches the kernel on `stream` for the split plan in `args` (grid: token
// tiles x column blocks x args.splits; with splits > 1 each split writes its
// fp32 slice of args.workspace and the caller reduces). A producer warp fills
// the stages by TMA (activations) and bulk copies (weight tiles) on
// mbarriers. Preconditions, checked by the caller: compute capability 9.0;
// a's base 16-byte aligned and its row stride a multiple of 8 elements (the
// tensor map's rule; K may be anything); T = __half when is_half else
// __nv_bfloat16.
void launch(const dev::GemmArgs& args, bool is_half, cudaStream_t stream);

}  // namespace vllm_myops::w4a16::wgmma
