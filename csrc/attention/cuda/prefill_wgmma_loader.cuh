// SPDX-License-Identifier: Apache-2.0
//
// prefill_wgmma's producer warpgroup: Q once, then the K/V tiles of the
// CTA's range through the kStages-deep full / empty mbarrier pipeline
// (cuda/sm90_pipeline.cuh's protocol), all by cp.async (16-byte chunks):
// paged tokens are not contiguous, so a tile is 128 separate 4 D-byte rows.
// Each producer thread's copies complete on the stage's `full` barrier
// (cp.async.mbarrier.arrive.noinc: `full` counts the 128 producer threads);
// no thread waits for its own copies.
//
// Tokens past the CTA's range (kv_end) and block ids outside
// [0, num_blocks) are zero-filled, so no NaN of an unowned slot reaches the
// math; the causal mask removes them anyway (every row's limit is below
// kv_end). Q rows past the sequence's rows are zero-filled too.
#pragma once

#include <cstdint>

#include "attention/cuda/kv_tile_loader.cuh"
#include "attention/cuda/params.cuh"
#include "attention/cuda/prefill_wgmma_traits.cuh"
#include "cuda/mma_utils.cuh"
#include "cuda/sm90_pipeline.cuh"

namespace vllm_myops::attention_cuda {

// The CTA's place: sequence b, kv head h, rows [row0, row0 + kRows) of the
// sequence's rows_total = q_len * G rows; keys [0, kv_end).
struct WgmmaCtaInfo {
  SeqInfo s;
  int b, h, row0, rows_total, ctx0, kv_end, n_tiles;
};

// The CTA's Q rows (row r = i * G + g: token i, q head h * G + g) into the
// K-major panels at q_base; arrives on q_full when this thread's copies
// land. tid: the thread's index in the producer warpgroup.
template <typename T, int D>
__device__ __forceinline__ void load_q_tile(const Params& p,
                                            const WgmmaCtaInfo& ci,
                                            uint32_t q_base, uint64_t* q_full,
                                            int tid) {
  using C = PrefillWgmmaTraits<D>;
  constexpr int kRowChunks = D / 8;
  const T* q = static_cast<const T*>(p.query);
  const int G = p.group;
#pragma unroll 4
  for (int idx = tid; idx < C::kRows * kRowChunks; idx += 128) {
    const int r = idx / kRowChunks, c = idx % kRowChunks;
    const int rg = ci.row0 + r;
    const bool valid = rg < ci.rows_total;
    const T* src = q;
    if (valid) {
      const int i = rg / G, g = rg - i * G;
      src = q + int64_t(ci.s.q0 + i) * p.q_s0 + int64_t(ci.h * G + g) * p.q_s1 +
            c * 8;
    }
    tc::cp_async_16(q_base + (c / C::kPanelChunks) * C::kQPanelBytes +
                        sm90::sw128_chunk_offset(r, c % C::kPanelChunks),
                    src, valid);
  }
  sm90::cp_async_arrive(q_full);
}

// One tile's copies by warp w: its kCopyToks tokens, 8 lanes per token;
// (phys, off) the lane's table entry (lane i: the warp's token i; phys -1
// past kv_end). Issues cp.async only.
template <typename T, int D>
__device__ __forceinline__ void load_kv_tile(const Params& p, const T* cache,
                                             uint32_t stage, int h, int w,
                                             int lane, int phys, int off) {
  using C = PrefillWgmmaTraits<D>;
  const int j = lane % C::kLanesPerTok;
#pragma unroll
  for (int step = 0; step < C::kCopySteps; ++step) {
    const int held = step * C::kToksPerCopy + lane / C::kLanesPerTok;
    const int tok = w * C::kCopyToks + held;
    const int tphys = __shfl_sync(0xffffffffu, phys, held);
    const int toff = __shfl_sync(0xffffffffu, off, held);
    const bool valid = tphys >= 0 && tphys < p.num_blocks;
    // src stays a valid address when nothing is read (zero fill).
    const T* src =
        cache + j * 8 +
        (valid ? ((int64_t(tphys) * p.num_kv_heads + h) * p.block_size + toff) *
                     (2 * D)
               : int64_t(0));
    const uint32_t dst = stage + sm90::sw128_chunk_offset(tok, j);
#pragma unroll
    for (int it = 0; it < C::kChunkSteps; ++it) {
      // Chunk it * 8 + j of the token: panel it, chunk j of the row.
      tc::cp_async_16(dst + it * C::kKvPanelBytes,
                      src + it * C::kLanesPerTok * 8, valid);
    }
  }
}

// The producer warpgroup's work (tid = its thread index, 0..127): Q, then
// every tile of [0, n_tiles) into stage t % kStages once both consumer
// warpgroups released it. The block-table entry of tile t + 1 is read
// before the wait for tile t's stage, so its round trip overlaps the wait.
template <typename T, int D>
__device__ __forceinline__ void prefill_wgmma_produce(
    const Params& p, const WgmmaCtaInfo& ci, uint32_t q_base, uint32_t kv_base,
    uint64_t* full, uint64_t* empty, uint64_t* q_full, int tid) {
  using C = PrefillWgmmaTraits<D>;
  const int w = tid / 32, lane = tid % 32;
  const int* table = p.table + int64_t(ci.b) * p.table_s0;
  const int my_tok = w * C::kCopyToks + lane;
  int phys, off;
  table_entry(p, table, my_tok, ci.kv_end, phys, off);
  load_q_tile<T, D>(p, ci, q_base, q_full, tid);
  const T* cache = static_cast<const T*>(p.cache);
  for (int t = 0; t < ci.n_tiles; ++t) {
    const int s = t % C::kStages;
    int next_phys = -1, next_off = 0;
    if (t + 1 < ci.n_tiles) {
      table_entry(p, table, (t + 1) * C::kTileN + my_tok, ci.kv_end, next_phys,
                  next_off);
    }
    sm90::mbar_wait(&empty[s], ((t / C::kStages) & 1) ^ 1);
    load_kv_tile<T, D>(p, cache, kv_base + s * C::kStageBytes, ci.h, w, lane,
                       phys, off);
    sm90::cp_async_arrive(&full[s]);
    phys = next_phys;
    off = next_off;
  }
  // Nothing of this thread in flight when it exits (commit + wait 0 is
  // cp.async.wait_all: the copies above are in no committed group).
  tc::cp_async_commit();
  tc::cp_async_wait<0>();
}

}  // namespace vllm_myops::attention_cuda
