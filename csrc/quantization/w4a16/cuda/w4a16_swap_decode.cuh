// SPDX-License-Identifier: Apache-2.0
//
// The swap-AB decode kernel (paths "swap" / "swap_global" of
// w4a16_gemm.cu, M <= 8 under "auto"; docs/quantization/design.md).
// It computes out^T = W^T a^T: the weight codes are the mma's A operand
// (16 columns n x k16) and one octet of tokens is B (k16 x 8 tokens), so an
// mma covers 16 columns of the tokens there are, where an m16 A operand of
// activations spends 15 of its 16 rows on padding at M = 1: half the mma
// and accumulator count of the ring kernel. The tile layout needs no
// change: the word of pair p of a lane is exactly the A fragment of n16
// block p (a0 = b0 of n8 block 2p, a1 = b0 of 2p + 1, a2 = b1 of 2p, a3 =
// b1 of 2p + 1).
// Scales and zeros are applied per group to fp32 sums instead of to every
// weight: the codes enter the mma as base + q (one lop3 per pair, exact) and
//   sum_group = s_n * (sum_k a_k * (base + q_kn) - (base + z_n) * sum_k a_k),
// sum_k a_k coming from one more mma per k16 step against an A of ones.
// W is not rounded to a's dtype here (the other paths round each weight);
// the subtraction cancels up to (base + 15) / |q - z| of the fp32 sum
// (base 1024 for fp16, 128 for bf16): ~2^-14 of sum_k |a_k| * s_n, far below
// the per-weight rounding the tests allow the other kernels.
// A warp takes a contiguous run of its split's k-tiles (one flush per group,
// not per tile) and streams them through its cp.async ring as the ring
// kernel does. A tile's activation slice (the block's 8 token rows x the
// tile's 64 k, 1 KB) rides in the same ring slot, copied with the tile's
// codes kS - 1 tiles ahead, and is read with two ldmatrix: loading it from
// global memory when the tile is used puts an L2 round trip on the critical
// path of every tile (kActRing = false, kept for activations that are not
// 16-byte copyable and as the forced path "swap_global").
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/dispatch_utils.cuh"
#include "cuda/mma_utils.cuh"
#include "quantization/w4a16/cuda/w4a16_decode_common.cuh"
#include "quantization/w4a16/cuda/w4a16_layout.cuh"
#include "quantization/w4a16/cuda/w4a16_mma_common.cuh"

namespace vllm_myops::w4a16::decode {

using dev::codes_pair;
using dev::from_bits;
using dev::group_of;
using dev::GroupRaw;
using dev::load_group;

// Ring slots per warp and resident blocks per SM the swap kernel is compiled
// for (128 registers). 3 slots: 5 (4 for group 32) did not pay at any
// M <= 8 (docs/quantization/log/).
constexpr int kSwapStages = 3;
constexpr int kSwapBlocksPerSm = 4;
// Token octets per block: a 2-octet build needs 205 registers (2 blocks per
// SM; docs/quantization/log/).
constexpr int kSwapOctets = 1;
// Activation slice of a ring slot: 8 rows of 8 16-byte chunks (8 elements
// each), rows 9 chunks (144 bytes) apart so that the 8 row addresses of one
// ldmatrix matrix (one chunk of rows 0..7) fall in 8 different 16-byte bank
// groups, and the cp.async stores of a chunk column too.
constexpr int kActChunks = layout::kTileK / 8;
constexpr int kActRowQuads = kActChunks + 1;
constexpr int kActQuads = 8 * kActRowQuads;

// tc::cp_async_16 through L1 (.ca): every block of an SM copies the same
// activation rows (its k-tiles' slices), so they stay L1 hits as the global
// loads of the fallback are, where .cg would send each copy to L2.
__device__ __forceinline__ void cp_async_ca_16(uint32_t dst, const void* src,
                                               bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(src), "r"(bytes));
}

template <typename T>
__device__ __forceinline__ float code_base() {
  return std::is_same_v<T, __half> ? 1024.f : 128.f;
}

// One 16-bit half of a raw pair as fp32.
template <typename T>
__device__ __forceinline__ float half_to_float(uint32_t pair, int half_shift) {
  return cuda::to_float(
      from_bits<T>(static_cast<uint16_t>((pair >> half_shift) & 0xffffu)));
}

// The scale and base + zero of the 8 columns a lane's accumulators hold:
// column 16 p + 8 h + g of the tile for (p, h). Lane c / 2 loaded column c
// (load_group); one shuffle each. Whole warp.
template <typename T>
__device__ __forceinline__ void swap_group_values(const GemmArgs& p,
                                                  const GroupRaw& gr, int lane,
                                                  float (&s)[4][2],
                                                  float (&zb)[4][2]) {
  const int g = lane / 4;
  const int half_shift = 16 * (g % 2);
  const bool has_zeros = p.zeros != nullptr;
#pragma unroll
  for (int pr = 0; pr < layout::kPairs; ++pr)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int src = 8 * pr + 4 * h + g / 2;
      s[pr][h] =
          half_to_float<T>(__shfl_sync(0xffffffffu, gr.s2, src), half_shift);
      // Zero codes are stored as T; rounded as the other paths do.
      const float z =
          has_zeros ? rintf(half_to_float<T>(
                          __shfl_sync(0xffffffffu, gr.z2, src), half_shift))
                    : 8.f;
      zb[pr][h] = code_base<T>() + z;
    }
}

// Contiguous runs of ceil(tiles / kWarps): a warp crosses each group of K
// rows once (the swap kernel applies scales per group).
__device__ __forceinline__ WarpTiles contiguous_tiles(const GemmArgs& p,
                                                      int split, int warp) {
  const int kt_begin = split * p.kt_per_split;
  const int kt_end = min(kt_begin + p.kt_per_split, p.k_tiles);
  const int per_warp = (kt_end - kt_begin + kWarps - 1) / kWarps;
  const int first = kt_begin + warp * per_warp;
  return {first, max(0, min(per_warp, kt_end - first)), 1};
}

// Zeroes a warp's sums: total (every group so far), group_acc and act_sum
// (the current group's sums of a * (base + q) and of a).
template <int kOctets>
__device__ __forceinline__ void swap_zero_sums(
    float (&total)[kOctets][layout::kPairs][4],
    float (&group_acc)[kOctets][layout::kPairs][4],
    float (&act_sum)[kOctets][4]) {
#pragma unroll
  for (int o = 0; o < kOctets; ++o) {
#pragma unroll
    for (int pr = 0; pr < layout::kPairs; ++pr)
#pragma unroll
      for (int r = 0; r < 4; ++r) total[o][pr][r] = group_acc[o][pr][r] = 0.f;
#pragma unroll
    for (int r = 0; r < 4; ++r) act_sum[o][r] = 0.f;
  }
}

// The end of a group: its sums with its scales and zeros applied,
// total += s_n * (group_acc - (base + z_n) * act_sum); then the group's
// sums are cleared. group_raw: the group's raw scales / zeros.
template <typename T, int kOctets>
__device__ __forceinline__ void swap_flush_group(
    const GemmArgs& p, const GroupRaw& group_raw, int lane,
    float (&group_acc)[kOctets][layout::kPairs][4],
    float (&act_sum)[kOctets][4], float (&total)[kOctets][layout::kPairs][4]) {
  float s[layout::kPairs][2], zb[layout::kPairs][2];
  swap_group_values<T>(p, group_raw, lane, s, zb);
#pragma unroll
  for (int o = 0; o < kOctets; ++o) {
#pragma unroll
    for (int pr = 0; pr < layout::kPairs; ++pr)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int h = r / 2, c = r % 2;
        const float d = fmaf(-zb[pr][h], act_sum[o][c], group_acc[o][pr][r]);
        total[o][pr][r] = fmaf(s[pr][h], d, total[o][pr][r]);
        group_acc[o][pr][r] = 0.f;
      }
#pragma unroll
    for (int r = 0; r < 4; ++r) act_sum[o][r] = 0.f;
  }
}

// k16 step s of a tile: the codes of the step's word b as the mma's A (pair
// p: n16 block p, as base + q), the step's activation fragments as B, into
// group_acc; and act_sum += ones x the same B (sum_k a per token).
template <typename T, int kOctets>
__device__ __forceinline__ void swap_mma_step(
    const uint4& b, const uint32_t (&act)[kOctets][layout::kSteps][2], int s,
    const uint32_t (&ones)[4], float (&group_acc)[kOctets][layout::kPairs][4],
    float (&act_sum)[kOctets][4]) {
  const uint32_t words[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
  for (int pr = 0; pr < layout::kPairs; ++pr) {
    const uint32_t q = words[pr];
    const uint32_t a[4] = {codes_pair<T, 0>(q), codes_pair<T, 2>(q),
                           codes_pair<T, 1>(q), codes_pair<T, 3>(q)};
#pragma unroll
    for (int o = 0; o < kOctets; ++o) {
      tc::mma_16816<T>(group_acc[o][pr], a, act[o][s][0], act[o][s][1]);
    }
  }
#pragma unroll
  for (int o = 0; o < kOctets; ++o) {
    tc::mma_16816<T>(act_sum[o], ones, act[o][s][0], act[o][s][1]);
  }
}

// The warps' totals summed in shared memory in warp order, then the output
// tile (+ bias, rounded once) or this split's fp32 workspace slice. Whole
// block.
template <typename T, int kOctets>
__device__ __forceinline__ void swap_finish_block(
    const GemmArgs& p, const float (&total)[kOctets][layout::kPairs][4],
    float (&partial)[8 * kOctets][layout::kTileN], int row0, int nt, int split,
    int lane, int warp) {
  const int g = lane / 4, t = lane % 4;
  for (int w = 0; w < kWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int o = 0; o < kOctets; ++o)
#pragma unroll
        for (int pr = 0; pr < layout::kPairs; ++pr)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int row = 8 * o + 2 * t + (r % 2);
            const int col = 16 * pr + 8 * (r / 2) + g;
            partial[row][col] =
                w == 0 ? total[o][pr][r] : partial[row][col] + total[o][pr][r];
          }
    }
    __syncthreads();
  }
  store_partial<T, 8 * kOctets>(p, partial, row0, nt, split);
}

// Grid (token octet, n-tile, K-split). kS: ring slots per warp;
// kTwoGroups: group size 32, two groups per tile (both groups' raw scales
// ride in the register ring; one otherwise). kActRing: the activations go
// through the ring (the host checks that a's base is 16-byte aligned, its
// row stride and K multiples of 8 elements, so every chunk is one aligned
// copy wholly inside or wholly past K); else they are loaded from global
// memory when the tile is used.
template <typename T, int kS, bool kTwoGroups, bool kActRing>
__global__ void __launch_bounds__(kThreads, kSwapBlocksPerSm)
    w4a16_swap_kernel(const GemmArgs p) {
  constexpr int kOctets = kSwapOctets;
  constexpr int kGroupsPerTile = kTwoGroups ? 2 : 1;
  constexpr int kQuads = layout::kTileWords / 4;  // 16-byte words per tile
  constexpr int kRows = 8 * kOctets;
  static_assert(!kActRing || kOctets == 1, "the act slice holds one octet");
  using Act = uint32_t[kOctets][layout::kSteps][2];
  __shared__ __align__(16) uint4 ring[kWarps][kS][kQuads];
  __shared__ __align__(16)
      uint4 act_ring[kWarps][kActRing ? kS : 1][kActRing ? kActQuads : 1];
  __shared__ float partial[kRows][layout::kTileN];

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int row0 = blockIdx.x * kRows;
  const int nt = blockIdx.y;
  const int split = blockIdx.z;
  const WarpTiles wt = contiguous_tiles(p, split, warp);
  const int first = wt.first, count = wt.count;
  const uint4* tiles = p.b + static_cast<int64_t>(nt) * p.k_tiles * kQuads;
  const int n0 = nt * layout::kTileN;
  // Act slice: lane l copies chunks l / 8 and l / 8 + 4 of token row l % 8,
  // and gives the ldmatrix row address of the same (row, chunk); rows >= M
  // and chunks past K are zero-filled (the padding codes are 0, but
  // base + 0 is not).
  const int act_row = lane % 8, act_chunk = lane / 8;
  const bool act_row_ok = row0 + act_row < p.m;
  const T* act_src =
      static_cast<const T*>(p.a) +
      static_cast<int64_t>(act_row_ok ? row0 + act_row : 0) * p.a_stride;

  // Tile i of this warp -> ring slot `slot`: its 4 quads, its act slice and
  // the raw scales / zeros of its groups (steps 0-1 and, for group 32, 2-3).
  const auto issue = [&](int i, int slot, GroupRaw(&gr)[kGroupsPerTile]) {
    const int kt = first + i;
    const uint4* src = tiles + static_cast<int64_t>(kt) * kQuads;
#pragma unroll
    for (int s = 0; s < layout::kSteps; ++s) {
      tc::cp_async_16(tc::smem_addr(&ring[warp][slot][s * 32 + lane]),
                      src + s * 32 + lane, true);
    }
    if constexpr (kActRing) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int chunk = act_chunk + kActChunks / 2 * h;
        const int k = kt * layout::kTileK + 8 * chunk;
        const bool valid = act_row_ok && k < p.k;
        cp_async_ca_16(
            tc::smem_addr(
                &act_ring[warp][slot][act_row * kActRowQuads + chunk]),
            valid ? static_cast<const void*>(act_src + k) : p.a, valid);
      }
    }
    load_group(p, group_of(p, kt, 0), n0, lane, gr[0]);
    if constexpr (kTwoGroups) {
      load_group(p, group_of(p, kt, 2), n0, lane, gr[kGroupsPerTile - 1]);
    }
  };
  // B fragments of k-tile kt: token 8 o + g, k = 16 s + 2 t (+ 8).
  const auto load_act = [&](int kt, Act& act) {
#pragma unroll
    for (int o = 0; o < kOctets; ++o)
#pragma unroll
      for (int s = 0; s < layout::kSteps; ++s) {
        const int row = row0 + 8 * o + g;
        const int k = kt * layout::kTileK + 16 * s + 2 * t;
        act[o][s][0] = load_a_pair<T>(p, row, k);
        act[o][s][1] = load_a_pair<T>(p, row, k + 8);
      }
  };
  // The same fragments from the act slice of ring slot `slot`: ldmatrix h
  // takes chunks 4h .. 4h + 3 as its matrices c, and lane (g, t) receives
  // token g, k 8 (4h + c) + 2t, + 1 of each: b0 (c even) and b1 (c odd) of
  // k16 step 2h + c / 2.
  const auto read_act = [&](int slot, Act& act) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t r[4];
      tc::ldsm_x4(
          r,
          tc::smem_addr(&act_ring[warp][slot][act_row * kActRowQuads +
                                              kActChunks / 2 * h + act_chunk]));
      act[0][2 * h][0] = r[0];
      act[0][2 * h][1] = r[1];
      act[0][2 * h + 1][0] = r[2];
      act[0][2 * h + 1][1] = r[3];
    }
  };

  // Accumulator element r of (octet o, pair p): column 16 p + 8 (r / 2) + g,
  // token 8 o + 2 t + (r % 2) (C fragment of m16n8: rows = columns n).
  float total[kOctets][layout::kPairs][4];
  float group_acc[kOctets][layout::kPairs][4];
  float act_sum[kOctets][4];  // [0], [1]: sum_k a of tokens 2t, 2t + 1
  swap_zero_sums<kOctets>(total, group_acc, act_sum);
  int group = -1;  // the group group_acc holds
  GroupRaw group_raw{0u, 0u};
  const auto flush = [&]() {
    swap_flush_group<T, kOctets>(p, group_raw, lane, group_acc, act_sum, total);
  };
  const auto enter_group = [&](int kt, int step, const GroupRaw& gr) {
    const int gi = group_of(p, kt, step);
    if (gi != group) {  // warp-uniform
      if (group >= 0) flush();
      group = gi;
      group_raw = gr;
    }
  };
  constexpr uint32_t kOnes =
      std::is_same_v<T, __half> ? 0x3c003c00u : 0x3f803f80u;
  const uint32_t ones[4] = {kOnes, kOnes, kOnes, kOnes};
  const auto compute = [&](int kt, const uint4(&b)[layout::kSteps],
                           const GroupRaw(&gr)[kGroupsPerTile],
                           const Act& act) {
#pragma unroll
    for (int s = 0; s < layout::kSteps; ++s) {
      // A new group can start at step 2 only for group size 32 (the only
      // size below a tile; larger ones are multiples of 64, or all of K).
      if (s == 0) enter_group(kt, 0, gr[0]);
      if constexpr (kTwoGroups) {
        if (s == 2) enter_group(kt, 2, gr[kGroupsPerTile - 1]);
      }
      swap_mma_step<T, kOctets>(b[s], act, s, ones, group_acc, act_sum);
    }
  };

  GroupRaw raws[kS][kGroupsPerTile];
#pragma unroll
  for (int i = 0; i < kS - 1; ++i) {
    if (i < count) issue(i, i, raws[i]);
    tc::cp_async_commit();  // one group per ring slot, even if empty
  }
  for (int i0 = 0; i0 < count; i0 += kS) {
#pragma unroll
    for (int j = 0; j < kS; ++j) {
      const int i = i0 + j;
      if (i < count) {
        constexpr int kAheadSlotOffset = kS - 1;
        const int ahead = i + kAheadSlotOffset;
        // The act slot refilled below (tile i - 1's) was read by every lane
        // of the warp, not only by the lanes that copied it.
        if constexpr (kActRing) __syncwarp();
        if (ahead < count) {
          issue(ahead, (j + kAheadSlotOffset) % kS,
                raws[(j + kAheadSlotOffset) % kS]);
        }
        tc::cp_async_commit();
        Act act;
        if constexpr (!kActRing) {
          // L1 / L2 hits (every block reads them), loaded while the tile's
          // copies land.
          load_act(first + i, act);
        }
        tc::cp_async_wait<kS - 1>();  // this lane's copies of tile i landed
        if constexpr (kActRing) {
          __syncwarp();  // ... and every lane's: ldmatrix reads them all
          read_act(j, act);
        }
        uint4 b[layout::kSteps];
#pragma unroll
        for (int s = 0; s < layout::kSteps; ++s) {
          b[s] = ring[warp][j][s * 32 + lane];  // i % kS == j
        }
        compute(first + i, b, raws[j], act);
      }
    }
  }
  tc::cp_async_wait<0>();
  if (group >= 0) flush();

  swap_finish_block<T, kOctets>(p, total, partial, row0, nt, split, lane, warp);
}

}  // namespace vllm_myops::w4a16::decode
