// SPDX-License-Identifier: Apache-2.0
//
// The producer warp of the Hopper W4A16 kernel (csrc/sm90a/w4a16_wgmma_tma.cu):
// k-tiles into the stages of its mbarrier pipeline. A stage (the kernel's
// Config C: kStages stages of kStageBytes from a 1024-byte boundary) holds the
// activation tile (kActBytes, by TMA), the block's packed weight tiles
// (kTileBytes each, by bulk copy) and, at kGroupOffset, the k-tile's group
// rows (tile::GroupRows). Every copy completes on the stage's `full`
// mbarrier; the producer waits on `empty` before it refills a stage.
#pragma once

#include <cstdint>

#include <cuda.h>

#include "cuda/mma_utils.cuh"
#include "cuda/sm90_pipeline.cuh"
#include "quantization/w4a16/cuda/w4a16_layout.cuh"
#include "quantization/w4a16/cuda/w4a16_mma_common.cuh"
#include "quantization/w4a16/cuda/w4a16_wgmma.h"
#include "quantization/w4a16/cuda/w4a16_wgmma_tile.cuh"

namespace vllm_myops::w4a16::wgmma::producer {

namespace layout = cuda_layout;
using dev::GemmArgs;
using tile::kTileBytes;
constexpr int kTileQuads = layout::kTileWords / 4;

// Lane `lane`'s share of k-tile kt's group rows (columns n_base + 4 lane ..
// + 3 of each row) into the stage's GroupRows `area`, then its arrival on
// `full`. cp.async (completion counted on `full`) when every pair of columns
// is one aligned 4-byte word: N even and scales / zeros 4-byte aligned;
// otherwise plain loads and stores before the arrival (an odd N or a
// misaligned view: correct, slower).
__device__ __forceinline__ void produce_group_rows(const GemmArgs& p,
                                                   uint8_t* area, int kt,
                                                   int n_base, int lane,
                                                   bool aligned,
                                                   uint64_t* full) {
  using tile::GroupRows;
  const int halves = GroupRows::halves(p);
  const int parts = p.zeros != nullptr ? 2 : 1;
  for (int h = 0; h < halves; ++h) {
    const int64_t row = static_cast<int64_t>(dev::group_of(p, kt, 2 * h)) * p.n;
    for (int z = 0; z < parts; ++z) {
      const auto* src = static_cast<const uint16_t*>(z ? p.zeros : p.scales);
      uint16_t* dst = reinterpret_cast<uint16_t*>(area) + GroupRows::row(h, z);
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int col = 4 * lane + 2 * c;
        const int n = n_base + col;
        if (aligned) {
          const int bytes = n + 1 < p.n ? 4 : n < p.n ? 2 : 0;
          tc::cp_async_4(tc::smem_addr(dst + col),
                         bytes > 0 ? src + row + n : src, bytes);
        } else {
          const uint32_t lo = n < p.n ? __ldg(src + row + n) : 0u;
          const uint32_t hi = n + 1 < p.n ? __ldg(src + row + n + 1) : 0u;
          *reinterpret_cast<uint32_t*>(dst + col) = lo | (hi << 16);
        }
      }
    }
  }
  if (aligned) {
    sm90::cp_async_arrive(full);
  } else {
    sm90::mbar_arrive(full);
  }
}

// Whether the group rows go by bulk copy (produce_bulk): every row's slice
// of a block's columns (cut at N) is whole 16-byte units at 16-byte aligned
// addresses. Uniform per launch; it sets the count of `full`.
__device__ __forceinline__ bool rows_by_bulk(const GemmArgs& p) {
  const auto aligned16 = [](const void* q) {
    return (reinterpret_cast<uintptr_t>(q) & 15u) == 0;
  };
  return p.n % 8 == 0 && aligned16(p.scales) &&
         (p.zeros == nullptr || aligned16(p.zeros));
}

// The producer of launches whose group rows go by bulk copy, run by one
// lane: k-tiles kt0 .. kt0 + count - 1 into the stages, in order, every copy
// counted on the stage's `full` by bytes. Group rows are cut at N (the rest
// of the area keeps older values; those columns are never stored).
template <class C>
__device__ __forceinline__ void produce_bulk(const CUtensorMap* act_map,
                                             const GemmArgs& p, uint8_t* smem,
                                             uint64_t* full, uint64_t* empty,
                                             int tok0, int nt0, int kt0,
                                             int count) {
  using tile::GroupRows;
  const int n_tiles = (p.n + layout::kTileN - 1) / layout::kTileN;
  const int tiles = min(kWarpgroups, n_tiles - nt0);
  const int n_base = nt0 * layout::kTileN;
  const uint32_t row_bytes = min(GroupRows::kCols, p.n - n_base) * 2;
  const int halves = GroupRows::halves(p);
  const auto* scales = static_cast<const uint16_t*>(p.scales) + n_base;
  const auto* zeros = static_cast<const uint16_t*>(p.zeros);
  if (zeros != nullptr) zeros += n_base;
  const uint32_t bytes = C::kActBytes + tiles * kTileBytes +
                         halves * (zeros != nullptr ? 2 : 1) * row_bytes;
  const int64_t tile_stride = static_cast<int64_t>(p.k_tiles) * kTileQuads;
  const uint4* w = p.b + static_cast<int64_t>(nt0) * tile_stride +
                   static_cast<int64_t>(kt0) * kTileQuads;
  // dev::group_of without its division: where there are several groups,
  // group_size is 32, 64 or 128 (w4a16_args), a shift.
  const int group_shift = __ffs(p.group_size) - 1;
  sm90::prefetch_tensormap(act_map);
  int s = 0;
  uint32_t phase = 0;  // parity of the empty-barrier completion to wait for
  for (int j = 0; j < count; ++j, w += kTileQuads) {
    // Stage s's (j / kStages)-th refill waits for the consumers' release of
    // its previous k-tile, completion j / kStages - 1 of empty[s].
    if (j >= C::kStages) sm90::mbar_wait(&empty[s], phase);
    uint8_t* stage = smem + s * C::kStageBytes;
    const int kt = kt0 + j;
    sm90::mbar_arrive_expect_tx(&full[s], bytes);
    sm90::tma_load_2d(stage, act_map, kt * layout::kTileK, tok0, &full[s]);
#pragma unroll
    for (int t = 0; t < kWarpgroups; ++t) {
      if (t < tiles) {
        sm90::bulk_copy_g2s(stage + C::kActBytes + t * kTileBytes,
                            w + t * tile_stride, kTileBytes, &full[s]);
      }
    }
    auto* area = reinterpret_cast<uint16_t*>(stage + C::kGroupOffset);
    for (int h = 0; h < halves; ++h) {
      const int k = kt * layout::kTileK + 32 * h;
      const int group = p.groups == 1 ? 0 : min(k >> group_shift, p.groups - 1);
      const int64_t row = static_cast<int64_t>(group) * p.n;
      sm90::bulk_copy_g2s(area + GroupRows::row(h, 0), scales + row, row_bytes,
                          &full[s]);
      if (zeros != nullptr) {
        sm90::bulk_copy_g2s(area + GroupRows::row(h, 1), zeros + row, row_bytes,
                            &full[s]);
      }
    }
    if (++s == C::kStages) {
      s = 0;
      if (j >= C::kStages) phase ^= 1u;
    }
  }
}

// The producer warp where the group rows cannot be bulk copied: k-tiles
// kt0 .. kt0 + count - 1 into the stages, in order. Lane 0 issues the TMA
// and bulk copies; every lane its share of the group rows.
template <class C>
__device__ __forceinline__ void produce(const CUtensorMap* act_map,
                                        const GemmArgs& p, uint8_t* smem,
                                        uint64_t* full, uint64_t* empty,
                                        int tok0, int nt0, int kt0, int count,
                                        int lane) {
  const int n_tiles = (p.n + layout::kTileN - 1) / layout::kTileN;
  const int tiles = min(kWarpgroups, n_tiles - nt0);
  const uint32_t bytes = C::kActBytes + tiles * kTileBytes;
  const auto word_aligned = [](const void* q) {
    return q == nullptr || (reinterpret_cast<uintptr_t>(q) & 3u) == 0;
  };
  const bool aligned =
      p.n % 2 == 0 && word_aligned(p.scales) && word_aligned(p.zeros);
  if (lane == 0) sm90::prefetch_tensormap(act_map);
  for (int j = 0; j < count; ++j) {
    const int s = j % C::kStages;
    const int round = j / C::kStages;
    // Round r reuses the stage of k-tile j - kStages: wait for the r-th
    // completion of its empty barrier (parity (r - 1) & 1).
    if (round > 0) sm90::mbar_wait(&empty[s], (round - 1) & 1);
    uint8_t* stage = smem + s * C::kStageBytes;
    const int kt = kt0 + j;
    if (lane == 0) {
      sm90::mbar_arrive_expect_tx(&full[s], bytes);
      sm90::tma_load_2d(stage, act_map, kt * layout::kTileK, tok0, &full[s]);
      for (int w = 0; w < tiles; ++w) {
        const uint4* src =
            p.b + (static_cast<int64_t>(nt0 + w) * p.k_tiles + kt) * kTileQuads;
        sm90::bulk_copy_g2s(stage + C::kActBytes + w * kTileBytes, src,
                            kTileBytes, &full[s]);
      }
    }
    produce_group_rows(p, stage + C::kGroupOffset, kt, nt0 * layout::kTileN,
                       lane, aligned, &full[s]);
  }
}

}  // namespace vllm_myops::w4a16::wgmma::producer
