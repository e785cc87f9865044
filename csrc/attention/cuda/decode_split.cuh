// SPDX-License-Identifier: Apache-2.0
//
// decode_split: paged_attention's decode kernel (grid B x H_kv x splits):
// rows of q_len == 1 sequences only (other CTAs exit at once), G <= 16 rows
// in one m16 tile. The context is split into `splits` ranges of
// split_tokens (flash-decoding; chosen on the host, plan.cuh); inside a CTA
// the 4 warps take 16-token quarters of each 64-token tile with their own
// (m, l, acc) (mainloop_m16.cuh), merged in shared memory at the end. A
// sequence that fills one split: the CTA writes out. Several: each writes
// an fp32 partial (acc, m, l), counts itself on a per-(b, h) counter, and
// the last to finish merges all splits in split order (deterministic),
// writes out and stores the counter's 0 back (persistent counters, no
// memset per call: cuda/split_counters.h): one launch, no combine
// kernel, no memset node.
#pragma once

#include <cstdint>

#include "attention/cuda/mainloop_m16.cuh"
#include "attention/cuda/online_softmax.cuh"
#include "attention/cuda/params.cuh"
#include "attention/cuda/traits.cuh"
#include "cuda/mma_utils.cuh"

namespace vllm_myops::attention_cuda {

// Merges the 4 warps' token quarters (in the K/V stages of smem). One split
// of the sequence: writes out; several: this split's fp32 partial. Returns
// the number of splits the sequence fills.
template <typename T, int D>
__device__ __forceinline__ int decode_merge_warps(
    const Params& p, unsigned char* smem, const M16Cta& c, const float (&m)[2],
    const float (&l)[2], const float (&acc)[M16Traits<D, true>::kDB][4]) {
  using C = M16Traits<D, true>;
  const int tid = c.tid, warp = c.warp, lane = c.lane;
  const int G = c.G;
  const SeqInfo& s = c.s;
  // Layout: o[warp][row][D] fp32, then m[warp][row], l[warp][row].
  float* red_o = reinterpret_cast<float*>(smem);
  float* red_m = red_o + kWarps * 16 * D;
  float* red_l = red_m + kWarps * 16;
  __syncthreads();  // the warps ran apart: all past their last ldmatrix
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int r = lane / 4 + hr * 8;
    float* o = red_o + (warp * 16 + r) * D + (lane % 4) * 2;
#pragma unroll
    for (int j = 0; j < C::kDB; ++j) {
      *reinterpret_cast<float2*>(o + j * 8) =
          make_float2(acc[j][2 * hr], acc[j][2 * hr + 1]);
    }
    if (lane % 4 == 0) {
      red_m[warp * 16 + r] = m[hr];
      red_l[warp * 16 + r] = l[hr];
    }
  }
  __syncthreads();
  T* out = static_cast<T*>(p.out);
  const int hq0 = c.h * G;
  const int64_t part_row0 = (int64_t(c.b) * p.num_kv_heads * G + hq0);
  // Splits this sequence fills (>= 1: kv_begin < seq_len in the prologue);
  // one writes the output itself.
  const int n =
      min(p.splits, (s.seq_len + p.split_tokens - 1) / p.split_tokens);
  for (int idx = tid; idx < G * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, red_m[w * 16 + r]);
    float o = 0.f, sum = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = red_m[w * 16 + r];
      const float cw = mw == -INFINITY ? 0.f : fast_exp2(mw - mx);
      o += red_o[(w * 16 + r) * D + d] * cw;
      sum += red_l[w * 16 + r] * cw;
    }
    if (n == 1) {
      out[int64_t(s.q0) * p.out_s0 + int64_t(hq0 + r) * p.out_s1 + d] =
          tc::from_float<T>(sum > 0.f ? o / sum : 0.f);
    } else {
      const int64_t prow = (part_row0 + r) * p.splits + blockIdx.z;
      p.part_o[prow * D + d] = o;
      if (d == 0) p.part_ml[prow] = make_float2(mx, sum);
    }
  }
  return n;
}

// Fused combine: the last of the n splits of (b, h) to finish merges all.
// Release: this CTA's partials are visible device-wide before its count
// (the threadFenceReduction pattern); the last CTA reads them through L2
// (__ldcg) and sums in split order, so the result does not depend on
// which CTA came last. The last one also stores the counter's 0 back:
// every split of (b, h) has counted by then, and the next launch that
// uses the counter starts after this one ends (cuda/split_counters.h).
template <typename T, int D>
__device__ __forceinline__ void decode_combine_splits(const Params& p,
                                                      const M16Cta& c, int n) {
  const int tid = c.tid, b = c.b, h = c.h;
  const int G = c.G;
  const SeqInfo& s = c.s;
  T* out = static_cast<T*>(p.out);
  const int hq0 = h * G;
  const int64_t part_row0 = (int64_t(b) * p.num_kv_heads * G + hq0);
  __shared__ int last_split;
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    int* counter = p.counters + int64_t(b) * p.num_kv_heads + h;
    last_split = atomicAdd(counter, 1) == n - 1;
    if (last_split) *counter = 0;
  }
  __syncthreads();
  if (!last_split) return;
  __threadfence();
  // One pass, one float4 of one row per thread: each thread walks the
  // row's splits in split order with a running max (online softmax), so
  // the (m, l) and partial loads of up to 16 splits are in flight at once
  // (unrolled; they do not depend on the sums) and no thread waits on a
  // barrier or on another thread's coefficients: one L2 round trip per 16
  // splits. (Before: the (m, l) loads, a barrier, G threads walking all
  // splits' exponentials in turn, a barrier, then the partial loads.)
  // Same fixed order every launch: deterministic. D = 64 takes 8 splits
  // per batch: 16 raised its registers from 96 to 128 (5 -> 4 CTAs/SM).
  constexpr int kQuads = D / 4;
  constexpr int kBatch = D == 64 ? 8 : 16;
  for (int idx = tid; idx < G * kQuads; idx += kThreads) {
    const int r = idx / kQuads, d = (idx % kQuads) * 4;
    const int64_t prow = (part_row0 + r) * p.splits;
    const float4* src =
        reinterpret_cast<const float4*>(p.part_o + prow * D + d);
    float mx = -INFINITY, sum = 0.f;
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int k0 = 0; k0 < n; k0 += kBatch) {
#pragma unroll
      for (int kk = 0; kk < kBatch; ++kk) {
        // Past the last split: split n - 1 reloaded at weight 0, so the
        // batch's loads have no branch between them.
        const int k = k0 + kk;
        const int kc = min(k, n - 1);
        const float2 ml = __ldcg(p.part_ml + prow + kc);
        const float4 v = __ldcg(src + kc * kQuads);
        const float mk = k < n ? ml.x : -INFINITY;
        const float m_new = fmaxf(mx, mk);
        // Splits with nothing seen (m = -inf) weigh 0, never exp2(nan).
        const float c_old = mx == -INFINITY ? 0.f : fast_exp2(mx - m_new);
        const float c_k = mk == -INFINITY ? 0.f : fast_exp2(mk - m_new);
        mx = m_new;
        sum = sum * c_old + ml.y * c_k;
        o.x = o.x * c_old + v.x * c_k;
        o.y = o.y * c_old + v.y * c_k;
        o.z = o.z * c_old + v.z * c_k;
        o.w = o.w * c_old + v.w * c_k;
      }
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    uint32_t* dst = reinterpret_cast<uint32_t*>(
        out + int64_t(s.q0) * p.out_s0 + int64_t(hq0 + r) * p.out_s1 + d);
    dst[0] = tc::pack2<T>(o.x * inv, o.y * inv);
    dst[1] = tc::pack2<T>(o.z * inv, o.w * inv);
  }
}

// Grid (B, H_kv, splits).
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, (M16Traits<D, true>::kMinCtas))
    decode_split_kernel(const Params p) {
  using C = M16Traits<D, true>;
  extern __shared__ __align__(128) unsigned char smem[];
  M16Cta c;
  if (!m16_prologue<D, true>(p, c)) return;
  float m[2], l[2], acc[C::kDB][4];
  m16_mainloop<T, D, true>(p, smem, c, m, l, acc);
  const int n = decode_merge_warps<T, D>(p, smem, c, m, l, acc);
  if (n == 1) return;
  decode_combine_splits<T, D>(p, c, n);
}

}  // namespace vllm_myops::attention_cuda
