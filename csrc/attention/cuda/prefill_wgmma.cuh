// SPDX-License-Identifier: Apache-2.0
//
// prefill_wgmma: paged_attention's prefill kernel on Hopper wgmma (sm_90a
// only), D 64 and 128. Same rows, masks, clamps and outputs as prefill_m64
// and prefill_m128 (paged_attention.cu's file comment); the structure is
// FlashAttention-3's (hopper/ in the flash-attention repo), warp-specialized:
//
// * A CTA (384 threads) takes 128 rows r = i * G + g of one (sequence b, kv
//   head h), GQA-packed as prefill_m128. Warpgroup 0 is the producer
//   (prefill_wgmma_loader.cuh: Q once, then K/V tiles of 128 tokens by
//   cp.async from the block table into a kStages-deep full / empty mbarrier
//   pipeline), setmaxnreg'd down to kProducerRegs; warpgroups 1 and 2 are
//   consumers of 64 rows each (the wgmma M), up to kConsumerRegs.
// * Per tile, a consumer warpgroup: waits for the stage (`full`), S = Q K^T
//   as SS wgmma m64n128k16 (Q and K K-major in shared memory), waits;
//   online softmax in fp32 registers in the exp2 domain
//   (prefill_wgmma_softmax.cuh), P rounded to T straight into the RS A
//   fragments; O += P V as RS wgmma m64nDk16 with V MN-major (the
//   transpose-B bit; the V rows are the cache's token rows, no transposing
//   copy), waits; then each of its warps arrives on the stage's `empty`.
//   This first slice runs the two GEMMs and the softmax of a warpgroup in
//   series; the other warpgroup's work (and the producer's copies) overlap
//   it only through the warp schedulers (docs/attention/design.md: the
//   overlaps not built yet and what each is for).
// * Causal: the CTA's keys are [0, kv_end), kv_end = 1 + the limit of its
//   last row; a warpgroup stops after the tile holding its own last row's
//   limit (tiles wholly masked for it are not computed) and masks only
//   tiles that cross its first row's limit (the diagonal ones). Tiles the
//   producer loads for the other warpgroup are still waited for and
//   released (the `empty` count is both warpgroups' 8 warps).
// * Epilogue: O / l rounded once to T, staged through the warpgroup's own Q
//   rows in shared memory, stored 16 bytes per lane (4-byte stores if out
//   is not 16-byte aligned).
#pragma once

#include <cstdint>

#include "attention/cuda/online_softmax.cuh"
#include "attention/cuda/params.cuh"
#include "attention/cuda/prefill_wgmma_loader.cuh"
#include "attention/cuda/prefill_wgmma_softmax.cuh"
#include "attention/cuda/prefill_wgmma_traits.cuh"
#include "cuda/mma_utils.cuh"
#include "cuda/sm90_pipeline.cuh"
#include "cuda/sm90_utils.cuh"
#include "cuda/vectorized_access.cuh"

namespace vllm_myops::attention_cuda {

// The last key position row rg of the sequence may see; rows past
// rows_total (never written) see the CTA's whole range.
__device__ __forceinline__ int wgmma_row_lim(const WgmmaCtaInfo& ci, int G,
                                             int rg) {
  return rg >= ci.rows_total ? ci.kv_end - 1 : ci.ctx0 + rg / G;
}

// S = Q K^T: warpgroup wg's 64 rows x the stage's kTileN tokens, issued and
// committed (the caller waits). Step 0 overwrites S (scale-d 0).
template <typename T, int D>
__device__ __forceinline__ void wgmma_qk(
    float (&sc)[PrefillWgmmaTraits<D>::kSAcc], uint32_t q_base, uint32_t stage,
    int wg) {
  using C = PrefillWgmmaTraits<D>;
  sm90::wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < C::kKS; ++ks) {
    const uint64_t da =
        sm90::sw128_kmajor_desc(q_base + q_desc_start<D>(wg, ks));
    const uint64_t db = sm90::sw128_kmajor_desc(stage + k_desc_start<D>(ks));
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
  sm90::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < C::kPS; ++kk)
#pragma unroll
    for (int inst = 0; inst < C::kPvInsts; ++inst) {
      float (&oi)[kInstAcc] =
          *reinterpret_cast<float (*)[kInstAcc]>(&o[inst * kInstAcc]);
      sm90::wgmma_rs_tb<T, C::kPvInstN>(
          oi, pa[kk],
          sm90::sw128_mnmajor_desc(stage + v_desc_start<D>(kk, inst),
                                   C::kKvPanelBytes));
    }
  sm90::wgmma_commit();
}

// One tile t (in `stage`, already waited for) of a consumer warpgroup:
// S, softmax, P V, all complete on return (the stage may be released).
template <typename T, int D>
__device__ __forceinline__ void consume_tile(
    const Params& p, const WgmmaCtaInfo& ci, uint32_t q_base, uint32_t stage,
    int wg, int warp, int lane, int t, float (&m)[2], float (&l)[2],
    float (&o)[PrefillWgmmaTraits<D>::kOAcc]) {
  using C = PrefillWgmmaTraits<D>;
  float sc[C::kSAcc];
  wgmma_qk<T, D>(sc, q_base, stage, wg);
  sm90::wgmma_wait<0>();
  sm90::fence_operands(sc);

  // Warpgroup-uniform: the tile crosses the first row's limit.
  const int G = p.group;
  const int wg_row0 = ci.row0 + wg * C::kWgRows;
  const int pos0 = t * C::kTileN;
  const bool masked = pos0 + C::kTileN - 1 > wgmma_row_lim(ci, G, wg_row0);
  int lim[2] = {0, 0};
  if (masked) {
    const int r = wg_row0 + warp * 16 + lane / 4;
    lim[0] = wgmma_row_lim(ci, G, r);
    lim[1] = wgmma_row_lim(ci, G, r + 8);
  }
  uint32_t pa[C::kPS][4];
  wgmma_softmax_step<T, C::kTileN, C::kOAcc>(sc, m, l, o, pa, p.scale_log2,
                                             masked, pos0, lim, lane % 4);
  sm90::fence_operands(o);
  wgmma_pv<T, D>(o, pa, stage);
  sm90::wgmma_wait<0>();
  sm90::fence_operands(o);
#pragma unroll
  for (int kk = 0; kk < C::kPS; ++kk) sm90::fence_operands(pa[kk]);
}

// Epilogue of consumer warpgroup wg: O / l rounded once, staged in the
// warpgroup's own Q rows, then stored. bar_id: the warpgroup's named
// barrier (every warp's last wgmma read of these Q rows is done before any
// warp overwrites them).
template <typename T, int D>
__device__ __forceinline__ void prefill_wgmma_store(
    const Params& p, const WgmmaCtaInfo& ci, unsigned char* q_smem, int wg,
    int warp, int lane, const float (&l)[2],
    const float (&o)[PrefillWgmmaTraits<D>::kOAcc]) {
  using C = PrefillWgmmaTraits<D>;
  constexpr int kRowChunks = D / 8;
  sm90::named_barrier_sync(1 + wg, 128);
  const int wrow = wg * C::kWgRows + warp * 16;  // the warp's first CTA row
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const float lsum = quad_sum(l[hr]);
    const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
    const int r = wrow + lane / 4 + 8 * hr;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      *reinterpret_cast<uint32_t*>(q_smem +
                                   q_offset<D>(r, 8 * j + 2 * (lane % 4))) =
          tc::pack2<T>(o[4 * j + 2 * hr] * inv, o[4 * j + 2 * hr + 1] * inv);
    }
  }
  __syncwarp();
  T* out = static_cast<T*>(p.out);
  const int G = p.group;
  // 16-byte stores need a 16-byte aligned out and strides (2-byte T).
  const bool vec16 = reinterpret_cast<uintptr_t>(p.out) % 16 == 0 &&
                     p.out_s0 % 8 == 0 && p.out_s1 % 8 == 0;
#pragma unroll 4
  for (int idx = lane; idx < 16 * kRowChunks; idx += 32) {
    const int r = idx / kRowChunks, c = idx % kRowChunks;
    const int rg = ci.row0 + wrow + r;
    if (rg >= ci.rows_total) break;  // rows ascend with idx
    const uint4 v =
        *reinterpret_cast<const uint4*>(q_smem + q_offset<D>(wrow + r, 8 * c));
    const int i = rg / G, g = rg - i * G;
    T* dst = out + int64_t(ci.s.q0 + i) * p.out_s0 +
             int64_t(ci.h * G + g) * p.out_s1 + c * 8;
    if (vec16) {
      cuda::store_16B<16>(dst, v);
    } else {
      cuda::store_16B<4>(dst, v);
    }
  }
}

// A consumer warpgroup's work: its tiles, the epilogue, then the release of
// the tiles only the other warpgroup needs (wait `full` first: that keeps
// each arrival in its own phase of `empty`).
template <typename T, int D>
__device__ __forceinline__ void prefill_wgmma_consume(
    const Params& p, const WgmmaCtaInfo& ci, unsigned char* q_smem,
    uint32_t kv_base, uint64_t* full, uint64_t* empty, uint64_t* q_full, int wg,
    int warp, int lane) {
  using C = PrefillWgmmaTraits<D>;
  const uint32_t q_base = tc::smem_addr(q_smem);
  const int wg_row0 = ci.row0 + wg * C::kWgRows;
  int n_mine = 0;  // tiles this warpgroup computes
  if (wg_row0 < ci.rows_total) {
    const int last = min(wg_row0 + C::kWgRows, ci.rows_total) - 1;
    n_mine = wgmma_row_lim(ci, p.group, last) / C::kTileN + 1;
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float o[C::kOAcc];
#pragma unroll
  for (int i = 0; i < C::kOAcc; ++i) o[i] = 0.f;
  if (n_mine > 0) sm90::mbar_wait(q_full, 0);
  for (int t = 0; t < n_mine; ++t) {
    const int s = t % C::kStages;
    sm90::mbar_wait(&full[s], (t / C::kStages) & 1);
    // The cp.async writes (generic proxy) before the wgmma reads (async).
    sm90::fence_proxy_async_smem();
    consume_tile<T, D>(p, ci, q_base, kv_base + s * C::kStageBytes, wg, warp,
                       lane, t, m, l, o);
    if (lane == 0) sm90::mbar_arrive(&empty[s]);
  }
  if (n_mine > 0) {
    prefill_wgmma_store<T, D>(p, ci, q_smem, wg, warp, lane, l, o);
  }
  for (int t = n_mine; t < ci.n_tiles; ++t) {
    const int s = t % C::kStages;
    sm90::mbar_wait(&full[s], (t / C::kStages) & 1);
    if (lane == 0) sm90::mbar_arrive(&empty[s]);
  }
}

// Grid (B, H_kv, row tiles of kRows), kThreads threads; scale_log2 > 0.
template <typename T, int D>
__global__ void __launch_bounds__(PrefillWgmmaTraits<D>::kThreads, 1)
    prefill_wgmma_kernel(const Params p) {
  using C = PrefillWgmmaTraits<D>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  unsigned char* smem =
      smem_raw + ((1024u - (tc::smem_addr(smem_raw) & 1023u)) & 1023u);
  WgmmaCtaInfo ci;
  ci.b = blockIdx.x;
  ci.h = blockIdx.y;
  ci.s = seq_info(p, ci.b);
  if (ci.s.q_len == 0 || (p.skip_decode_rows && ci.s.q_len == 1)) return;
  ci.row0 = (gridDim.z - 1 - blockIdx.z) * C::kRows;  // longest first
  ci.rows_total = ci.s.q_len * p.group;
  if (ci.row0 >= ci.rows_total) return;
  ci.ctx0 = ci.s.seq_len - ci.s.q_len;
  ci.kv_end =
      ci.ctx0 + (min(ci.row0 + C::kRows, ci.rows_total) - 1) / p.group + 1;
  ci.n_tiles = (ci.kv_end + C::kTileN - 1) / C::kTileN;

  unsigned char* q_smem = smem;
  const uint32_t kv_base = tc::smem_addr(smem + C::kQBytes);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kQBytes +
                                               C::kStages * C::kStageBytes);
  uint64_t* empty = full + C::kStages;
  uint64_t* q_full = empty + C::kStages;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < C::kStages; ++s) {
      sm90::mbar_init(&full[s], 128);                   // producer threads
      sm90::mbar_init(&empty[s], C::kConsumerWgs * 4);  // consumer warps
    }
    sm90::mbar_init(q_full, 128);
    sm90::fence_barrier_init();
  }
  __syncthreads();

  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    sm90::setmaxnreg_dec<C::kProducerRegs>();
    prefill_wgmma_produce<T, D>(p, ci, tc::smem_addr(q_smem), kv_base, full,
                                empty, q_full, threadIdx.x);
  } else {
    sm90::setmaxnreg_inc<C::kConsumerRegs>();
    prefill_wgmma_consume<T, D>(p, ci, q_smem, kv_base, full, empty, q_full,
                                wg - 1, (threadIdx.x / 32) % 4,
                                threadIdx.x % 32);
  }
}

}  // namespace vllm_myops::attention_cuda
