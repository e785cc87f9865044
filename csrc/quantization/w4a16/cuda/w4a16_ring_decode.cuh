// SPDX-License-Identifier: Apache-2.0
//
// The ring decode kernel (path "ring4" of w4a16_gemm.cu, 8 < M <= 16 under
// "auto"): m16n8k16 mma with the weight tiles as B, M tiles of 16, each
// warp streaming its k-tiles through a ring of shared-memory slots filled
// by cp.async, so the bytes in flight cost no registers. Built for 4
// resident blocks per SM (<= 128 registers: 65536 / (128 threads x 4)).
//
// Per tile: the codes of a lane's 16-byte word per k16 step are dequantized
// in registers to the step's B fragments (W = (q - z) * s rounded to T,
// cuda/w4a16_mma_common.cuh) and fed to 8 mma per step (one per n8 block).
#pragma once

#include <cstdint>

#include "cuda/mma_utils.cuh"
#include "quantization/w4a16/cuda/w4a16_decode_common.cuh"
#include "quantization/w4a16/cuda/w4a16_layout.cuh"
#include "quantization/w4a16/cuda/w4a16_mma_common.cuh"

namespace vllm_myops::w4a16::decode {

using dev::codes_pair;
using dev::dequant_pair;
using dev::group_of;
using dev::group_pairs;
using dev::GroupRaw;
using dev::load_group;

// Ring slots per warp and resident blocks per SM the kernel is compiled
// for. A fourth slot, or A loaded one tile ahead, does not fit 128
// registers (it spills).
constexpr int kDecodeSlots = 3;
constexpr int kDecodeBlocksPerSm = 4;
// k-tiles per warp a K-split of this kernel gets at least (choose_splits:
// kWarps x this per split): one more than the ring's slots, the sizing of
// the 4-slot build this kernel was derived from, so its split choice is
// unchanged.
constexpr int kDecodeSplitStages = kDecodeSlots + 1;

// A fragment (m16 x k16, row-major) at rows row0.., columns k0..: a0 = (g,
// 2t), a1 = (g + 8, 2t), a2 = (g, 2t + 8), a3 = (g + 8, 2t + 8).
template <typename T>
__device__ __forceinline__ void load_a_frag(const GemmArgs& p, int row0, int k0,
                                            int lane, uint32_t (&a)[4]) {
  const int g = lane / 4, t = lane % 4;
  a[0] = load_a_pair<T>(p, row0 + g, k0 + 2 * t);
  a[1] = load_a_pair<T>(p, row0 + g + 8, k0 + 2 * t);
  a[2] = load_a_pair<T>(p, row0 + g, k0 + 2 * t + 8);
  a[3] = load_a_pair<T>(p, row0 + g + 8, k0 + 2 * t + 8);
}

// What one warp holds of one k-tile when it computes it.
struct Stage {
  uint4 b[layout::kSteps];  // step s: words of pairs p = 0..3 (x, y, z, w)
  GroupRaw group[2];        // steps 0-1 and 2-3 (differ only for group 32)
  uint32_t a[layout::kSteps][4];
};

// One k-tile into the accumulators: dequant of the step's B fragments, then
// 8 mma per k16 step.
template <typename T>
__device__ __forceinline__ void compute_stage(const GemmArgs& p, int lane,
                                              const Stage& st,
                                              float (&acc)[8][4]) {
  uint32_t zb[8], sc[8];
#pragma unroll
  for (int s = 0; s < layout::kSteps; ++s) {
    // Steps 2-3 start a new group only for group size 32 (the only size
    // below a tile; larger ones are multiples of 64, or all of K).
    if (s == 0 || (s == 2 && p.group_size < layout::kTileK)) {
      group_pairs<T>(p, st.group[s / 2], lane, zb, sc);
    }
    uint32_t a[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) a[r] = st.a[s][r];
    const uint32_t words[4] = {st.b[s].x, st.b[s].y, st.b[s].z, st.b[s].w};
#pragma unroll
    for (int pr = 0; pr < layout::kPairs; ++pr) {
      const uint32_t q = words[pr];
      const int j0 = 2 * pr, j1 = 2 * pr + 1;
      // Block 2p: nibbles (0, 4) = b0, (1, 5) = b1; block 2p + 1: (2, 6),
      // (3, 7).
      const uint32_t b00 = dequant_pair<T>(codes_pair<T, 0>(q), zb[j0], sc[j0]);
      const uint32_t b01 = dequant_pair<T>(codes_pair<T, 1>(q), zb[j0], sc[j0]);
      const uint32_t b10 = dequant_pair<T>(codes_pair<T, 2>(q), zb[j1], sc[j1]);
      const uint32_t b11 = dequant_pair<T>(codes_pair<T, 3>(q), zb[j1], sc[j1]);
      tc::mma_16816<T>(acc[j0], a, b00, b01);
      tc::mma_16816<T>(acc[j1], a, b10, b11);
    }
  }
}

// The block's result: the warps' partial tiles summed in shared memory in
// warp order, then either the output tile (+ bias, rounded once) or this
// split's fp32 slice of the workspace. Whole block.
template <typename T>
__device__ __forceinline__ void finish_block(
    const GemmArgs& p, const float (&acc)[8][4],
    float (&partial)[16][layout::kTileN], int row0, int nt, int split, int lane,
    int warp) {
  // C fragment: c0, c1 = (g, 2t, 2t + 1),
  // c2, c3 = (g + 8, 2t, 2t + 1) of each m16 x n8 block.
  const int g = lane / 4, t = lane % 4;
  for (int w = 0; w < kWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int j = 0; j < 8; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int row = g + 8 * (r / 2);
          const int col = 8 * j + 2 * t + (r % 2);
          partial[row][col] =
              w == 0 ? acc[j][r] : partial[row][col] + acc[j][r];
        }
    }
    __syncthreads();
  }
  store_partial<T, 16>(p, partial, row0, nt, split);
}

// Interleaved (kt_begin + w, + kWarps, ...): the warps of a block stay on
// neighbouring tiles.
__device__ __forceinline__ WarpTiles interleaved_tiles(const GemmArgs& p,
                                                       int split, int warp) {
  const int kt_begin = split * p.kt_per_split;
  const int kt_end = min(kt_begin + p.kt_per_split, p.k_tiles);
  const int first = kt_begin + warp;
  const int count = first < kt_end ? (kt_end - first + kWarps - 1) / kWarps : 0;
  return {first, count, kWarps};
}

// Grid (M tile of 16, n-tile, K-split). Each warp streams its k-tiles
// (kt_begin + w, + kWarps, ...) through its own ring of kDecodeSlots
// shared-memory slots: tile i + kDecodeSlots - 1 is copied (cp.async, one
// commit group per tile) before tile i is used. A lane copies and later
// reads exactly its own 16-byte words of a slot (the layout gives lane l
// words 4l..4l+3 of each k16 step), so the ring needs no barrier. The
// scales / zeros of a tile ride along in a register ring of the same depth;
// the A fragments are loaded when the tile is used (A is small and read by
// every block: L2).
template <typename T>
__global__ void __launch_bounds__(kThreads, kDecodeBlocksPerSm)
    w4a16_decode_kernel(const GemmArgs p) {
  constexpr int kS = kDecodeSlots;
  constexpr int kQuads = layout::kTileWords / 4;  // 16-byte words per tile
  __shared__ __align__(16) uint4 ring[kWarps][kS][kQuads];
  __shared__ float partial[16][layout::kTileN];

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int row0 = blockIdx.x * 16;
  const int nt = blockIdx.y;
  const int split = blockIdx.z;
  const WarpTiles wt = interleaved_tiles(p, split, warp);
  const int first = wt.first, count = wt.count;
  const uint4* tiles = p.b + static_cast<int64_t>(nt) * p.k_tiles * kQuads;
  const int n0 = nt * layout::kTileN;

  // Tile i of this warp -> slot: its 4 quads (one per k16 step) and groups.
  const auto issue = [&](int i, int slot, GroupRaw(&gr)[2]) {
    const int kt = first + i * kWarps;
    const uint4* src = tiles + static_cast<int64_t>(kt) * kQuads;
#pragma unroll
    for (int s = 0; s < layout::kSteps; ++s) {
      tc::cp_async_16(tc::smem_addr(&ring[warp][slot][s * 32 + lane]),
                      src + s * 32 + lane, true);
    }
    const int g0 = group_of(p, kt, 0);
    const int g2 = group_of(p, kt, 2);
    load_group(p, g0, n0, lane, gr[0]);
    if (g2 != g0) {
      load_group(p, g2, n0, lane, gr[1]);
    } else {
      gr[1] = gr[0];
    }
  };

  float acc[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[j][r] = 0.f;

  GroupRaw groups[kS][2];
#pragma unroll
  for (int i = 0; i < kS - 1; ++i) {
    if (i < count) issue(i, i, groups[i]);
    tc::cp_async_commit();  // one group per ring slot, even if empty
  }
  Stage st;
  for (int i0 = 0; i0 < count; i0 += kS) {
#pragma unroll
    for (int j = 0; j < kS; ++j) {
      const int i = i0 + j;
      if (i < count) {
        const int ahead = i + kS - 1;
        if (ahead < count) {
          issue(ahead, (j + kS - 1) % kS, groups[(j + kS - 1) % kS]);
        }
        tc::cp_async_commit();
        tc::cp_async_wait<kS - 1>();  // this lane's copies of tile i landed
#pragma unroll
        for (int s = 0; s < layout::kSteps; ++s) {
          st.b[s] = ring[warp][j][s * 32 + lane];  // i % kS == j
        }
        st.group[0] = groups[j][0];
        st.group[1] = groups[j][1];
#pragma unroll
        for (int s = 0; s < layout::kSteps; ++s) {
          load_a_frag<T>(p, row0,
                         (first + i * kWarps) * layout::kTileK + 16 * s, lane,
                         st.a[s]);
        }
        compute_stage<T>(p, lane, st, acc);
      }
    }
  }
  tc::cp_async_wait<0>();

  finish_block<T>(p, acc, partial, row0, nt, split, lane, warp);
}

}  // namespace vllm_myops::w4a16::decode
