// SPDX-License-Identifier: Apache-2.0
//
// W4A16 GEMM on Hopper wgmma (sm_90a): out[M, N] = a[M, K] @ dequant(W) + bias
// computed as out^T = W^T a^T (quantization/w4a16/cuda/w4a16_wgmma.h says
// why and what the host provides).
//
// - A block is kWarpgroups warpgroups, each on one 64-column layout n-tile;
//   block tile kBN tokens x kBlockN columns, 64 k per pipeline stage.
// - Stage (shared memory): the activation tile, kBN rows of 64 k in the
//   128-byte swizzle (the wgmma B operand, K-major), then the block's packed
//   weight tiles (2 KB each, as in global memory). All threads fill stages by
//   cp.async, kStages deep, one __syncthreads per k-tile (the kernel's
//   comment gives the order and why a refill never meets a reader).
// - Per k-tile a warpgroup takes 4 k16 steps. Lane l of warp w reads word
//   (step, l, w) of its tile, which is its A fragment (rows 16 w ..
//   16 w + 15), dequantizes it with the group's scale and zero into T
//   (W = (q - z) * s rounded to T, the rounding of the tc and dequant paths);
//   one wgmma per step (two n64 at kBN = 128), committed together. The next
//   k-tile's dequant runs while they do.
// - Scales and zeros ride one k-tile ahead in registers (GroupRaw, coalesced
//   loads) and reach the two rows of a lane's fragment by shuffles.
// - Epilogue: accumulator (column n, token) -> out[token][n] + bias, rounded
//   once, or this split's fp32 workspace slice (the caller reduces).
// Edges: activation rows >= M and k >= K are zero in shared memory (the
// padded codes are 0 but (0 - z) * s is not); weight tiles past the last
// n-tile are zero; scales past N load as 0; stores past M / N are skipped.

#include <cstdint>
#include <type_traits>

#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/dispatch_utils.cuh"
#include "cuda/launch.cuh"
#include "cuda/mma_utils.cuh"
#include "cuda/sm90_utils.cuh"
#include "quantization/w4a16/cuda/w4a16_layout.cuh"
#include "quantization/w4a16/cuda/w4a16_mma_common.cuh"
#include "quantization/w4a16/cuda/w4a16_tc_gemm.cuh"
#include "quantization/w4a16/cuda/w4a16_wgmma.h"
#include "quantization/w4a16/cuda/w4a16_wgmma_tile.cuh"

namespace vllm_myops::w4a16::wgmma {
namespace {

namespace layout = cuda_layout;
using dev::GemmArgs;
using dev::GroupRaw;
using tile::kActChunks;
using tile::kTileBytes;

constexpr int kTileQuads = layout::kTileWords / 4;  // 16-byte chunks
static_assert(kTileQuads * kWarpgroups == kThreads, "one chunk per thread");

// Tile shapes per token tile. Stages: at least ~24 KB of weight tiles in
// flight per block at the small tiles (decode is a weight stream), fewer at
// the large ones, where the activation tile dominates a stage.
template <int kBN>
struct Shape : tile::TokenTile<kBN> {
  using tile::TokenTile<kBN>::kActBytes;
  static constexpr int kStageBytes = kActBytes + kWarpgroups * kTileBytes;
  static constexpr int kStages = kBN <= 32 ? 8 : kBN == 64 ? 6 : 4;
  // Resident blocks the register budget must allow: at least two (one
  // block's barrier and epilogue run beside the other's wgmma), three at the
  // small tiles, where the weight stream needs the bytes in flight (their
  // shared memory fits three).
  static constexpr int kMinBlocks = kBN <= 32 ? 3 : 2;
  // + 1 KB: the stages start at a 1024-byte boundary (the swizzle atom).
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024;
};

// The activation chunks and weight tiles of k-tile kt into `stage`.
template <typename T, int kBN>
__device__ __forceinline__ void issue_stage(const GemmArgs& p, uint8_t* stage,
                                            int tok0, int nt0, int kt) {
  using S = Shape<kBN>;
  const int tid = threadIdx.x;
  const uint32_t sa = tc::smem_addr(stage);
  const int k0 = kt * layout::kTileK;
  const T* a = static_cast<const T*>(p.a);
#pragma unroll
  for (int j = tid; j < kBN * kActChunks; j += kThreads) {
    const int row = j / kActChunks, ch = j % kActChunks;
    const int tok = tok0 + row;
    const int k = k0 + 8 * ch;
    const uint32_t dst = sa + sm90::sw128_chunk_offset(row, ch);
    if (p.a_aligned16) {
      // K % 8 == 0: a chunk is entirely inside or entirely past K.
      const bool valid = tok < p.m && k < p.k;
      const T* src = valid ? a + static_cast<int64_t>(tok) * p.a_stride + k : a;
      tc::cp_async_16(dst, src, valid);
    } else {
      dev::store_a_chunk_masked(p, dst, tok, k);  // unaligned rows
    }
  }
  const int n_tiles = (p.n + layout::kTileN - 1) / layout::kTileN;
  const int nt = nt0 + tid / kTileQuads;
  const int q = tid % kTileQuads;
  const bool valid = nt < n_tiles;
  const uint4* src =
      valid ? p.b + (static_cast<int64_t>(nt) * p.k_tiles + kt) * kTileQuads + q
            : p.b;
  tc::cp_async_16(sa + S::kActBytes + (tid / kTileQuads) * kTileBytes + 16 * q,
                  src, valid);
}

// Warpgroup wg's packed weight tile in `stage` (after the activations).
template <int kBN>
__device__ __forceinline__ const uint32_t* weights_of(const uint8_t* stage,
                                                      int wg) {
  return reinterpret_cast<const uint32_t*>(stage + Shape<kBN>::kActBytes +
                                           wg * kTileBytes);
}

// This thread's copies of the stage it waits for, visible to every thread
// and to wgmma's async proxy.
template <int kPending>
__device__ __forceinline__ void stage_ready() {
  tc::cp_async_wait<kPending>();
  sm90::fence_proxy_async_smem();
  __syncthreads();
}

// Grid (token tile, column block, K-split), token tiles fastest: the blocks
// that read the same weight tiles run together (all but one hit L2).
//
// Per k-tile i: issue wgmma(i) on the fragments dequantized last iteration,
// then (under it) wait for stage i + 1, refill the stage of k-tile i - 1 and
// dequantize k-tile i + 1 into the other fragment set, then wait for
// wgmma(i). A stage is refilled only after every warpgroup waited for the
// wgmma that read it (the wait ends iteration i - 1, the barrier follows),
// and a fragment set is overwritten only after its wgmma completed, as
// register A operands require. Prefetch distance: kStages - 2 k-tiles past
// the one being dequantized.
template <typename T, int kBN>
__global__ void __launch_bounds__(kThreads, Shape<kBN>::kMinBlocks)
    w4a16_wgmma_kernel(const GemmArgs p) {
  using S = Shape<kBN>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem =
      smem_raw + ((1024u - (tc::smem_addr(smem_raw) & 1023u)) & 1023u);
  const int tid = threadIdx.x;
  const int wg = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
  const int tok0 = blockIdx.x * kBN;
  const int nt0 = blockIdx.y * kWarpgroups;
  const int n0 = (nt0 + wg) * layout::kTileN;
  const int kt0 = blockIdx.z * p.kt_per_split;
  const int count = max(0, min(p.k_tiles, kt0 + p.kt_per_split) - kt0);

  float acc[S::kSub][S::kAcc];
#pragma unroll
  for (int u = 0; u < S::kSub; ++u)
#pragma unroll
    for (int i = 0; i < S::kAcc; ++i) acc[u][i] = 0.f;

  uint32_t a[layout::kSteps][4];
  if (count > 0) {
#pragma unroll
    for (int i = 0; i < S::kStages - 1; ++i) {
      if (i < count) {
        issue_stage<T, kBN>(p, smem + i * S::kStageBytes, tok0, nt0, kt0 + i);
      }
      tc::cp_async_commit();
    }
    GroupRaw gr[2];
    w4a16::tc_gemm::load_tile_groups<2>(p, kt0, 0, n0, lane, gr);
    stage_ready<S::kStages - 2>();  // k-tile 0
    tile::dequant_tile<T>(p, weights_of<kBN>(smem, wg), warp, lane, n0, kt0,
                          count > 1, gr, a);

    for (int i = 0; i < count; ++i) {
      const uint32_t act =
          tc::smem_addr(smem + (i % S::kStages) * S::kStageBytes);
      tile::mma_k_tile<T, kBN>(acc, a, act);

      uint32_t a_next[layout::kSteps][4];
      if (i + 1 < count) {
        stage_ready<S::kStages - 3>();  // k-tile i + 1
        const int next = i + S::kStages - 1;
        if (next < count) {
          issue_stage<T, kBN>(p, smem + (next % S::kStages) * S::kStageBytes,
                              tok0, nt0, kt0 + next);
        }
        tc::cp_async_commit();
        tile::dequant_tile<T>(
            p,
            weights_of<kBN>(smem + ((i + 1) % S::kStages) * S::kStageBytes, wg),
            warp, lane, n0, kt0 + i + 1, i + 2 < count, gr, a_next);
      }
      sm90::wgmma_wait<0>();
#pragma unroll
      for (int u = 0; u < S::kSub; ++u) sm90::fence_operands(acc[u]);
#pragma unroll
      for (int s = 0; s < layout::kSteps; ++s) sm90::fence_operands(a[s]);
      if (i + 1 < count) {
#pragma unroll
        for (int s = 0; s < layout::kSteps; ++s)
#pragma unroll
          for (int j = 0; j < 4; ++j) a[s][j] = a_next[s][j];
      }
    }
  }
  tc::cp_async_wait<0>();
  tile::store_tile<T, kBN>(p, acc, tok0, n0, warp, lane);
}

template <typename T, int kBN>
void launch_tile(const GemmArgs& args, cudaStream_t stream) {
  using S = Shape<kBN>;
  constexpr auto kKernel = w4a16_wgmma_kernel<T, kBN>;
  cuda::allow_dynamic_smem<kKernel>(S::kSmemBytes);
  const int n_tiles = (args.n + layout::kTileN - 1) / layout::kTileN;
  const dim3 grid((args.m + kBN - 1) / kBN,
                  (n_tiles + kWarpgroups - 1) / kWarpgroups, args.splits);
  kKernel<<<grid, kThreads, S::kSmemBytes, stream>>>(args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, int kBN>
int resident_blocks_of() {
  using S = Shape<kBN>;
  constexpr auto kKernel = w4a16_wgmma_kernel<T, kBN>;
  static const int blocks = [] {
    cuda::allow_dynamic_smem<kKernel>(S::kSmemBytes);
    int b = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &b, kKernel, kThreads, S::kSmemBytes));
    return b > 1 ? b : 1;
  }();
  return blocks;
}

template <typename T>
void launch_typed(const GemmArgs& args, cudaStream_t stream) {
  with_token_tile(args.m, [&](auto bn) {
    launch_tile<T, decltype(bn)::value>(args, stream);
  });
}

template <typename T>
int resident_blocks_typed(int64_t m) {
  return with_token_tile(
      m, [](auto bn) { return resident_blocks_of<T, decltype(bn)::value>(); });
}

}  // namespace

int stages(int64_t m) {
  return with_token_tile(
      m, [](auto bn) { return Shape<decltype(bn)::value>::kStages; });
}

int resident_blocks(int64_t m, bool is_half) {
  return is_half ? resident_blocks_typed<__half>(m)
                 : resident_blocks_typed<__nv_bfloat16>(m);
}

void launch(const GemmArgs& args, bool is_half, cudaStream_t stream) {
  if (is_half) {
    launch_typed<__half>(args, stream);
  } else {
    launch_typed<__nv_bfloat16>(args, stream);
  }
}

}  // namespace vllm_myops::w4a16::wgmma
