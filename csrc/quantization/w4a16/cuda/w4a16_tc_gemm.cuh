// SPDX-License-Identifier: Apache-2.0
//
// W4A16 tensor-core GEMM for prefill-sized M (17 .. ~1024; path "tc" of
// w4a16_gemm.cu): a block computes a BM x BN tile of out (BN = 64 * kWarpsN:
// kWarpsN layout n-tiles) over the k-tiles of its K-split, BK = 64 (one
// layout k-tile per pipeline stage).
//
// - A (BM x 64 of a's dtype) and the kWarpsN packed B tiles of a k-tile go
//   to shared memory by cp.async, kStages stages deep, one __syncthreads per
//   k-tile (the slot refilled at iteration i was read at iteration i - 1,
//   before the barrier). A rows are 8 chunks of 16 bytes, XOR-swizzled
//   (tc::swizzled), read with ldmatrix.x4: no bank conflicts.
// - kWarpsM x kWarpsN warps per K slice, kKSlices slices (4 or 8 warps); a
//   warp owns 16 * kWM rows x one 64-column layout n-tile, so its B
//   fragments of a k16 step are exactly one 16-byte word per lane
//   (cuda/w4a16_layout.cuh), one conflict-free ld.shared.v4. Slice h takes
//   k16 steps [4h, 4h + 4) / kKSlices of every k-tile (8 warps: a K split
//   inside the block, with no workspace; the slices are summed in shared
//   memory in a fixed order). Each code is dequantized by kWarpsM warps:
//   16 lop3 / hsub2 / hmul2 triples per k16 step feed 16 * kWM mma (kWM =
//   4: two ALU instructions per mma).
// - W = (q - z) * s rounded to T before the mma, exactly as the ring decode
//   kernel (same helpers); scales / zeros of the next k-tile ride one
//   iteration ahead in registers (GroupRaw, L2-resident).
// - Epilogue: fp32 accumulators through shared memory (rows padded by 8
//   floats: the float2 fragment stores of a warp hit 32 distinct banks per
//   half), then 8 consecutive columns per thread: + bias, rounded once,
//   16-byte stores (or this split's fp32 workspace slice).
// Edges: A rows >= M and k >= K are zero in shared memory (the padded codes
// are 0 but (0 - z) * s is not); B tiles past the last n-tile are zero (their
// scales load as 0); stores past M / N are skipped.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/mma_utils.cuh"
#include "quantization/w4a16/cuda/w4a16_layout.cuh"
#include "quantization/w4a16/cuda/w4a16_mma_common.cuh"

namespace vllm_myops::w4a16::tc_gemm {

using dev::GemmArgs;
using dev::GroupRaw;
namespace layout = cuda_layout;

constexpr int kAChunks = layout::kTileK * 2 / 16;   // 16-byte chunks per A row
constexpr int kTileQuads = layout::kTileWords / 4;  // 16-byte words per tile
static_assert(kAChunks == 8, "64 k of 2 bytes");

// A block tile: kWarpsM x kWarpsN warps of 16 * kWM rows x 64 columns each,
// kKSlices of them along K, kStages_ k-tiles in the cp.async pipeline.
template <int kWarpsM_, int kWarpsN_, int kWM_, int kStages_, int kKSlices_>
struct Config {
  static constexpr int kWarpsM = kWarpsM_;
  static constexpr int kWarpsN = kWarpsN_;
  static constexpr int kWM = kWM_;
  static constexpr int kStages = kStages_;
  static constexpr int kKSlices = kKSlices_;
  static constexpr int kTileWarps = kWarpsM * kWarpsN;  // warps of a slice
  static constexpr int kThreads = 32 * kTileWarps * kKSlices;
  static constexpr int kSliceSteps = layout::kSteps / kKSlices;
  static_assert(kTileWarps == 4, "4 warps a slice");
  static_assert(kKSlices == 1 || kKSlices == 2, "K slices: 1 or 2");
  static constexpr int kBM = 16 * kWM * kWarpsM;
  static constexpr int kBN = layout::kTileN * kWarpsN;
  static constexpr int kAQuads = kBM * kAChunks;
  static constexpr int kBQuads = kWarpsN * kTileQuads;
  static constexpr int kStageQuads = kAQuads + kBQuads;
  static constexpr int kLd = kBN + 8;  // fp32 epilogue row, padded
  static constexpr int kPipeBytes = kStages * kStageQuads * 16;
  static constexpr int kEpilogueBytes = kBM * kLd * 4;
  static constexpr int kSmemBytes =
      kPipeBytes > kEpilogueBytes ? kPipeBytes : kEpilogueBytes;
  static_assert(kAQuads % kThreads == 0 && kBQuads % kThreads == 0,
                "whole chunks per thread");
  static_assert(kStages >= 2, "a pipeline");
};

// Copies k-tile kt of the block into stage `stage` (one commit group is the
// caller's). Whole block.
template <typename T, class C>
__device__ __forceinline__ void issue_stage(const GemmArgs& p, uint4* stage,
                                            int m0, int nt0, int kt) {
  const int tid = threadIdx.x;
  const uint32_t sa = tc::smem_addr(stage);
  const int k0 = kt * layout::kTileK;
#pragma unroll
  for (int j = 0; j < C::kAQuads / C::kThreads; ++j) {
    const int c = tid + C::kThreads * j;
    const int row = c / kAChunks, ch = c % kAChunks;
    const int grow = m0 + row;
    const int k = k0 + 8 * ch;
    const uint32_t dst = sa + tc::swizzled<kAChunks>(row, ch);
    const T* a = static_cast<const T*>(p.a);
    if (p.a_aligned16) {
      // K % 8 == 0: a chunk is entirely inside or entirely past K.
      const bool valid = grow < p.m && k < p.k;
      const T* src =
          valid ? a + static_cast<int64_t>(grow) * p.a_stride + k : a;
      tc::cp_async_16(dst, src, valid);
    } else {
      dev::store_a_chunk_masked(p, dst, grow, k);  // unaligned rows
    }
  }
  uint4* sb = stage + C::kAQuads;
  const int n_tiles = (p.n + layout::kTileN - 1) / layout::kTileN;
#pragma unroll
  for (int j = 0; j < C::kBQuads / C::kThreads; ++j) {
    const int q = tid + C::kThreads * j;  // quad q % 128 of n-tile q / 128
    const int nt = nt0 + q / kTileQuads;
    const bool valid = nt < n_tiles;
    const uint4* src =
        valid ? p.b + (static_cast<int64_t>(nt) * p.k_tiles + kt) * kTileQuads +
                    q % kTileQuads
              : p.b;
    tc::cp_async_16(tc::smem_addr(sb + q), src, valid);
  }
}

// Raw scales / zeros of k-tile kt for the warp's 64 columns, one per pair
// of k16 steps from step0 (pairs differ only for group 32).
template <int kHeld>
__device__ __forceinline__ void load_tile_groups(const GemmArgs& p, int kt,
                                                 int step0, int n0, int lane,
                                                 GroupRaw (&gr)[kHeld]) {
  dev::load_group(p, dev::group_of(p, kt, step0), n0, lane, gr[0]);
#pragma unroll
  for (int x = 1; x < kHeld; ++x) {
    if (p.group_size < layout::kTileK) {
      dev::load_group(p, dev::group_of(p, kt, step0 + 2 * x), n0, lane, gr[x]);
    } else {
      gr[x] = gr[0];
    }
  }
}

// Grid (M block, N block of C::kBN, K-split), M blocks fastest: the blocks
// that read the same weight tiles run together (all but one hit L2). Dynamic
// shared memory: C::kSmemBytes.
template <typename T, class C, int kMinBlocks>
__global__ void __launch_bounds__(C::kThreads, kMinBlocks)
    w4a16_tc_kernel(const GemmArgs p) {
  constexpr int kWarpsN = C::kWarpsN, kWM = C::kWM, kStages = C::kStages;
  constexpr int kSliceSteps = C::kSliceSteps;
  constexpr int kHeld = (kSliceSteps + 1) / 2;  // groups a warp holds
  extern __shared__ __align__(16) uint4 smem[];

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int slice = warp / C::kTileWarps;
  const int wm = (warp % C::kTileWarps) / kWarpsN, wn = warp % kWarpsN;
  const int step0 = slice * kSliceSteps;
  const int m0 = blockIdx.x * C::kBM;
  const int nt0 = blockIdx.y * kWarpsN;
  const int kt_begin = blockIdx.z * p.kt_per_split;
  const int count = max(0, min(p.kt_per_split, p.k_tiles - kt_begin));
  const int n0_warp = (nt0 + wn) * layout::kTileN;
  const bool two_groups = p.group_size < layout::kTileK;

  float acc[kWM][8][4];
#pragma unroll
  for (int mt = 0; mt < kWM; ++mt)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[mt][j][r] = 0.f;

#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < count) {
      issue_stage<T, C>(p, smem + i * C::kStageQuads, m0, nt0, kt_begin + i);
    }
    tc::cp_async_commit();  // one group per stage, even if empty
  }
  GroupRaw gr[kHeld];
  if (count > 0) load_tile_groups(p, kt_begin, step0, n0_warp, lane, gr);

  // ldmatrix.x4 row addresses of an m16 x k16 A fragment: lanes 0-15 rows
  // 0-15 at chunk 2s, lanes 16-31 the same rows at chunk 2s + 1, so r[0..3]
  // are a0 (rows 0-7, k 0-7), a1 (rows 8-15), a2 (rows 0-7, k 8-15), a3.
  const int a_row = wm * 16 * kWM + lane % 16;
  const int a_chunk_hi = lane / 16;

  int slot = 0;
  for (int i = 0; i < count; ++i) {
    tc::cp_async_wait<kStages - 2>();  // this thread's copies of tile i
    __syncthreads();                   // everyone's, and tile i - 1 is done
    {
      const int ahead = i + kStages - 1;
      if (ahead < count) {
        int ahead_slot = slot + kStages - 1;
        if (ahead_slot >= kStages) ahead_slot -= kStages;
        issue_stage<T, C>(p, smem + ahead_slot * C::kStageQuads, m0, nt0,
                          kt_begin + ahead);
      }
      tc::cp_async_commit();
    }
    GroupRaw gr_next[kHeld];
    if (i + 1 < count) {
      load_tile_groups(p, kt_begin + i + 1, step0, n0_warp, lane, gr_next);
    }

    const uint4* stage = smem + slot * C::kStageQuads;
    const uint32_t sa = tc::smem_addr(stage);
    const uint4* sb = stage + C::kAQuads + wn * kTileQuads;
    uint32_t zb[8], sc[8];
#pragma unroll
    for (int ls = 0; ls < kSliceSteps; ++ls) {
      const int s = step0 + ls;  // k16 step of the tile
      if (ls == 0 || (ls == 2 && two_groups)) {
        dev::group_pairs<T>(p, gr[ls / 2], lane, zb, sc);
      }
      uint32_t a[kWM][4];
#pragma unroll
      for (int mt = 0; mt < kWM; ++mt) {
        tc::ldsm_x4(a[mt], sa + tc::swizzled<kAChunks>(a_row + 16 * mt,
                                                       2 * s + a_chunk_hi));
      }
      const uint4 bq = sb[s * 32 + lane];
      const uint32_t words[4] = {bq.x, bq.y, bq.z, bq.w};
#pragma unroll
      for (int pr = 0; pr < layout::kPairs; ++pr) {
        const uint32_t q = words[pr];
        const int j0 = 2 * pr, j1 = 2 * pr + 1;
        // Block 2p: nibbles (0, 4) = b0, (1, 5) = b1; block 2p + 1: (2, 6),
        // (3, 7) (cuda/w4a16_layout.cuh).
        const uint32_t b00 =
            dev::dequant_pair<T>(dev::codes_pair<T, 0>(q), zb[j0], sc[j0]);
        const uint32_t b01 =
            dev::dequant_pair<T>(dev::codes_pair<T, 1>(q), zb[j0], sc[j0]);
        const uint32_t b10 =
            dev::dequant_pair<T>(dev::codes_pair<T, 2>(q), zb[j1], sc[j1]);
        const uint32_t b11 =
            dev::dequant_pair<T>(dev::codes_pair<T, 3>(q), zb[j1], sc[j1]);
#pragma unroll
        for (int mt = 0; mt < kWM; ++mt) {
          tc::mma_16816<T>(acc[mt][j0], a[mt], b00, b01);
          tc::mma_16816<T>(acc[mt][j1], a[mt], b10, b11);
        }
      }
    }
#pragma unroll
    for (int x = 0; x < kHeld; ++x) gr[x] = gr_next[x];
    slot = slot + 1 == kStages ? 0 : slot + 1;
  }
  tc::cp_async_wait<0>();
  __syncthreads();  // the stages are free: reuse them for the fp32 tile

  // C fragment: c0, c1 = (g, 2t, 2t + 1), c2, c3 = (g + 8, 2t, 2t + 1).
  // The last slice stores its sums, each earlier one adds its own: a fixed
  // order (deterministic).
  float* tile = reinterpret_cast<float*>(smem);
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int h = C::kKSlices - 1; h >= 0; --h) {
    if (slice == h) {
#pragma unroll
      for (int mt = 0; mt < kWM; ++mt)
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int row = wm * 16 * kWM + 16 * mt + g + 8 * hh;
            const int col = wn * layout::kTileN + 8 * j + 2 * t;
            float2* dst = reinterpret_cast<float2*>(&tile[row * C::kLd + col]);
            float2 v = make_float2(acc[mt][j][2 * hh], acc[mt][j][2 * hh + 1]);
            if (h != C::kKSlices - 1) {
              const float2 o = *dst;
              v.x += o.x;
              v.y += o.y;
            }
            *dst = v;
          }
    }
    __syncthreads();
  }

  // 8 consecutive columns per thread; C::kBN / 8 threads cover a tile row.
  constexpr int kRuns = C::kBN / 8;
  const int n_base = nt0 * layout::kTileN;
  const bool vec = p.n % 8 == 0;  // 16-byte aligned runs, none cut by N
  for (int idx = threadIdx.x; idx < C::kBM * kRuns; idx += C::kThreads) {
    const int r = idx / kRuns, c = (idx % kRuns) * 8;
    const int row = m0 + r, col = n_base + c;
    if (row >= p.m || col >= p.n) continue;
    const float4 lo = *reinterpret_cast<const float4*>(&tile[r * C::kLd + c]);
    const float4 hi =
        *reinterpret_cast<const float4*>(&tile[r * C::kLd + c + 4]);
    float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    const int64_t off = static_cast<int64_t>(row) * p.n + col;
    if (p.splits == 1) {
      const T* bias = static_cast<const T*>(p.bias);
      alignas(16) T o[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float b = bias != nullptr && col + e < p.n
                            ? cuda::to_float(bias[col + e])
                            : 0.f;
        o[e] = cuda::from_float<T>(v[e] + b);
      }
      T* dst = static_cast<T*>(p.out) + off;
      if (vec) {
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(o);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          if (col + e < p.n) dst[e] = o[e];
        }
      }
    } else {
      float* dst =
          p.workspace + static_cast<int64_t>(blockIdx.z) * p.m * p.n + off;
      if (vec) {
        reinterpret_cast<float4*>(dst)[0] = lo;
        reinterpret_cast<float4*>(dst)[1] = hi;
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          if (col + e < p.n) dst[e] = v[e];
        }
      }
    }
  }
}

}  // namespace vllm_myops::w4a16::tc_gemm
