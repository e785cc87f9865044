// SPDX-License-Identifier: Apache-2.0
//
// The pieces of the Hopper W4A16 kernels (csrc/sm90a/w4a16_wgmma*.cu) that
// do not depend on how a stage reaches shared memory: the token tile's wgmma
// shape, the register A fragment of a warp from its packed weight word
// (dequantized with the group's scale and zero), and the epilogue
// (cuda/w4a16_wgmma.h says why the problem is computed transposed).
//
// - A warpgroup owns one 64-column layout n-tile. Per k-tile it takes 4 k16
//   steps; lane l of warp w reads word (step, l, w) of its tile, which is its
//   A fragment (rows 16 w .. 16 w + 15), and dequantizes it with the group's
//   scale and zero into T (W = (q - z) * s rounded to T, the rounding of the
//   tc and dequant paths).
// - Scales and zeros arrive in the stage with the weights (GroupRows: the
//   k-tile's group rows of the block's columns, copied by the producer), so
//   no global load sits on a consumer's per-k-tile path; a lane reads the
//   two rows of its fragment from there.
// - Epilogue: accumulator (column n, token) -> out[token][n] + bias, rounded
//   once, or this split's fp32 workspace slice (the caller reduces).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/dispatch_utils.cuh"
#include "cuda/sm90_utils.cuh"
#include "quantization/w4a16/cuda/w4a16_layout.cuh"
#include "quantization/w4a16/cuda/w4a16_mma_common.cuh"
#include "quantization/w4a16/cuda/w4a16_wgmma.h"

namespace vllm_myops::w4a16::wgmma::tile {

namespace layout = cuda_layout;
using dev::GemmArgs;

constexpr int kTileBytes = layout::kTileWords * 4;  // one packed n-tile k-tile
static_assert(layout::kTileK * 2 == sm90::kSwizzleRowBytes,
              "a k-tile's activation row is one 128-byte swizzle row");

// The wgmma shape of a token tile of kBN tokens (wgmma's N side): one
// instruction of N = kBN up to 64, kBN / 64 of N = 64 above. The activation
// tile is kBN rows of 64 k in the 128-byte swizzle (the K-major B operand).
template <int kBN>
struct TokenTile {
  static constexpr int kInstN = kBN < 64 ? kBN : 64;  // wgmma N
  static constexpr int kSub = kBN / kInstN;           // wgmma per k16 step
  static constexpr int kAcc = kInstN / 2;  // fp32 accumulators per wgmma
  static constexpr int kActBytes = kBN * sm90::kSwizzleRowBytes;
  static_assert(kActBytes % sm90::kSwizzleAtomBytes == 0, "whole atoms");
};

// A stage's group rows: for each half h of the k-tile (k16 steps 2h, 2h + 1)
// the scales, then the zero codes, of the block's kWarpgroups n-tiles (64
// columns each, from the block's first column; 0 past N), as T bits. Groups
// of 64 rows or more cover the whole k-tile: half 0 only, read for both.
struct GroupRows {
  static constexpr int kCols = kWarpgroups * layout::kTileN;
  static constexpr int kBytes = 2 * 2 * kCols * 2;
  // Element offset of (half, scales = 0 / zeros = 1) in the area.
  __host__ __device__ static constexpr int row(int half, int zeros) {
    return (2 * half + zeros) * kCols;
  }
  __device__ static int halves(const GemmArgs& p) {
    return p.group_size < layout::kTileK ? 2 : 1;
  }
};

// Scale and base + zero of the two rows of a lane's A fragment (columns
// 16 w + g and 16 w + 8 + g of warpgroup wg's n-tile), each as a pair of
// equal halves.
struct RowGroups {
  uint32_t zb[2];
  uint32_t s[2];
};

// kZeros: the launch has zero points (asymmetric); without, the zero is 8,
// a constant (no zero-point load or branch per k-tile).
template <typename T, bool kZeros>
__device__ __forceinline__ RowGroups row_groups(const uint16_t* area, int half,
                                                int wg, int warp, int lane) {
  constexpr uint32_t kBaseBits = dev::MmaType<T>::kExponent & 0xffffu;
  RowGroups out;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int col = wg * layout::kTileN + 16 * warp + lane / 4 + 8 * h;
    const uint32_t sv = area[GroupRows::row(half, 0) + col];
    out.s[h] = sv | (sv << 16);
    // Zero codes are stored as T; base + z is exact in T's bits.
    uint32_t zcode = 8;
    if constexpr (kZeros) {
      const uint32_t zv = area[GroupRows::row(half, 1) + col];
      zcode = static_cast<uint32_t>(
          __float2int_rn(cuda::to_float(dev::from_bits<T>(zv))));
    }
    const uint32_t zbits = kBaseBits + zcode;
    out.zb[h] = zbits | (zbits << 16);
  }
  return out;
}

// The A fragment of one k16 step from its packed word: register j (rows
// g + 8 (j % 2), k 2t + 8 (j / 2) and + 1) is nibble pair kPairOf[j], i.e.
// nibbles (kPairOf[j], kPairOf[j] + 4) (cuda/w4a16_layout.cuh), checked for
// every lane at compile time.
constexpr int kPairOf[4] = {0, 2, 1, 3};
constexpr bool fragment_matches_layout() {
  for (int w = 0; w < 4; ++w)
    for (int l = 0; l < 32; ++l)
      for (int s = 0; s < layout::kSteps; ++s)
        for (int j = 0; j < 4; ++j)
          for (int h = 0; h < 2; ++h) {
            const layout::TileCoord c =
                layout::nibble_coord(s * 128 + l * 4 + w, kPairOf[j] + 4 * h);
            const int g = l / 4, t = l % 4;
            if (c.n != 16 * w + g + 8 * (j % 2)) return false;
            if (c.k != 16 * s + 2 * t + h + 8 * (j / 2)) return false;
          }
  return true;
}
static_assert(fragment_matches_layout(),
              "kPairOf does not give the wgmma A fragment of warp w's word");

template <typename T>
__device__ __forceinline__ void dequant_step(uint32_t q, const RowGroups& rg,
                                             uint32_t (&a)[4]) {
  a[0] = dev::dequant_pair<T>(dev::codes_pair<T, kPairOf[0]>(q), rg.zb[0],
                              rg.s[0]);
  a[1] = dev::dequant_pair<T>(dev::codes_pair<T, kPairOf[1]>(q), rg.zb[1],
                              rg.s[1]);
  a[2] = dev::dequant_pair<T>(dev::codes_pair<T, kPairOf[2]>(q), rg.zb[0],
                              rg.s[0]);
  a[3] = dev::dequant_pair<T>(dev::codes_pair<T, kPairOf[3]>(q), rg.zb[1],
                              rg.s[1]);
}

// Accumulator r of n8 block j of instruction u: column 16 w + g + 8 (r / 2)
// of the n-tile, token kInstN u + 8 j + 2 t + (r % 2) of the tile.
template <typename T, int kBN>
__device__ __forceinline__ void store_tile(
    const GemmArgs& p,
    const float (&acc)[TokenTile<kBN>::kSub][TokenTile<kBN>::kAcc], int tok0,
    int n0, int warp, int lane) {
  using S = TokenTile<kBN>;
  const int g = lane / 4, t = lane % 4;
  const T* bias = static_cast<const T*>(p.bias);
  T* out = static_cast<T*>(p.out);
#pragma unroll
  for (int u = 0; u < S::kSub; ++u)
#pragma unroll
    for (int j = 0; j < S::kInstN / 8; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int n = n0 + 16 * warp + g + 8 * (r / 2);
        const int tok = tok0 + S::kInstN * u + 8 * j + 2 * t + (r % 2);
        if (n >= p.n || tok >= p.m) continue;
        const float v = acc[u][4 * j + r];
        const int64_t idx = static_cast<int64_t>(tok) * p.n + n;
        if (p.splits > 1) {
          p.workspace[static_cast<int64_t>(blockIdx.z) * p.m * p.n + idx] = v;
        } else {
          const float b = bias != nullptr ? cuda::to_float(bias[n]) : 0.f;
          out[idx] = cuda::from_float<T>(v + b);
        }
      }
}

// A k-tile's A fragments for warpgroup wg from its stage: `words` (its
// packed weight tile) and `area` (the stage's GroupRows; `two_halves`:
// GroupRows::halves(p) == 2, computed once by the caller).
template <typename T, bool kZeros>
__device__ __forceinline__ void dequant_tile(const uint32_t* words,
                                             const uint16_t* area,
                                             bool two_halves, int wg, int warp,
                                             int lane,
                                             uint32_t (&a)[layout::kSteps][4]) {
  const RowGroups rg0 = row_groups<T, kZeros>(area, 0, wg, warp, lane);
  const RowGroups rg[2] = {
      rg0, two_halves ? row_groups<T, kZeros>(area, 1, wg, warp, lane) : rg0};
#pragma unroll
  for (int s = 0; s < layout::kSteps; ++s) {
    dequant_step<T>(words[s * 128 + lane * 4 + warp], rg[s / 2], a[s]);
  }
}

// One k-tile of wgmma for the warpgroup: acc[u] += A (fragments a, 64
// columns x 64 k) x the activation tile at shared address `act` (instruction
// u reads tokens kInstN u.., whole swizzle atoms in; step s at k = 16 s),
// committed as one group. The caller waits for the group before it writes
// `a` again.
template <typename T, int kBN>
__device__ __forceinline__ void mma_k_tile(
    float (&acc)[TokenTile<kBN>::kSub][TokenTile<kBN>::kAcc],
    const uint32_t (&a)[layout::kSteps][4], uint32_t act) {
  using S = TokenTile<kBN>;
#pragma unroll
  for (int u = 0; u < S::kSub; ++u) sm90::fence_operands(acc[u]);
  // One descriptor built per k-tile; the others are constant offsets of it.
  const uint64_t desc = sm90::sw128_kmajor_desc(act);
  sm90::wgmma_fence();
#pragma unroll
  for (int s = 0; s < layout::kSteps; ++s)
#pragma unroll
    for (int u = 0; u < S::kSub; ++u) {
      const uint32_t offset =
          u * S::kInstN * sm90::kSwizzleRowBytes + s * 16 * sizeof(T);
      sm90::wgmma_rs<T, S::kInstN>(acc[u], a[s],
                                   sm90::sw128_desc_advance(desc, offset));
    }
  sm90::wgmma_commit();
}

}  // namespace vllm_myops::w4a16::wgmma::tile
