// SPDX-License-Identifier: Apache-2.0
//
// K/V tile loads of the CUDA paged-attention kernels, global -> shared
// memory by cp.async (16-byte vectors, rows XOR-swizzled by tc::swizzled):
// the block-table lookup of one token, and the K/V tile loader all three
// kernels share (KvTileLoader, shaped by head dim and tile tokens). The Q
// tile loads stay in each kernel's mainloop: the same rows, but each
// kernel's own index arithmetic, which ptxas allocates differently.
#pragma once

#include <cstdint>

#include "attention/cuda/params.cuh"
#include "attention/cuda/traits.cuh"
#include "cuda/mma_utils.cuh"

namespace vllm_myops::attention_cuda {

// Token pos's (physical block, offset) from the sequence's block-table row;
// phys -1 at or past `bound`.
__device__ __forceinline__ void table_entry(const Params& p, const int* table,
                                            int pos, int bound, int& phys,
                                            int& off) {
  phys = -1;
  off = 0;
  if (pos < bound) {
    const int blk =
        p.block_size == 1 ? pos : int(p.block_div.divide(uint32_t(pos)));
    off = pos - blk * p.block_size;
    phys = __ldg(table + blk);
  }
}

// K/V tile of kTileN tokens, one 4*D-byte row per token (its K and V rows
// are adjacent in the cache), D / 4 XOR-swizzled 16-byte chunks.
// Warp w copies tokens [w, w + 1) * kTileN / 4 of each tile, 8 lanes per
// token, lane j of a token taking chunks j, j + 8, ...: one copy
// instruction reads 4 tokens x 128 contiguous bytes, 4 whole cache lines
// (16 tokens x 32 bytes would be 16 lines; if the L1/LSU pipeline takes a
// cycle per line, an assumption, that is ~256 cycles per 8 KB quarter, 32
// bytes/cycle/SM, too close to the ~18 the HBM bandwidth needs with
// ldmatrix on the same pipeline).
// Lane i holds the block-table entry of the warp's token i % kCopyToks (a
// tile ahead, read with table_entry at entry_tok) and the copies take it by
// shuffle, so a tile's copies never wait on a table read. (Read per copy,
// the table reads of a tile are serial round trips.)
template <int D, int kTileN>
struct KvTileLoader {
  static constexpr int kChunksKV = D / 4;  // 16-byte chunks per token
  static constexpr int kCopyToks = kTileN / kWarps;
  static constexpr int kLanesPerTok = 8;
  static constexpr int kToksPerCopy = 32 / kLanesPerTok;
  static constexpr int kTokGroups = kCopyToks / kToksPerCopy;
  static constexpr int kChunkSteps = kChunksKV / kLanesPerTok;
  static_assert(kTokGroups * kToksPerCopy == kCopyToks &&
                kChunkSteps * kLanesPerTok == kChunksKV);

  // The tile token whose table entry lane `lane` of warp `warp` holds.
  static __device__ __forceinline__ int entry_tok(int warp, int lane) {
    return warp * kCopyToks + lane % kCopyToks;
  }

  // Copies the warp's tokens of one tile (kv head h) to dst0; (phys, off)
  // the lane's table entry, phys -1 past the CTA's range; copy_lane = lane
  // % kLanesPerTok, copy_sub = lane / kLanesPerTok (the caller's, so that
  // it decides where they are computed). Issues cp.async only; the caller
  // commits.
  template <typename T>
  static __device__ __forceinline__ void load(const Params& p, const T* cache,
                                              uint32_t dst0, int h, int warp,
                                              int copy_lane, int copy_sub,
                                              int phys, int off) {
#pragma unroll
    for (int gi = 0; gi < kTokGroups; ++gi) {
      // Token tok of the warp's range; lane `held` holds its table entry.
      const int held = gi * kToksPerCopy + copy_sub;
      const int tok = warp * kCopyToks + held;
      const int tphys = __shfl_sync(0xffffffffu, phys, held);
      const int toff = __shfl_sync(0xffffffffu, off, held);
      // Zero fill past kv_end (phys = -1) and for block ids outside
      // [0, num_blocks); src stays a valid address then (nothing is read).
      const bool valid = tphys >= 0 && tphys < p.num_blocks;
      const T* src =
          cache + copy_lane * 8 +
          (valid
               ? ((int64_t(tphys) * p.num_kv_heads + h) * p.block_size + toff) *
                     (2 * D)
               : int64_t(0));
#pragma unroll
      for (int it = 0; it < kChunkSteps; ++it) {
        const int c = it * kLanesPerTok + copy_lane;
        tc::cp_async_16(dst0 + tc::swizzled<kChunksKV>(tok, c),
                        src + it * kLanesPerTok * 8, valid);
      }
    }
  }
};

}  // namespace vllm_myops::attention_cuda
