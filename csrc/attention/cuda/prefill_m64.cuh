// SPDX-License-Identifier: Apache-2.0
//
// prefill_m64: paged_attention's prefill kernel with 64 rows per CTA, 16
// per warp (one m16 tile), every warp against all tokens of a K/V tile
// (64; 32 at D = 256, S in 16-token halves), KV range [0, causal limit of
// the tile's last row); the causal / tail mask only on tiles that cross a
// warp's first-row limit. Row tiles run longest first. Any head dim; the
// prologue and mainloop are decode_split's (mainloop_m16.cuh).
#pragma once

#include <cstdint>

#include "attention/cuda/mainloop_m16.cuh"
#include "attention/cuda/params.cuh"
#include "attention/cuda/traits.cuh"
#include "cuda/mma_utils.cuh"

namespace vllm_myops::attention_cuda {

// Epilogue: normalise, round once, 4-byte stores of the thread's two rows.
template <typename T, int D>
__device__ __forceinline__ void prefill_m64_store(
    const Params& p, const M16Cta& c, const float (&l)[2],
    const float (&acc)[M16Traits<D, false>::kDB][4]) {
  using C = M16Traits<D, false>;
  const int G = c.G, lane = c.lane;
  const int warp_row0 = c.warp * 16;
  T* out = static_cast<T*>(p.out);
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int rg = c.row0 + warp_row0 + lane / 4 + hr * 8;
    if (rg >= c.rows_total) continue;
    const int i = rg / G, g = rg - (rg / G) * G;
    T* o = out + int64_t(c.s.q0 + i) * p.out_s0 +
           int64_t(c.h * G + g) * p.out_s1 + (lane % 4) * 2;
    const float inv = l[hr] > 0.f ? 1.f / l[hr] : 0.f;
#pragma unroll
    for (int j = 0; j < C::kDB; ++j) {
      *reinterpret_cast<uint32_t*>(o + j * 8) =
          tc::pack2<T>(acc[j][2 * hr] * inv, acc[j][2 * hr + 1] * inv);
    }
  }
}

// Grid (B, H_kv, row tiles of kPrefillM64Rows).
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, (M16Traits<D, false>::kMinCtas))
    prefill_m64_kernel(const Params p) {
  using C = M16Traits<D, false>;
  extern __shared__ __align__(128) unsigned char smem[];
  M16Cta c;
  if (!m16_prologue<D, false>(p, c)) return;
  float m[2], l[2], acc[C::kDB][4];
  m16_mainloop<T, D, false>(p, smem, c, m, l, acc);
  prefill_m64_store<T, D>(p, c, l, acc);
}

}  // namespace vllm_myops::attention_cuda
