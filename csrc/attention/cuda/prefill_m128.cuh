// SPDX-License-Identifier: Apache-2.0
//
// prefill_m128: paged_attention's prefill kernel with 128 rows per CTA, 32
// per warp (sm_80+, mma.sync m16n8k16), D 64 and 128 (D = 256 runs
// prefill_m64). Same rows, masks, clamps and outputs as prefill_m64 (see
// paged_attention.cu's file comment); what differs is the work per warp.
//
// * A CTA (4 warps) takes 128 rows r = i * G + g of one (sequence b, kv head
//   h): the G q heads of h share every K/V tile (GQA). Each warp owns 32
//   rows, two m16 tiles, so every K / V fragment it loads from shared memory
//   feeds two mma (prefill_m64: 16 rows per warp, one mma per fragment).
//   Shared-memory bytes per MAC at D = 128: prefill_m64 0.125 (K + V per 16
//   rows), prefill_m128 0.076 (K + V + Q per 32 rows): prefill_m64's
//   ldmatrix traffic alone matched the ~128 B/clk/SM the mma.sync rate
//   needs, prefill_m128's leaves room.
// * K/V tiles of 64 tokens (KvTileLoader, as prefill_m64) by cp.async, 2
//   stages, ONE __syncthreads per tile: the barrier at the top of tile t
//   both publishes tile t and frees tile t - 1's stage, which the copies of
//   tile t + 1 issued right after it refill. Block-table entries a tile
//   ahead (one per lane, shuffled to the 8 lanes that copy a token).
// * Q: D = 64 in registers (32 registers); D = 128 re-read from shared
//   memory per k step (64 registers would not fit beside the 128-register O
//   accumulator and the 64-register S of 32 x 64), as FlashAttention-2.
// * Online softmax in fp32, exp2 domain (scale_log2), P rounded to T from
//   the S accumulators straight into A fragments; O normalised at the end,
//   staged through the warp's own Q rows in shared memory and stored 16
//   bytes per lane (4-byte stores if out is not 16-byte aligned).
// * Causal: KV range [0, limit of the CTA's last row]; a warp skips tiles
//   past its own last row's limit, masks only tiles crossing its first row's
//   limit. Row tiles longest first.
// * 96 / 48 KB of shared memory (D 128 / 64), __launch_bounds__(128, 2): two
//   CTAs (8 warps) per SM.
#pragma once

#include <cstdint>

#include "attention/cuda/kv_tile_loader.cuh"
#include "attention/cuda/online_softmax.cuh"
#include "attention/cuda/params.cuh"
#include "attention/cuda/traits.cuh"
#include "cuda/mma_utils.cuh"
#include "cuda/vectorized_access.cuh"

namespace vllm_myops::attention_cuda {

// S = Q K^T: the warp's 32 rows (from a_row) x 64 tokens of the stage.
template <typename T, typename C>
__device__ __forceinline__ void m128_qk(
    float (&sc)[C::kMT][C::kNB][4],
    const uint32_t (&qf)[C::kQInRegs ? C::kMT : 1][C::kQInRegs ? C::kKS : 1][4],
    uint32_t q_base, uint32_t stage, int a_row, int a_chunk, int k_tok,
    int k_chunk) {
#pragma unroll
  for (int mi = 0; mi < C::kMT; ++mi)
#pragma unroll
    for (int j = 0; j < C::kNB; ++j)
      sc[mi][j][0] = sc[mi][j][1] = sc[mi][j][2] = sc[mi][j][3] = 0.f;
  // Unrolled by 2 only when Q is re-read from shared memory (the next
  // step's fragments load under this step's mma): fully unrolled, the
  // compiler hoists every k step's fragments and spills.
#pragma unroll(C::kQInRegs ? C::kKS : 2)
  for (int ks = 0; ks < C::kKS; ++ks) {
    uint32_t a[C::kMT][4];
#pragma unroll
    for (int mi = 0; mi < C::kMT; ++mi) {
      if constexpr (C::kQInRegs) {
        a[mi][0] = qf[mi][ks][0], a[mi][1] = qf[mi][ks][1];
        a[mi][2] = qf[mi][ks][2], a[mi][3] = qf[mi][ks][3];
      } else {
        tc::ldsm_x4(a[mi], q_base + tc::swizzled<C::kChunksQ>(
                                        a_row + mi * 16, ks * 2 + a_chunk));
      }
    }
#pragma unroll
    for (int j2 = 0; j2 < C::kNB / 2; ++j2) {
      uint32_t kf[4];
      tc::ldsm_x4(kf, stage + tc::swizzled<C::kChunksKV>(k_tok + j2 * 16,
                                                         ks * 2 + k_chunk));
#pragma unroll
      for (int mi = 0; mi < C::kMT; ++mi) {
        tc::mma_16816<T>(sc[mi][2 * j2], a[mi], kf[0], kf[1]);
        tc::mma_16816<T>(sc[mi][2 * j2 + 1], a[mi], kf[2], kf[3]);
      }
    }
  }
}

// O += P V. P as A fragments (the S accumulators die here: 64 -> 32
// registers), then V by d blocks outer, tokens inner: each V address is
// used for its 4 token steps and dropped (token steps outer kept all
// D / 16 addresses live across the loop and spilled).
template <typename T, typename C>
__device__ __forceinline__ void m128_pv(float (&acc)[C::kMT][C::kDB][4],
                                        const float (&sc)[C::kMT][C::kNB][4],
                                        uint32_t stage, int v_tok,
                                        int v_chunk) {
  uint32_t pa[C::kMT][C::kTileN / 16][4];
#pragma unroll
  for (int mi = 0; mi < C::kMT; ++mi) {
#pragma unroll
    for (int kk = 0; kk < C::kTileN / 16; ++kk) {
      pa[mi][kk][0] = tc::pack2<T>(sc[mi][2 * kk][0], sc[mi][2 * kk][1]);
      pa[mi][kk][1] = tc::pack2<T>(sc[mi][2 * kk][2], sc[mi][2 * kk][3]);
      pa[mi][kk][2] =
          tc::pack2<T>(sc[mi][2 * kk + 1][0], sc[mi][2 * kk + 1][1]);
      pa[mi][kk][3] =
          tc::pack2<T>(sc[mi][2 * kk + 1][2], sc[mi][2 * kk + 1][3]);
    }
  }
#pragma unroll
  for (int j2 = 0; j2 < C::kDB / 2; ++j2) {
#pragma unroll
    for (int kk = 0; kk < C::kTileN / 16; ++kk) {
      uint32_t vf[4];
      tc::ldsm_x4_trans(vf, stage + tc::swizzled<C::kChunksKV>(
                                        v_tok + kk * 16, v_chunk + j2 * 2));
#pragma unroll
      for (int mi = 0; mi < C::kMT; ++mi) {
        tc::mma_16816<T>(acc[mi][2 * j2], pa[mi][kk], vf[0], vf[1]);
        tc::mma_16816<T>(acc[mi][2 * j2 + 1], pa[mi][kk], vf[2], vf[3]);
      }
    }
  }
}

// Epilogue of a warp with rows: normalise, round once, stage in the warp's
// Q rows, then 16-byte (or 4-byte) stores. Only this warp read those rows
// (its a_row range); its ldmatrix reads are done once every lane is past
// the loop. No CTA barrier: each warp stores its own rows.
template <typename T, typename C>
__device__ __forceinline__ void prefill_m128_store(
    const Params& p, unsigned char* q_smem, const SeqInfo& s, int row0,
    int rows_total, int G, int h, int warp_row0, int lane,
    const float (&l)[2 * C::kMT], const float (&acc)[C::kMT][C::kDB][4]) {
  __syncwarp();
#pragma unroll
  for (int mi = 0; mi < C::kMT; ++mi) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int rr = mi * 2 + hr;
      const float lsum = quad_sum(l[rr]);
      const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
      const int r = warp_row0 + mi * 16 + lane / 4 + hr * 8;
#pragma unroll
      for (int j = 0; j < C::kDB; ++j) {
        *reinterpret_cast<uint32_t*>(q_smem + tc::swizzled<C::kChunksQ>(r, j) +
                                     (lane % 4) * 4) =
            tc::pack2<T>(acc[mi][j][2 * hr] * inv,
                         acc[mi][j][2 * hr + 1] * inv);
      }
    }
  }
  __syncwarp();
  T* out = static_cast<T*>(p.out);
  // 16-byte stores need a 16-byte aligned out and strides (2-byte T).
  const bool vec16 = reinterpret_cast<uintptr_t>(p.out) % 16 == 0 &&
                     p.out_s0 % 8 == 0 && p.out_s1 % 8 == 0;
#pragma unroll 4
  for (int idx = lane; idx < C::kWarpRows * C::kChunksQ; idx += 32) {
    const int r = idx / C::kChunksQ, c = idx % C::kChunksQ;
    const int rg = row0 + warp_row0 + r;
    if (rg >= rows_total) break;  // rows ascend with idx
    const uint4 v = *reinterpret_cast<const uint4*>(
        q_smem + tc::swizzled<C::kChunksQ>(warp_row0 + r, c));
    const int i = rg / G, g = rg - i * G;
    T* o = out + int64_t(s.q0 + i) * p.out_s0 + int64_t(h * G + g) * p.out_s1 +
           c * 8;
    if (vec16) {
      cuda::store_16B<16>(o, v);
    } else {
      cuda::store_16B<4>(o, v);
    }
  }
}

// Grid (B, H_kv, row tiles of kPrefillM128Rows); scale_log2 > 0.
template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 2)
    prefill_m128_kernel(const Params p) {
  using C = PrefillM128Traits<D>;
  using L = KvTileLoader<D, C::kTileN>;
  extern __shared__ __align__(128) unsigned char smem[];
  const int b = blockIdx.x;
  const int h = blockIdx.y;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  const int entry_tok = L::entry_tok(warp, lane);
  const int* table = p.table + int64_t(b) * p.table_s0;
  // The first two tiles' entries in the same round trip as the lengths
  // (bounded by the table's width; dropped past kv_end below).
  const int table_tokens = p.max_blocks_per_seq * p.block_size;
  int phys0, off0, next_phys, next_off;  // tile 0; tile t + 1 in the loop
  table_entry(p, table, entry_tok, table_tokens, phys0, off0);
  table_entry(p, table, C::kTileN + entry_tok, table_tokens, next_phys,
              next_off);

  const SeqInfo s = seq_info(p, b);
  const int G = p.group;
  if (s.q_len == 0 || (p.skip_decode_rows && s.q_len == 1)) return;
  const int row0 = (gridDim.z - 1 - blockIdx.z) * C::kRows;  // longest first
  const int rows_total = s.q_len * G;
  if (row0 >= rows_total) return;
  const int ctx0 = s.seq_len - s.q_len;
  const int kv_end = ctx0 + (min(row0 + C::kRows, rows_total) - 1) / G + 1;
  if (entry_tok >= kv_end) phys0 = -1;  // zero fill
  if (C::kTileN + entry_tok >= kv_end) next_phys = -1;
  // Last KV position (inclusive) row rg of the sequence may see; rows past
  // rows_total (not written) see the CTA's whole range.
  auto row_lim = [&](int rg) {
    return rg >= rows_total ? kv_end - 1 : ctx0 + rg / G;
  };

  unsigned char* kv_smem = smem;
  unsigned char* q_smem = smem + kStages * C::kKvStageBytes;
  const uint32_t kv_base = tc::smem_addr(kv_smem);
  const uint32_t q_base = tc::smem_addr(q_smem);

  // ---- Q tile -> shared memory (rows past rows_total zero-filled) ----
  {
    const T* q = static_cast<const T*>(p.query);
    for (int idx = tid; idx < C::kRows * C::kChunksQ; idx += kThreads) {
      const int r = idx / C::kChunksQ, c = idx % C::kChunksQ;
      const int rg = row0 + r;
      const bool valid = rg < rows_total;
      const T* src = q;
      if (valid) {
        const int i = rg / G, g = rg - i * G;
        src = q + int64_t(s.q0 + i) * p.q_s0 + int64_t(h * G + g) * p.q_s1 +
              c * 8;
      }
      tc::cp_async_16(q_base + tc::swizzled<C::kChunksQ>(r, c), src, valid);
    }
  }

  const T* cache = static_cast<const T*>(p.cache);
  // The per-lane addresses of the copies and ldmatrix are recomputed in
  // every tile from tid_, threadIdx.x read by an asm at the top of the tile
  // (opaque to the compiler): hoisted out of the loop they took ~30
  // registers for its whole length and spilled beside the 192 of the O and
  // S accumulators. Recomputing costs ~100 integer instructions per tile
  // against 256 mma per warp.
  auto load_tile = [&](int tid_, int stage, int phys, int off) {
    int h_;  // h, re-read (sm_80 spilled its 64-bit copy)
    asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(h_));
    const int w = tid_ / 32, ln = tid_ % 32;
    L::load(p, cache, kv_base + stage * C::kKvStageBytes, h_, w,
            ln % L::kLanesPerTok, ln / L::kLanesPerTok, phys, off);
  };

  const int n_tiles = (kv_end + C::kTileN - 1) / C::kTileN;
  load_tile(tid, 0, phys0, off0);
  tc::cp_async_commit();  // Q and tile 0

  // This thread's rows: m16 tile mi, half hr -> warp row mi * 16 + lane / 4
  // + hr * 8 (rr = mi * 2 + hr). The row limits are computed where a tile
  // needs the mask (the few crossing the diagonal), not kept in registers.
  float m[2 * C::kMT], l[2 * C::kMT];
#pragma unroll
  for (int rr = 0; rr < 2 * C::kMT; ++rr) m[rr] = -INFINITY, l[rr] = 0.f;
  float acc[C::kMT][C::kDB][4];
#pragma unroll
  for (int mi = 0; mi < C::kMT; ++mi)
#pragma unroll
    for (int j = 0; j < C::kDB; ++j)
      acc[mi][j][0] = acc[mi][j][1] = acc[mi][j][2] = acc[mi][j][3] = 0.f;
  uint32_t qf[C::kQInRegs ? C::kMT : 1][C::kQInRegs ? C::kKS : 1][4];

  for (int t = 0; t < n_tiles; ++t) {
    int tid_;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid_));
    const int warp_ = tid_ / 32, lane_ = tid_ % 32;
    // Tile t (the only group in flight) landed for every thread, and every
    // warp is done with tile t - 1, whose stage the next copies refill.
    tc::cp_async_wait<0>();
    __syncthreads();
    if (t + 1 < n_tiles) {
      load_tile(tid_, (t + 1) % kStages, next_phys, next_off);
      if (t + 2 < n_tiles) {
        table_entry(
            p, table,
            (t + 2) * C::kTileN + warp_ * L::kCopyToks + lane_ % L::kCopyToks,
            kv_end, next_phys, next_off);
      }
    }
    tc::cp_async_commit();

    // ldmatrix lane addresses (as prefill_m64, see mma_utils.cuh): A (Q)
    // rows lane % 16, chunk + lane / 16; B (K) tokens (lane % 8) + (lane /
    // 16) * 8, chunk + (lane / 8) % 2; B (V, transposed) tokens lane % 16,
    // chunk + lane / 16.
    const int wrow0 = warp_ * C::kWarpRows;  // the warp's first row in the CTA
    const int a_row = wrow0 + (lane_ % 16);
    const int a_chunk = lane_ / 16;
    const int k_tok = (lane_ % 8) + (lane_ / 16) * 8;
    const int k_chunk = (lane_ / 8) % 2;
    const int v_tok = lane_ % 16;
    const int v_chunk = C::kChunksQ + lane_ / 16;  // V half of the token row

    if constexpr (C::kQInRegs) {
      if (t == 0) {
#pragma unroll
        for (int mi = 0; mi < C::kMT; ++mi)
#pragma unroll
          for (int ks = 0; ks < C::kKS; ++ks)
            tc::ldsm_x4(qf[mi][ks],
                        q_base + tc::swizzled<C::kChunksQ>(a_row + mi * 16,
                                                           ks * 2 + a_chunk));
      }
    }

    // Warp-uniform: the warp has no rows, or none sees any of this tile.
    const int pos0 = t * C::kTileN;
    if (row0 + wrow0 >= rows_total ||
        pos0 > row_lim(row0 + wrow0 + C::kWarpRows - 1))
      continue;
    const uint32_t stage = kv_base + (t % kStages) * C::kKvStageBytes;

    float sc[C::kMT][C::kNB][4];
    m128_qk<T, C>(sc, qf, q_base, stage, a_row, a_chunk, k_tok, k_chunk);
    const bool masked = pos0 + C::kTileN - 1 > row_lim(row0 + wrow0);
    online_softmax_m128<C>(sc, m, l, acc, p.scale_log2, masked, pos0,
                           row0 + wrow0, lane_, row_lim);
    m128_pv<T, C>(acc, sc, stage, v_tok, v_chunk);
  }
  tc::cp_async_wait<0>();  // the last (empty) group
  const int warp_row0 = warp * C::kWarpRows;
  if (row0 + warp_row0 >= rows_total) return;
  prefill_m128_store<T, C>(p, q_smem, s, row0, rows_total, G, h, warp_row0,
                           lane, l, acc);
}

}  // namespace vllm_myops::attention_cuda
