// SPDX-License-Identifier: Apache-2.0
//
// The dequant kernel of the large-M path ("dequant": W to a's dtype, then
// cuBLAS): W[k, n] = T((q - z) * s) for k < K, n < N, from b_packed. One
// block per 64x64 tile: its 512 words go to shared memory with one
// coalesced 16-byte load per thread. A thread then writes runs of 8 columns
// of one row (one 16-byte store; 8 threads cover a row of the tile): the 8
// codes of a run sit in 8 words 16 apart at one nibble position
// (cuda/w4a16_layout.cuh), so the slot is computed once per run and the
// scales and zeros of the run are one 16-byte load each. The pass is bound
// by writing W (4x the bytes it reads). It rounds W as the tensor-core
// paths do: (q - z) exact, one product rounded to T.
#pragma once

#include <cstdint>

#include "cuda/dispatch_utils.cuh"
#include "quantization/w4a16/cuda/w4a16_layout.cuh"

namespace vllm_myops::w4a16::dequant {

namespace layout = cuda_layout;

constexpr int kDequantThreads = 128;
constexpr int kRunsPerTile = layout::kTileK * layout::kTileN / 8;
static_assert(kDequantThreads * 4 == layout::kTileWords, "a word quad each");

template <typename T>
__device__ __forceinline__ void load_run(const T* __restrict__ src, int n0,
                                         int n_size, bool vector_ok,
                                         float (&v)[8]) {
  if (vector_ok) {
    alignas(16) T tmp[8];
    *reinterpret_cast<uint4*>(tmp) = __ldg(reinterpret_cast<const uint4*>(src));
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = cuda::to_float(tmp[i]);
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      v[i] = n0 + i < n_size ? cuda::to_float(src[i]) : 0.f;
    }
  }
}

// Grid (k-tile, n-tile - nt0): block (x, y) dequantizes tile (nt0 + y, x);
// the launcher covers the whole weight (nt0 = 0). groups_aligned16: scales
// and zeros are 16-byte aligned (row starts too when N % 8 == 0).
template <typename T>
__global__ void __launch_bounds__(kDequantThreads)
    w4a16_dequant_kernel(const uint4* __restrict__ b,
                         const T* __restrict__ scales,
                         const T* __restrict__ zeros, T* __restrict__ w,
                         int k_size, int n_size, int k_tiles, int group_size,
                         bool groups_aligned16, int nt0) {
  __shared__ uint4 tile_quads[layout::kTileWords / 4];
  const int kt = blockIdx.x, nt = nt0 + static_cast<int>(blockIdx.y);
  tile_quads[threadIdx.x] =
      b[(static_cast<int64_t>(nt) * k_tiles + kt) * (layout::kTileWords / 4) +
        threadIdx.x];
  __syncthreads();
  const uint32_t* words = reinterpret_cast<const uint32_t*>(tile_quads);

  for (int run = threadIdx.x; run < kRunsPerTile; run += kDequantThreads) {
    const int kr = run / 8, c = (run % 8) * 8;  // row, first column in tile
    const int k = kt * layout::kTileK + kr;
    const int n0 = nt * layout::kTileN + c;
    if (k >= k_size || n0 >= n_size) continue;
    // 16-byte accesses need N % 8 == 0 (every row start aligned) and a
    // whole run inside N.
    const bool vector_ok = n_size % 8 == 0 && n0 + 8 <= n_size;
    const int64_t g_off = static_cast<int64_t>(k / group_size) * n_size + n0;
    float s[8], z[8];
    load_run(scales + g_off, n0, n_size, vector_ok && groups_aligned16, s);
    if (zeros != nullptr) {
      load_run(zeros + g_off, n0, n_size, vector_ok && groups_aligned16, z);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) z[i] = 8.f;
    }
    const layout::TileSlot slot = layout::slot_of(kr, c);  // column c + i:
    const int shift = 4 * slot.nibble;                     // word + 16 i
    alignas(16) T vals[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t q = (words[slot.word + 16 * i] >> shift) & 0xFu;
      // (q - z) is exact; one product rounded to T, as the mma paths do.
      vals[i] = cuda::from_float<T>((static_cast<float>(q) - z[i]) * s[i]);
    }
    T* dst = w + static_cast<int64_t>(k) * n_size + n0;
    if (vector_ok) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(vals);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if (n0 + i < n_size) dst[i] = vals[i];
      }
    }
  }
}

}  // namespace vllm_myops::w4a16::dequant
