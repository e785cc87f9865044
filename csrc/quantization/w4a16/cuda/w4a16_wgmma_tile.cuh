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
// - Scales and zeros ride one k-tile ahead in registers (GroupRaw, coalesced
//   loads) and reach the two rows of a lane's fragment by shuffles.
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
#include "quantization/w4a16/cuda/w4a16_tc_gemm.cuh"

namespace vllm_myops::w4a16::wgmma::tile {

namespace layout = cuda_layout;
using dev::GemmArgs;
using dev::GroupRaw;

constexpr int kTileBytes = layout::kTileWords * 4;  // one packed n-tile k-tile
static_assert(layout::kTileK * 2 == sm90::kSwizzleRowBytes,
              "a k-tile's activation row is one 128-byte swizzle row");

// The wgmma shape of a token tile of kBN tokens (wgmma's N side): one
// instruction of N = kBN up to 64, two of 64 at 128. The activation tile is
// kBN rows of 64 k in the 128-byte swizzle (the K-major B operand).
template <int kBN>
struct TokenTile {
  static constexpr int kInstN = kBN < 64 ? kBN : 64;  // wgmma N
  static constexpr int kSub = kBN / kInstN;           // wgmma per k16 step
  static constexpr int kAcc = kInstN / 2;  // fp32 accumulators per wgmma
  static constexpr int kActBytes = kBN * sm90::kSwizzleRowBytes;
  static_assert(kActBytes % sm90::kSwizzleAtomBytes == 0, "whole atoms");
};

// Scale and base + zero of the two rows of a lane's A fragment (columns
// 16 w + g and 16 w + 8 + g of the n-tile), each as a pair of equal halves.
struct RowGroups {
  uint32_t zb[2];
  uint32_t s[2];
};

// From the raw pairs of load_group (lane c / 2 holds column c). Whole warp.
template <typename T>
__device__ __forceinline__ RowGroups row_groups(const GemmArgs& p,
                                                const GroupRaw& gr, int warp,
                                                int lane) {
  constexpr uint32_t kBaseBits = dev::MmaType<T>::kExponent & 0xffffu;
  const int g = lane / 4;
  const int half_shift = 16 * (g % 2);
  RowGroups out;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int src = 8 * warp + 4 * h + g / 2;
    const uint32_t sv =
        (__shfl_sync(0xffffffffu, gr.s2, src) >> half_shift) & 0xffffu;
    out.s[h] = sv | (sv << 16);
    // Zero codes are stored as T; base + z is exact in T's bits.
    uint32_t zcode = 8;
    if (p.zeros != nullptr) {
      const uint32_t zv =
          (__shfl_sync(0xffffffffu, gr.z2, src) >> half_shift) & 0xffffu;
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
// of the n-tile, token 64 u + 8 j + 2 t + (r % 2) of the tile.
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
        const int tok = tok0 + 64 * u + 8 * j + 2 * t + (r % 2);
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

// k-tile kt's A fragments from `words` (the warpgroup's packed weight tile
// in shared memory): the scales and zeros of `gr` (k-tile kt's groups) to
// rows, then gr refilled with k-tile kt + 1's when `load_next` (the loads
// ride under the wgmma in flight).
template <typename T>
__device__ __forceinline__ void dequant_tile(const GemmArgs& p,
                                             const uint32_t* words, int warp,
                                             int lane, int n0, int kt,
                                             bool load_next, GroupRaw (&gr)[2],
                                             uint32_t (&a)[layout::kSteps][4]) {
  // Groups of 64 rows or more cover the whole k-tile (load_tile_groups
  // then holds one group twice): convert it once.
  const RowGroups rg0 = row_groups<T>(p, gr[0], warp, lane);
  const RowGroups rg[2] = {rg0, p.group_size < layout::kTileK
                                    ? row_groups<T>(p, gr[1], warp, lane)
                                    : rg0};
  if (load_next) {
    w4a16::tc_gemm::load_tile_groups<2>(p, kt + 1, 0, n0, lane, gr);
  }
#pragma unroll
  for (int s = 0; s < layout::kSteps; ++s) {
    dequant_step<T>(words[s * 128 + lane * 4 + warp], rg[s / 2], a[s]);
  }
}

// One k-tile of wgmma for the warpgroup: acc[u] += A (fragments a, 64
// columns x 64 k) x the activation tile at shared address `act` (tokens
// 64 u.. start 64 rows, i.e. 8 swizzle atoms, in; step s at k = 16 s),
// committed as one group. The caller fences the operands before and waits.
template <typename T, int kBN>
__device__ __forceinline__ void mma_k_tile(
    float (&acc)[TokenTile<kBN>::kSub][TokenTile<kBN>::kAcc],
    const uint32_t (&a)[layout::kSteps][4], uint32_t act) {
  using S = TokenTile<kBN>;
#pragma unroll
  for (int u = 0; u < S::kSub; ++u) sm90::fence_operands(acc[u]);
  sm90::wgmma_fence();
#pragma unroll
  for (int s = 0; s < layout::kSteps; ++s)
#pragma unroll
    for (int u = 0; u < S::kSub; ++u) {
      const uint32_t addr =
          act + u * 64 * sm90::kSwizzleRowBytes + s * 16 * sizeof(T);
      sm90::wgmma_rs<T, S::kInstN>(acc[u], a[s], sm90::sw128_kmajor_desc(addr));
    }
  sm90::wgmma_commit();
}

}  // namespace vllm_myops::w4a16::wgmma::tile
