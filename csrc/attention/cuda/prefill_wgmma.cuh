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
//   pipeline), setmaxnreg'd down to its register budget; warpgroups 1 and
//   2 are consumers of 64 rows each (the wgmma M), up to theirs (traits:
//   kProducerRegs / kConsumerRegs).
// * Per tile, a consumer warpgroup (prefill_wgmma_mainloop.cuh): waits for
//   the stage (`full`), S = Q K^T as SS wgmma m64n128k16 (Q and K K-major
//   in shared memory); online softmax in fp32 registers in the exp2 domain
//   (prefill_wgmma_softmax.cuh), P rounded to T straight into the RS A
//   fragments; O += P V as RS wgmma m64nDk16 with V MN-major (the
//   transpose-B bit; the V rows are the cache's token rows, no transposing
//   copy); S, softmax and P V in series, each waited for; once both wgmmas
//   on the stage completed, each of its warps arrives on the stage's
//   `empty`.
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
#include "attention/cuda/prefill_wgmma_mainloop.cuh"
#include "attention/cuda/prefill_wgmma_softmax.cuh"
#include "attention/cuda/prefill_wgmma_traits.cuh"
#include "cuda/mma_utils.cuh"
#include "cuda/sm90_pipeline.cuh"
#include "cuda/sm90_utils.cuh"
#include "cuda/vectorized_access.cuh"

namespace vllm_myops::attention_cuda {

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
  sm90::named_barrier_sync(C::kStoreBarrier0 + wg, 128);
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

// A consumer warpgroup's work: its tiles (the mainloop), the epilogue, then
// the release of the tiles only the other warpgroup needs (wait `full`
// first: that keeps each arrival in its own phase of `empty`).
template <typename T, int D>
__device__ __forceinline__ void prefill_wgmma_consume(
    const Params& p, const WgmmaCtaInfo& ci, unsigned char* q_smem,
    uint32_t kv_base, uint64_t* full, uint64_t* empty, uint64_t* q_full, int wg,
    int warp, int lane) {
  using C = PrefillWgmmaTraits<D>;
  const WgmmaConsumer c{
      &p, &ci, tc::smem_addr(q_smem), kv_base, full, empty, wg, warp, lane};
  const int n_mine = wgmma_tiles_of<D>(ci, p.group, wg);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float o[C::kOAcc];
#pragma unroll
  for (int i = 0; i < C::kOAcc; ++i) o[i] = 0.f;
  if (n_mine > 0) {
    sm90::mbar_wait(q_full, 0);
    prefill_wgmma_mainloop<T, D>(c, n_mine, m, l, o);
    prefill_wgmma_store<T, D>(p, ci, q_smem, wg, warp, lane, l, o);
  }
  for (int t = n_mine; t < ci.n_tiles; ++t) {
    wgmma_wait_tile<D>(c, t);
    wgmma_release_tile<D>(c, t);
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
