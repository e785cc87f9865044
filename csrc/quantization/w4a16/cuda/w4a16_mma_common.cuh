// SPDX-License-Identifier: Apache-2.0
//
// Device helpers shared by the W4A16 tensor-core kernels (w4a16_gemm.cu and
// cuda/w4a16_tc_gemm.cuh): element types, the lop3 dequant of two codes into
// a T2, the kernel arguments, and the per-group scales / zeros of one 64-column
// layout tile broadcast to the mma B fragments.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/dispatch_utils.cuh"
#include "quantization/w4a16/cuda/w4a16_layout.cuh"

namespace vllm_myops::w4a16::dev {

namespace layout = cuda_layout;

// ---- Element types
// -------------------------------------------------------------
template <typename T>
struct MmaType;

template <>
struct MmaType<__half> {
  using T2 = __half2;
  static constexpr uint32_t kExponent = 0x64006400u;  // half2(1024, 1024)
};

template <>
struct MmaType<__nv_bfloat16> {
  using T2 = __nv_bfloat162;
  static constexpr uint32_t kExponent = 0x43004300u;  // bf162(128, 128)
};

template <typename T>
__device__ __forceinline__ T from_bits(uint16_t v) {
  if constexpr (std::is_same_v<T, __half>) {
    return __ushort_as_half(v);
  } else {
    return __ushort_as_bfloat16(v);
  }
}

template <typename T2>
__device__ __forceinline__ uint32_t as_u32(T2 v) {
  static_assert(sizeof(T2) == 4, "pair of 16-bit values");
  return *reinterpret_cast<uint32_t*>(&v);
}

template <typename T2>
__device__ __forceinline__ T2 as_t2(uint32_t v) {
  return *reinterpret_cast<T2*>(&v);
}

__device__ __forceinline__ uint32_t lop3_and_or(uint32_t a, uint32_t b,
                                                uint32_t c) {
  uint32_t r;
  // (a & b) | c: immLut (0xf0 & 0xcc) | 0xaa.
  asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

// Two codes of nibbles (r, r + 4) of q as base + q in a T2 (low half: r).
template <typename T, int kR>
__device__ __forceinline__ uint32_t codes_pair(uint32_t q) {
  return lop3_and_or(q >> (4 * kR), 0x000f000fu, MmaType<T>::kExponent);
}

// (x - zb) * s, with zb = base + z: W rounded once to T.
template <typename T>
__device__ __forceinline__ uint32_t dequant_pair(uint32_t x, uint32_t zb,
                                                 uint32_t s) {
  using T2 = typename MmaType<T>::T2;
  return as_u32(__hmul2(__hsub2(as_t2<T2>(x), as_t2<T2>(zb)), as_t2<T2>(s)));
}

__device__ __forceinline__ uint16_t load_u16(const void* base, int64_t i) {
  return __ldg(static_cast<const unsigned short*>(base) + i);
}

// ---- Kernel arguments
// ------------------------------------------------------------
struct GemmArgs {
  const void* a;  // [M, K] rows a_stride apart (elements)
  int64_t a_stride;
  const uint4* b;      // b_packed as 16-byte words
  const void* scales;  // [G, N]
  const void* zeros;   // [G, N] or nullptr (symmetric, zero 8)
  const void* bias;    // [N] or nullptr
  void* out;           // [M, N] (splits == 1)
  float* workspace;    // [splits, M, N] fp32 (splits > 1)
  int m, k, n;
  int group_size;  // rows per group (K for per-channel)
  int groups;
  int k_tiles;
  int kt_per_split;
  int splits;
  bool a_aligned4;  // every (row, even k) pair is a 4-byte aligned load
  // a 16-byte aligned, row stride and K multiples of 8: every 8-element run
  // of a row that starts at k % 8 == 0 is one 16-byte cp.async (tc kernel).
  bool a_aligned16;
};

// Elements k .. k + 7 of row `row` of a (0 past M and past K) as one
// 16-byte st.shared to `dst`: the activation chunk of rows that cannot be
// 16-byte copied (strided views, K % 8 != 0). Visible to the block after the
// barrier that precedes its use, like the cp.async bytes of aligned rows.
__device__ __forceinline__ void store_a_chunk_masked(const GemmArgs& p,
                                                     uint32_t dst, int row,
                                                     int k) {
  uint32_t v[4] = {0u, 0u, 0u, 0u};
  if (row < p.m) {
    const unsigned short* src = static_cast<const unsigned short*>(p.a) +
                                static_cast<int64_t>(row) * p.a_stride;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      if (k + e < p.k) {
        v[e / 2] |= static_cast<uint32_t>(__ldg(src + k + e)) << (16 * (e % 2));
      }
    }
  }
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst),
               "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
               : "memory");
}

// Scales and zeros of one group for the tile's 64 columns, as loaded: lane
// l holds columns 2l, 2l + 1 (4 registers, not the 16 that the 8 columns
// 8j + g a lane multiplies would take while in flight); group_pairs()
// redistributes them with shuffles once they have arrived.
struct GroupRaw {
  uint32_t s2;  // scales of columns 2l (low half) and 2l + 1
  uint32_t z2;  // zero codes, the same way (unused when symmetric)
};

__device__ __forceinline__ void load_group(const GemmArgs& p, int group, int n0,
                                           int lane, GroupRaw& gr) {
  const int64_t row = static_cast<int64_t>(group) * p.n;
  const int n = n0 + 2 * lane;
  // Columns past N: s = 0 (W = 0 there; never stored anyway).
  const auto pair = [&](const void* base) {
    const uint32_t lo = n < p.n ? load_u16(base, row + n) : 0u;
    const uint32_t hi = n + 1 < p.n ? load_u16(base, row + n + 1) : 0u;
    return lo | (hi << 16);
  };
  gr.s2 = pair(p.scales);
  gr.z2 = p.zeros != nullptr ? pair(p.zeros) : 0u;
}

// Broadcast pairs for the 8 n8 blocks j of a lane (column 8j + g, held by
// lane 4j + g / 2 as its half g % 2): zb = base + z, s. Whole warp.
template <typename T>
__device__ __forceinline__ void group_pairs(const GemmArgs& p,
                                            const GroupRaw& gr, int lane,
                                            uint32_t (&zb)[8],
                                            uint32_t (&s)[8]) {
  constexpr uint32_t kBaseBits = MmaType<T>::kExponent & 0xffffu;
  const int g = lane / 4;
  const int half_shift = 16 * (g % 2);
  const uint32_t s2 = gr.s2;
  const bool has_zeros = p.zeros != nullptr;
  const uint32_t z2 = gr.z2;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int src = 4 * j + g / 2;
    const uint32_t sv =
        (__shfl_sync(0xffffffffu, s2, src) >> half_shift) & 0xffffu;
    s[j] = sv | (sv << 16);
    // base + z in T's bits: the mantissa unit of base is 1, so adding the
    // integer code to the bits is exact (z in 0..15).
    uint32_t zcode = 8;
    if (has_zeros) {
      const uint32_t zv =
          (__shfl_sync(0xffffffffu, z2, src) >> half_shift) & 0xffffu;
      zcode = static_cast<uint32_t>(
          __float2int_rn(cuda::to_float(from_bits<T>(zv))));
    }
    const uint32_t zbits = kBaseBits + zcode;
    zb[j] = zbits | (zbits << 16);
  }
}

// Group of k16 step `step` of k-tile kt (clamped: padding rows past K may
// name group G).
__device__ __forceinline__ int group_of(const GemmArgs& p, int kt, int step) {
  const int k = kt * layout::kTileK + 16 * step;
  return min(k / p.group_size, p.groups - 1);
}

}  // namespace vllm_myops::w4a16::dev
