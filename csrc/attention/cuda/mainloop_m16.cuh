// SPDX-License-Identifier: Apache-2.0
//
// The prologue and K/V mainloop that decode_split and prefill_m64 share
// (one m16 row tile per warp; M16Traits<D, kDecode>): the CTA's rows and KV
// range, the Q tile, then per K/V tile S = Q K^T, the online softmax and
// O += P V on mma.sync m16n8k16. Each kernel adds its epilogue
// (decode_split.cuh, prefill_m64.cuh).
//
// Decode: a warp computes on the same tokens it copied (its quarter of each
// tile), so the warps pipeline apart (__syncwarp, no CTA barrier per tile);
// prefill warps read the whole tile (__syncthreads).
#pragma once

#include <cstdint>

#include "attention/cuda/kv_tile_loader.cuh"
#include "attention/cuda/online_softmax.cuh"
#include "attention/cuda/params.cuh"
#include "attention/cuda/traits.cuh"
#include "cuda/mma_utils.cuh"

namespace vllm_myops::attention_cuda {

// One CTA's work, as m16_prologue finds it.
struct M16Cta {
  int b, h, tid, warp, lane;
  int copy_lane, copy_sub;  // this lane's part of the K/V copies
  const int* table;         // the sequence's block-table row
  int entry_tok;            // the tile token whose table entry this lane holds
  SeqInfo s;
  int G;
  // Rows [row0, row0 + kRows) of the sequence's q_len * G rows; KV range
  // [kv_begin, kv_end); ctx0 the cached context before the query tokens.
  int row0, rows_total, kv_begin, kv_end, ctx0;
  int phys0, off0, next_phys, next_off;  // table entries of tiles 0 and 1
};

// The CTA's rows and KV range; false: the CTA has no work and exits.
template <int D, bool kDecode>
__device__ __forceinline__ bool m16_prologue(const Params& p, M16Cta& c) {
  using C = M16Traits<D, kDecode>;
  using L = KvTileLoader<D, C::kTileN>;
  static_assert(!kDecode || L::kCopyToks == C::kWarpTokens);
  const int b = blockIdx.x;
  const int h = blockIdx.y;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int entry_tok = L::entry_tok(warp, lane);
  const int copy_lane = lane % L::kLanesPerTok;
  const int copy_sub = lane / L::kLanesPerTok;
  const int* table = p.table + int64_t(b) * p.table_s0;
  // The first two tiles' entries are read before the sequence's lengths:
  // their positions depend only on the split (decode; prefill starts at 0)
  // and the table's width bounds them, so the table read and the qsl /
  // seq_lens reads make one round trip, not two in a row (at batch 1 the
  // kernel is a latency chain). Entries past the CTA's range are dropped
  // once kv_end is known.
  const int kv_begin0 = kDecode ? int(blockIdx.z) * p.split_tokens : 0;
  const int table_tokens = p.max_blocks_per_seq * p.block_size;
  int phys0, off0, next_phys, next_off;  // tile 0; tile 1
  table_entry(p, table, kv_begin0 + entry_tok, table_tokens, phys0, off0);
  table_entry(p, table, kv_begin0 + C::kTileN + entry_tok, table_tokens,
              next_phys, next_off);

  const SeqInfo s = seq_info(p, b);
  const int G = p.group;

  int row0, rows_total, kv_begin, kv_end;
  if constexpr (kDecode) {
    if (s.q_len != 1) return false;
    row0 = 0;
    rows_total = G;
    kv_begin = kv_begin0;
    if (kv_begin >= s.seq_len) return false;
    kv_end = blockIdx.z == p.splits - 1
                 ? s.seq_len
                 : min(s.seq_len, kv_begin + p.split_tokens);
  } else {
    if (s.q_len == 0 || (p.skip_decode_rows && s.q_len == 1)) return false;
    const int tile = gridDim.z - 1 - blockIdx.z;  // longest first
    row0 = tile * C::kRows;
    rows_total = s.q_len * G;
    if (row0 >= rows_total) return false;
    const int last_row = min(row0 + C::kRows, rows_total) - 1;
    kv_begin = kv_begin0;
    kv_end = s.seq_len - s.q_len + last_row / G + 1;
  }
  const int ctx0 = s.seq_len - s.q_len;
  if (kv_begin + entry_tok >= kv_end) phys0 = -1;  // zero fill
  if (kv_begin + C::kTileN + entry_tok >= kv_end) next_phys = -1;
  c = M16Cta{b,      h,         tid,   warp, lane,      copy_lane,  copy_sub,
             table,  entry_tok, s,     G,    row0,      rows_total, kv_begin,
             kv_end, ctx0,      phys0, off0, next_phys, next_off};
  return true;
}

// S = Q K^T: the warp's 16 rows x kSubN tokens from k_tok0 of the stage.
template <typename T, typename C>
__device__ __forceinline__ void m16_qk(
    float (&sc)[C::kNB][4], const uint32_t (&qf)[C::kQInRegs ? C::kKS : 1][4],
    uint32_t q_base, uint32_t stage, int a_row, int a_chunk, int k_tok0,
    int k_chunk) {
#pragma unroll
  for (int j = 0; j < C::kNB; ++j)
    sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.f;
#pragma unroll
  for (int ks = 0; ks < C::kKS; ++ks) {
    uint32_t a[4];
    if constexpr (C::kQInRegs) {
      a[0] = qf[ks][0], a[1] = qf[ks][1], a[2] = qf[ks][2], a[3] = qf[ks][3];
    } else {
      tc::ldsm_x4(a,
                  q_base + tc::swizzled<C::kChunksQ>(a_row, ks * 2 + a_chunk));
    }
#pragma unroll
    for (int j2 = 0; j2 < C::kNB / 2; ++j2) {
      uint32_t kf[4];
      tc::ldsm_x4(kf, stage + tc::swizzled<C::kChunksKV>(k_tok0 + j2 * 16,
                                                         ks * 2 + k_chunk));
      tc::mma_16816<T>(sc[2 * j2], a, kf[0], kf[1]);
      tc::mma_16816<T>(sc[2 * j2 + 1], a, kf[2], kf[3]);
    }
  }
}

// O += P V: P (S after the softmax, rounded to T) over kSubN tokens from
// v_tok0 of the stage.
template <typename T, typename C>
__device__ __forceinline__ void m16_pv(float (&acc)[C::kDB][4],
                                       const float (&sc)[C::kNB][4],
                                       uint32_t stage, int v_tok0,
                                       int v_chunk) {
#pragma unroll
  for (int kk = 0; kk < C::kSubN / 16; ++kk) {
    uint32_t pa[4];
    pa[0] = tc::pack2<T>(sc[2 * kk][0], sc[2 * kk][1]);
    pa[1] = tc::pack2<T>(sc[2 * kk][2], sc[2 * kk][3]);
    pa[2] = tc::pack2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
    pa[3] = tc::pack2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
    for (int j2 = 0; j2 < C::kDB / 2; ++j2) {
      uint32_t vf[4];
      tc::ldsm_x4_trans(vf, stage + tc::swizzled<C::kChunksKV>(
                                        v_tok0 + kk * 16, v_chunk + j2 * 2));
      tc::mma_16816<T>(acc[2 * j2], pa, vf[0], vf[1]);
      tc::mma_16816<T>(acc[2 * j2 + 1], pa, vf[2], vf[3]);
    }
  }
}

// Q tile, then every K/V tile of [kv_begin, kv_end) through kStages
// shared-memory stages (tokens past the range zero-filled). Leaves the
// thread's rows' (m, l, acc), l quad-summed, and no cp.async in flight.
template <typename T, int D, bool kDecode>
__device__ __forceinline__ void m16_mainloop(
    const Params& p, unsigned char* smem, const M16Cta& cta, float (&m)[2],
    float (&l)[2], float (&acc)[M16Traits<D, kDecode>::kDB][4]) {
  using C = M16Traits<D, kDecode>;
  using L = KvTileLoader<D, C::kTileN>;
  const int h = cta.h, warp = cta.warp, lane = cta.lane;
  const int kv_begin = cta.kv_begin, kv_end = cta.kv_end;
  int next_phys = cta.next_phys, next_off = cta.next_off;

  unsigned char* kv_smem = smem;
  unsigned char* q_smem = smem + kStages * C::kKvStageBytes;
  const uint32_t kv_base = tc::smem_addr(kv_smem);
  const uint32_t q_base = tc::smem_addr(q_smem);

  // ---- Q tile -> shared memory (rows past rows_total zero-filled) ----
  {
    const T* q = static_cast<const T*>(p.query);
    const int G = cta.G, row0 = cta.row0, rows_total = cta.rows_total;
    for (int idx = cta.tid; idx < C::kRows * C::kChunksQ; idx += kThreads) {
      const int r = idx / C::kChunksQ, c = idx % C::kChunksQ;
      const int rg = row0 + r;
      const bool valid = rg < rows_total;
      const T* src = q;
      if (valid) {
        const int i = rg / G, g = rg - (rg / G) * G;
        src = q + int64_t(cta.s.q0 + i) * p.q_s0 + int64_t(h * G + g) * p.q_s1 +
              c * 8;
      }
      tc::cp_async_16(q_base + tc::swizzled<C::kChunksQ>(r, c), src, valid);
    }
  }

  const T* cache = static_cast<const T*>(p.cache);
  // This thread's two rows in its warp's m16 tile: lane / 4 and lane / 4 + 8.
  const int warp_row0 = kDecode ? 0 : warp * 16;
  const int warp_tok0 = kDecode ? warp * C::kWarpTokens : 0;
  auto table_ahead = [&](int t, int& phys, int& off) {
    table_entry(p, cta.table, kv_begin + t * C::kTileN + cta.entry_tok, kv_end,
                phys, off);
  };
  auto load_tile = [&](int stage, int phys, int off) {
    L::load(p, cache, kv_base + stage * C::kKvStageBytes, h, warp,
            cta.copy_lane, cta.copy_sub, phys, off);
  };

  const int n_tiles = (kv_end - kv_begin + C::kTileN - 1) / C::kTileN;
  load_tile(0, cta.phys0, cta.off0);
  tc::cp_async_commit();  // group 0: Q and tile 0

  int lim[2];  // last KV position (inclusive) each row may see
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int rg = cta.row0 + warp_row0 + lane / 4 + hr * 8;
    lim[hr] =
        (kDecode || rg >= cta.rows_total) ? kv_end - 1 : cta.ctx0 + rg / cta.G;
  }
  const int warp_min_lim = __shfl_sync(0xffffffffu, lim[0], 0);

  m[0] = m[1] = -INFINITY;
  l[0] = l[1] = 0.f;
#pragma unroll
  for (int j = 0; j < C::kDB; ++j)
    acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
  uint32_t qf[C::kQInRegs ? C::kKS : 1][4];

  // ldmatrix lane addresses (see mma_utils.cuh): A (Q) rows lane % 16,
  // chunk + lane / 16; B (K) tokens (lane % 8) + (lane / 16) * 8, chunk +
  // (lane / 8) % 2; B (V, transposed) tokens lane % 16, chunk + lane / 16.
  const int a_row = warp_row0 + (lane % 16);
  const int a_chunk = lane / 16;
  const int k_tok = warp_tok0 + (lane % 8) + (lane / 16) * 8;
  const int k_chunk = (lane / 8) % 2;
  const int v_tok = warp_tok0 + (lane % 16);
  const int v_chunk = C::kChunksQ + lane / 16;  // V half of the token row

  for (int t = 0; t < n_tiles; ++t) {
    if (t + 1 < n_tiles) {
      load_tile((t + 1) % kStages, next_phys, next_off);
      if (t + 2 < n_tiles) table_ahead(t + 2, next_phys, next_off);
    }
    tc::cp_async_commit();
    tc::cp_async_wait<1>();
    // Decode: the warp's own copies, but Q (group 0) came from all threads.
    if (!kDecode || t == 0) {
      __syncthreads();
    } else {
      __syncwarp();
    }
    const uint32_t stage = kv_base + (t % kStages) * C::kKvStageBytes;

    if constexpr (C::kQInRegs) {
      if (t == 0) {
#pragma unroll
        for (int ks = 0; ks < C::kKS; ++ks)
          tc::ldsm_x4(qf[ks], q_base + tc::swizzled<C::kChunksQ>(
                                           a_row, ks * 2 + a_chunk));
      }
    }

#pragma unroll 1
    for (int sub = 0; sub < C::kWarpTokens / C::kSubN; ++sub) {
      const int sub_tok = sub * C::kSubN;
      float sc[C::kNB][4];
      m16_qk<T, C>(sc, qf, q_base, stage, a_row, a_chunk, k_tok + sub_tok,
                   k_chunk);
      const int pos0 = kv_begin + t * C::kTileN + warp_tok0 + sub_tok;
      const bool masked = pos0 + C::kSubN - 1 > warp_min_lim;
      online_softmax_m16<C>(sc, m, l, acc, p.scale_log2, masked, pos0, lim,
                            lane);
      m16_pv<T, C>(acc, sc, stage, v_tok + sub_tok, v_chunk);
    }  // sub
    // The stage is refilled next iteration (decode: by this warp only).
    if constexpr (kDecode) {
      __syncwarp();
    } else {
      __syncthreads();
    }
  }
  tc::cp_async_wait<0>();

  l[0] = quad_sum(l[0]);
  l[1] = quad_sum(l[1]);
}

}  // namespace vllm_myops::attention_cuda
