// SPDX-License-Identifier: Apache-2.0
//
// prefill_wgmma's online softmax on the wgmma accumulator layout, and S -> P
// into the A fragments of the RS wgmma of O += P V.
//
// Layouts (PTX, "wgmma .m64nNk16 register fragments"; warp w of the
// warpgroup holds rows 16 w .. 16 w + 15, lane = 4 g + t):
// * accumulator d[4 j + r]: row g + 8 (r / 2), column 8 j + 2 t + (r % 2);
// * A from registers, k16 step: a[i] holds (row g + 8 (i % 2), k 2 t + 8
//   (i / 2)) and k + 1, low half first.
// So a thread owns two rows (hr = 0, 1: rows g and g + 8) of S and of O,
// and the 4 lanes of a quad share a row: row max and sum are quad
// reductions, as in the mma.sync kernels.
#pragma once

#include <cstdint>

#include "attention/cuda/online_softmax.cuh"
#include "cuda/mma_utils.cuh"

namespace vllm_myops::attention_cuda {

// Accumulator index of the element the RS A fragment of k16 step kk holds
// in register i, half h (0: low): S[row g + 8 (i % 2)][16 kk + 8 (i / 2) +
// 2 t + h] is accumulator 4 (2 kk + i / 2) + 2 (i % 2) + h.
constexpr int p_source(int kk, int i, int h) {
  return 4 * (2 * kk + i / 2) + 2 * (i % 2) + h;
}

// The layouts above, for every lane, step and register: p_source gives the
// accumulator of the same (row, column).
constexpr bool p_fragment_matches_accumulator(int n_tokens) {
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int kk = 0; kk < n_tokens / 16; ++kk)
      for (int i = 0; i < 4; ++i)
        for (int h = 0; h < 2; ++h) {
          const int a_row = g + 8 * (i % 2);
          const int a_col = 16 * kk + 2 * t + 8 * (i / 2) + h;
          const int s = p_source(kk, i, h);
          const int j = s / 4, r = s % 4;
          if (g + 8 * (r / 2) != a_row) return false;
          if (8 * j + 2 * t + (r % 2) != a_col) return false;
          if (s >= n_tokens / 2) return false;
        }
  }
  return true;
}
static_assert(p_fragment_matches_accumulator(128),
              "P fragments do not match the S accumulator layout");

// One K/V tile's online-softmax step for a thread's two rows, in place and
// without touching O: S (kN tokens from position pos0, raw q . k), masked
// where `masked` (position > lim[hr]), then (m, l) updated, alpha[hr] = the
// factor the row's earlier O and l terms take (l is rescaled here, O by
// wgmma_rescale_o), and S turned into fp32 P in the same registers
// (wgmma_pack_p rounds it into RS A fragments; wgmma_softmax_step runs
// the three). As online_softmax_m128: m in raw q . k units, the scale
// folded into one FFMA per element (scale > 0 only: the host sends other
// scales to prefill_m64); every row sees position 0 in its first tile, so
// m is finite from then on and alpha of the first tile is exp2(-inf) = 0.
// l holds this thread's columns (the caller quad-sums).
template <int kN>
__device__ __forceinline__ void wgmma_softmax_p(float (&sc)[kN / 2],
                                                float (&m)[2], float (&l)[2],
                                                float (&alpha)[2], float sl,
                                                bool masked, int pos0,
                                                const int (&lim)[2], int t) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    if (masked) {
#pragma unroll
      for (int j = 0; j < kN / 8; ++j) {
        const int pos = pos0 + 8 * j + 2 * t;
        if (pos > lim[hr]) sc[4 * j + 2 * hr] = -INFINITY;
        if (pos + 1 > lim[hr]) sc[4 * j + 2 * hr + 1] = -INFINITY;
      }
    }
    float mx = m[hr];
#pragma unroll
    for (int j = 0; j < kN / 8; ++j)
      mx = fmaxf(mx, fmaxf(sc[4 * j + 2 * hr], sc[4 * j + 2 * hr + 1]));
    mx = quad_max(mx);
    // Rounded products, no FFMA contraction: alpha rescales the old terms
    // by exactly the offset they were taken at.
    const float ms = __fmul_rn(mx, sl);
    alpha[hr] = fast_exp2(__fmul_rn(m[hr], sl) - ms);
    m[hr] = mx;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) {
      sc[4 * j + 2 * hr] = fast_exp2(fmaf(sc[4 * j + 2 * hr], sl, -ms));
      sc[4 * j + 2 * hr + 1] = fast_exp2(fmaf(sc[4 * j + 2 * hr + 1], sl, -ms));
      sum += sc[4 * j + 2 * hr] + sc[4 * j + 2 * hr + 1];
    }
    l[hr] = l[hr] * alpha[hr] + sum;
  }
}

// P (fp32, in the S accumulators) rounded to T into the RS A fragments.
template <typename T, int kN>
__device__ __forceinline__ void wgmma_pack_p(const float (&sc)[kN / 2],
                                             uint32_t (&pa)[kN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kN / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      pa[kk][i] = tc::pack2<T>(sc[p_source(kk, i, 0)], sc[p_source(kk, i, 1)]);
}

// O's rows rescaled by the alpha of wgmma_softmax_p (before the P V of the
// same tile accumulates into O; no wgmma may be writing O meanwhile).
template <int kOAcc>
__device__ __forceinline__ void wgmma_rescale_o(float (&o)[kOAcc],
                                                const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < kOAcc / 4; ++j) {
    o[4 * j] *= alpha[0];
    o[4 * j + 1] *= alpha[0];
    o[4 * j + 2] *= alpha[1];
    o[4 * j + 3] *= alpha[1];
  }
}

// The three above: the mainloop's step (O is not in flight).
template <typename T, int kN, int kOAcc>
__device__ __forceinline__ void wgmma_softmax_step(
    float (&sc)[kN / 2], float (&m)[2], float (&l)[2], float (&o)[kOAcc],
    uint32_t (&pa)[kN / 16][4], float sl, bool masked, int pos0,
    const int (&lim)[2], int t) {
  float alpha[2];
  wgmma_softmax_p<kN>(sc, m, l, alpha, sl, masked, pos0, lim, t);
  wgmma_pack_p<T, kN>(sc, pa);
  wgmma_rescale_o<kOAcc>(o, alpha);
}

}  // namespace vllm_myops::attention_cuda
