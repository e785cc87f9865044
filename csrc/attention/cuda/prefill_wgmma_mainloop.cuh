// SPDX-License-Identifier: Apache-2.0
//
// prefill_wgmma's consumer mainloop: per tile S = Q K^T, softmax, P V in
// series, each waited for; and its pieces (the GEMM issues, the tile's
// causal mask, a stage's wait and release).
//
// A consumer warpgroup computes tiles [0, n_mine) (prefill_wgmma.cuh:
// the tile holding its last row's limit is its last). Pipeline contract
// (cuda/sm90_pipeline.cuh): a tile u lives in stage u % kStages with `full`
// parity (u / kStages) & 1; each of the warpgroup's 4 warps arrives once on
// the stage's `empty` per tile, after every wgmma of the warpgroup that
// reads the stage completed and after the tile's `full` was waited for
// (that keeps each arrival in the phase of its own tile).
#pragma once

#include <cstdint>

#include "attention/cuda/params.cuh"
#include "attention/cuda/prefill_wgmma_loader.cuh"
#include "attention/cuda/prefill_wgmma_softmax.cuh"
#include "attention/cuda/prefill_wgmma_traits.cuh"
#include "cuda/sm90_pipeline.cuh"
#include "cuda/sm90_utils.cuh"

namespace vllm_myops::attention_cuda {

// The last key position row rg of the sequence may see; rows past
// rows_total (never written) see the CTA's whole range.
__device__ __forceinline__ int wgmma_row_lim(const WgmmaCtaInfo& ci, int G,
                                             int rg) {
  return rg >= ci.rows_total ? ci.kv_end - 1 : ci.ctx0 + rg / G;
}

// The tiles consumer warpgroup wg computes, [0, n): up to the tile holding
// its last row's limit; 0 if all its rows are past rows_total.
template <int D>
__device__ __forceinline__ int wgmma_tiles_of(const WgmmaCtaInfo& ci, int G,
                                              int wg) {
  using C = PrefillWgmmaTraits<D>;
  const int wg_row0 = ci.row0 + wg * C::kWgRows;
  if (wg_row0 >= ci.rows_total) return 0;
  const int last = min(wg_row0 + C::kWgRows, ci.rows_total) - 1;
  return wgmma_row_lim(ci, G, last) / C::kTileN + 1;
}

// What a consumer warpgroup's mainloop needs beside its accumulators: the
// CTA, the shared-memory bases, the barriers and the thread's place.
struct WgmmaConsumer {
  const Params* p;
  const WgmmaCtaInfo* ci;
  uint32_t q_base, kv_base;
  uint64_t *full, *empty;
  int wg, warp, lane;
};

template <int D>
__device__ __forceinline__ uint32_t wgmma_stage(const WgmmaConsumer& c, int t) {
  using C = PrefillWgmmaTraits<D>;
  return c.kv_base + (t % C::kStages) * C::kStageBytes;
}

// Waits for tile t's `full`, then fences the cp.async writes (generic
// proxy) before the wgmma reads (async proxy).
template <int D>
__device__ __forceinline__ void wgmma_wait_tile(const WgmmaConsumer& c, int t) {
  using C = PrefillWgmmaTraits<D>;
  sm90::mbar_wait(&c.full[t % C::kStages], (t / C::kStages) & 1);
  sm90::fence_proxy_async_smem();
}

// The warp's arrival on tile t's `empty`: only after every wgmma of the
// warpgroup reading the stage completed (wgmma_wait) and tile t's `full`
// was waited for.
template <int D>
__device__ __forceinline__ void wgmma_release_tile(const WgmmaConsumer& c,
                                                   int t) {
  using C = PrefillWgmmaTraits<D>;
  if (c.lane == 0) sm90::mbar_arrive(&c.empty[t % C::kStages]);
}

// Whether tile t crosses the warpgroup's first row's limit (warpgroup-
// uniform), and then the limits of the thread's two rows.
template <int D>
__device__ __forceinline__ bool wgmma_tile_mask(const WgmmaConsumer& c, int t,
                                                int (&lim)[2]) {
  using C = PrefillWgmmaTraits<D>;
  const int G = c.p->group;
  const int wg_row0 = c.ci->row0 + c.wg * C::kWgRows;
  const bool masked =
      t * C::kTileN + C::kTileN - 1 > wgmma_row_lim(*c.ci, G, wg_row0);
  lim[0] = lim[1] = 0;
  if (masked) {
    const int r = wg_row0 + c.warp * 16 + c.lane / 4;
    lim[0] = wgmma_row_lim(*c.ci, G, r);
    lim[1] = wgmma_row_lim(*c.ci, G, r + 8);
  }
  return masked;
}

// S = Q K^T: warpgroup wg's 64 rows x the stage's kTileN tokens, issued and
// committed (the caller waits). Step 0 overwrites S (scale-d 0).
template <typename T, int D>
__device__ __forceinline__ void wgmma_qk(
    float (&sc)[PrefillWgmmaTraits<D>::kSAcc], uint32_t q_base, uint32_t stage,
    int wg) {
  using C = PrefillWgmmaTraits<D>;
  // One descriptor built per operand; the steps' are constant offsets.
  const uint64_t da0 = sm90::sw128_kmajor_desc(q_base + q_desc_start<D>(wg, 0));
  const uint64_t db0 = sm90::sw128_kmajor_desc(stage + k_desc_start<D>(0));
  sm90::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < C::kKS; ++ks) {
    const uint64_t da = sm90::sw128_desc_advance(
        da0, q_desc_start<D>(wg, ks) - q_desc_start<D>(wg, 0));
    const uint64_t db = sm90::sw128_desc_advance(db0, k_desc_start<D>(ks));
    if (ks == 0) {
      sm90::wgmma_ss<T, C::kTileN, false>(sc, da, db);
    } else {
      sm90::wgmma_ss<T, C::kTileN, true>(sc, da, db);
    }
  }
  sm90::wgmma_commit();
}

// O += P V over the stage's kTileN tokens, issued and committed.
template <typename T, int D>
__device__ __forceinline__ void wgmma_pv(
    float (&o)[PrefillWgmmaTraits<D>::kOAcc],
    const uint32_t (&pa)[PrefillWgmmaTraits<D>::kPS][4], uint32_t stage) {
  using C = PrefillWgmmaTraits<D>;
  constexpr int kInstAcc = C::kPvInstN / 2;
  const uint64_t dv0 =
      sm90::sw128_mnmajor_desc(stage + v_desc_start<D>(0, 0), C::kKvPanelBytes);
  sm90::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < C::kPS; ++kk)
#pragma unroll
    for (int inst = 0; inst < C::kPvInsts; ++inst) {
      float (&oi)[kInstAcc] =
          *reinterpret_cast<float (*)[kInstAcc]>(&o[inst * kInstAcc]);
      sm90::wgmma_rs_tb<T, C::kPvInstN>(
          oi, pa[kk],
          sm90::sw128_desc_advance(
              dv0, v_desc_start<D>(kk, inst) - v_desc_start<D>(0, 0)));
    }
  sm90::wgmma_commit();
}

// One tile t (already waited for) of the mainloop: S, softmax, P V,
// all complete on return (the stage may be released).
template <typename T, int D>
__device__ __forceinline__ void consume_tile(
    const WgmmaConsumer& c, int t, float (&m)[2], float (&l)[2],
    float (&o)[PrefillWgmmaTraits<D>::kOAcc]) {
  using C = PrefillWgmmaTraits<D>;
  const uint32_t stage = wgmma_stage<D>(c, t);
  float sc[C::kSAcc];
  wgmma_qk<T, D>(sc, c.q_base, stage, c.wg);
  sm90::wgmma_wait<0>();
  sm90::fence_operands(sc);
  int lim[2];
  const bool masked = wgmma_tile_mask<D>(c, t, lim);
  uint32_t pa[C::kPS][4];
  wgmma_softmax_step<T, C::kTileN, C::kOAcc>(
      sc, m, l, o, pa, c.p->scale_log2, masked, t * C::kTileN, lim, c.lane % 4);
  sm90::fence_operands(o);
  wgmma_pv<T, D>(o, pa, stage);
  sm90::wgmma_wait<0>();
  sm90::fence_operands(o);
#pragma unroll
  for (int kk = 0; kk < C::kPS; ++kk) sm90::fence_operands(pa[kk]);
}

// The mainloop over tiles [0, n_mine) (q_full already waited for).
template <typename T, int D>
__device__ __forceinline__ void prefill_wgmma_mainloop(
    const WgmmaConsumer& c, int n_mine, float (&m)[2], float (&l)[2],
    float (&o)[PrefillWgmmaTraits<D>::kOAcc]) {
  for (int t = 0; t < n_mine; ++t) {
    wgmma_wait_tile<D>(c, t);
    consume_tile<T, D>(c, t, m, l, o);
    wgmma_release_tile<D>(c, t);
  }
}

}  // namespace vllm_myops::attention_cuda
