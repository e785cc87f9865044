// SPDX-License-Identifier: Apache-2.0
//
// Online softmax of the CUDA paged-attention kernels, fp32 in the exp2
// domain (scale * log2 e folded into the scores): the exp2 and quad
// reductions, and one KV tile's step (mask, running max m and sum l,
// accumulator rescale, S -> P in place) for each row-tile shape. l holds
// this thread's columns; the caller quad-sums it at the end.
#pragma once

#include <cstdint>

namespace vllm_myops::attention_cuda {

// 2^x (ex2.approx, ~2 ulp; 2^-inf = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// One m16 row tile (decode_split, prefill_m64; C: M16Traits): S (kSubN
// tokens from position pos0) scaled by scale_log2, masked where masked is
// set (position > lim[hr] of the thread's row lane / 4 + hr * 8), then the
// online softmax update of (m, l, acc); S holds P afterwards.
template <typename C>
__device__ __forceinline__ void online_softmax_m16(
    float (&sc)[C::kNB][4], float (&m)[2], float (&l)[2],
    float (&acc)[C::kDB][4], float scale_log2, bool masked, int pos0,
    const int (&lim)[2], int lane) {
#pragma unroll
  for (int j = 0; j < C::kNB; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float v = sc[j][e] * scale_log2;
      if (masked) {
        const int pos = pos0 + j * 8 + (lane % 4) * 2 + (e & 1);
        if (pos > lim[e / 2]) v = -INFINITY;
      }
      sc[j][e] = v;
    }
  }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < C::kNB; ++j)
      mx = fmaxf(mx, fmaxf(sc[j][2 * hr], sc[j][2 * hr + 1]));
    mx = quad_max(mx);
    const float m_new = fmaxf(m[hr], mx);
    // A row with nothing seen yet keeps m = -inf: subtract 0 then, so
    // exp2(-inf) = 0 and never exp2(-inf + inf).
    const float m_use = m_new == -INFINITY ? 0.f : m_new;
    const float alpha = fast_exp2(m[hr] - m_use);
    m[hr] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < C::kNB; ++j) {
      sc[j][2 * hr] = fast_exp2(sc[j][2 * hr] - m_use);
      sc[j][2 * hr + 1] = fast_exp2(sc[j][2 * hr + 1] - m_use);
      sum += sc[j][2 * hr] + sc[j][2 * hr + 1];
    }
    l[hr] = l[hr] * alpha + sum;
#pragma unroll
    for (int j = 0; j < C::kDB; ++j) {
      acc[j][2 * hr] *= alpha;
      acc[j][2 * hr + 1] *= alpha;
    }
  }
}

// Two m16 row tiles per warp (prefill_m128; C: PrefillM128Traits), rows
// from wrow (the warp's first row in the sequence), S of kTileN tokens from
// pos0. m is kept in raw q . k units and the scale folded into one FFMA per
// element, exp2(s * scale_log2 - round(m * scale_log2)): the max of the raw
// scores is the max of the scaled ones for scale > 0 only (the host sends
// other scales to prefill_m64). Every row sees position 0 in tile 0, which
// every warp with rows computes, so m is finite from then on and masked
// scores (-inf) give exp2(-inf) = 0; alpha of tile 0 is exp2(-inf) = 0.
// row_lim(rg): the last position row rg may see; masked: mask S by it.
template <typename C, typename RowLim>
__device__ __forceinline__ void online_softmax_m128(
    float (&sc)[C::kMT][C::kNB][4], float (&m)[2 * C::kMT],
    float (&l)[2 * C::kMT], float (&acc)[C::kMT][C::kDB][4], float sl,
    bool masked, int pos0, int wrow, int lane_, const RowLim& row_lim) {
#pragma unroll
  for (int mi = 0; mi < C::kMT; ++mi) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int rr = mi * 2 + hr;
      if (masked) {
        const int lim = row_lim(wrow + mi * 16 + lane_ / 4 + hr * 8);
#pragma unroll
        for (int j = 0; j < C::kNB; ++j) {
          const int pos = pos0 + j * 8 + (lane_ % 4) * 2;
          if (pos > lim) sc[mi][j][2 * hr] = -INFINITY;
          if (pos + 1 > lim) sc[mi][j][2 * hr + 1] = -INFINITY;
        }
      }
      float mx = m[rr];
#pragma unroll
      for (int j = 0; j < C::kNB; ++j)
        mx = fmaxf(mx, fmaxf(sc[mi][j][2 * hr], sc[mi][j][2 * hr + 1]));
      mx = quad_max(mx);
      // The offsets as rounded products (no contraction into an FFMA):
      // alpha rescales the old terms by exactly the offset they were
      // taken at (at |q.k| * scale ~ 1e7 a rounding is 0.5 in log2).
      const float ms = __fmul_rn(mx, sl);
      const float alpha = fast_exp2(__fmul_rn(m[rr], sl) - ms);
      m[rr] = mx;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < C::kNB; ++j) {
        sc[mi][j][2 * hr] = fast_exp2(fmaf(sc[mi][j][2 * hr], sl, -ms));
        sc[mi][j][2 * hr + 1] = fast_exp2(fmaf(sc[mi][j][2 * hr + 1], sl, -ms));
        sum += sc[mi][j][2 * hr] + sc[mi][j][2 * hr + 1];
      }
      l[rr] = l[rr] * alpha + sum;
#pragma unroll
      for (int j = 0; j < C::kDB; ++j) {
        acc[mi][j][2 * hr] *= alpha;
        acc[mi][j][2 * hr + 1] *= alpha;
      }
    }
  }
}

}  // namespace vllm_myops::attention_cuda
