// SPDX-License-Identifier: Apache-2.0
//
// W4A16 GEMM on Hopper wgmma, warp-specialized (sm_90a): the kernel of path
// "wgmma_tma", out^T = W^T a^T (cuda/w4a16_wgmma.h says why; fragments,
// dequant, the wgmma k-tile and the epilogue are cuda/w4a16_wgmma_tile.cuh).
// Tiles: two consumer warpgroups, one 64-column layout n-tile each; token
// tiles of 16 / 32 / 64 / 128 / 256 (wgmma's N side); 64 k per stage.
//
// - A producer warp (warp 4 kWarpgroups, after the consumer warpgroups) fills
//   kStages stages. Per k-tile one lane issues the activation tile by TMA (a
//   2-D tensor map over a, box 64 k x kBN rows, 128-byte swizzle: the layout
//   the wgmma B descriptor reads; rows >= M and k >= K arrive as zeros), the
//   block's packed weight tiles (2 KB each, contiguous in global memory) and
//   the k-tile's group rows (scales, zeros; tile::GroupRows) by bulk copy,
//   all completing on the stage's `full` mbarrier with their byte count. A
//   k-tile's scales thus arrive kStages k-tiles ahead, as its weights do: the
//   consumers' per-k-tile path has no global load on it. The producer's own
//   per-k-tile path is a handful of instructions (pointers advance, no
//   per-k-tile address arithmetic beyond the group row): one warp feeds two
//   warpgroups, so its issue time per k-tile bounds the block's k-tile time
//   at small token tiles. Group rows that cannot be bulk copied (N % 8 != 0
//   or scales / zeros not 16-byte aligned: odd shapes, offset views) are
//   copied by all 32 lanes instead (cp.async of 4 bytes, or plain loads),
//   each lane's completion one more arrival on `full`.
// - The consumer warpgroups wait on `full`, never on each other: no block
//   barrier in the mainloop. Every consumer thread releases a stage (one
//   arrival on its `empty` mbarrier, counted for all of them) after its own
//   reads of it: its weight words and group rows were read (dequantized) one
//   k-tile earlier, and its wait for the warpgroup's wgmma covers the
//   activations. Each reader releasing for itself is the form
//   compute-sanitizer's racecheck follows (one arrival per warp or per
//   warpgroup after a warp or named barrier is reported as a hazard).
// - Per k-tile i the consumers issue wgmma(i) on the fragments dequantized
//   in the previous iteration, wait for stage i + 1 and dequantize it under
//   the wgmma, then wait for wgmma(i) and release stage i.
// Edges: weight tiles past the last n-tile are not copied; the warpgroup
// that owns such an n-tile issues no dequant and no wgmma (its columns are
// never stored) but keeps the barrier protocol.

#include <cstdint>
#include <type_traits>

#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/launch.cuh"
#include "cuda/mma_utils.cuh"
#include "cuda/sm90_pipeline.cuh"
#include "cuda/sm90_utils.cuh"
#include "quantization/w4a16/cuda/w4a16_layout.cuh"
#include "quantization/w4a16/cuda/w4a16_mma_common.cuh"
#include "quantization/w4a16/cuda/w4a16_wgmma.h"
#include "quantization/w4a16/cuda/w4a16_wgmma_tile.cuh"

namespace vllm_myops::w4a16::wgmma {
namespace {

namespace layout = cuda_layout;
using dev::GemmArgs;
using tile::kTileBytes;

constexpr int kConsumerWarps = 4 * kWarpgroups;
// setmaxnreg of the builds that reallocate: 128 x 40 + 256 x 232 <= 64 K.
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kTileQuads = layout::kTileWords / 4;

// Stages: at least ~24 KB of weight tiles in flight per block at the small
// token tiles, fewer at the large ones, where the activation tile dominates a
// stage. Two resident blocks where the registers allow (one block's epilogue
// and pipeline fill run beside the other's mainloop); the 128- and 256-token
// tiles need more than two blocks' share (their 2 and 4 accumulator sets),
// so one.
// A stage: activations, the block's weight tiles, then its group rows.
template <int kBN>
struct Config : tile::TokenTile<kBN> {
  using tile::TokenTile<kBN>::kActBytes;
  static constexpr int kGroupOffset = kActBytes + kWarpgroups * kTileBytes;
  static constexpr int kStageBytes = kGroupOffset + tile::GroupRows::kBytes;
  static constexpr int kStages = kBN <= 32 ? 8 : kBN == 64 ? 6 : 4;
  static constexpr int kMinBlocks = kBN >= 128 ? 1 : 2;
  // The 256-token tile's four accumulator sets need more registers than an
  // even share of the file: its producer is a whole warpgroup (one warp
  // works) that gives registers back to the consumers (kProducerRegs,
  // kConsumerRegs). The others: one producer warp, no reallocation.
  static constexpr bool kRealloc = kBN == 256;
  static constexpr int kThreads = 32 * kConsumerWarps + (kRealloc ? 128 : 32);
  // Stages from a 1024-byte boundary (the swizzle atom; the TMA box and the
  // descriptors need it), then the full and empty barriers.
  static constexpr int kBarrierOffset = kStages * kStageBytes;
  static constexpr int kSmemBytes = kBarrierOffset + 2 * kStages * 8 + 1024;
  static_assert(kStageBytes % sm90::kSwizzleAtomBytes == 0,
                "each stage starts on a swizzle atom");
};

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
template <int kBN>
__device__ __forceinline__ void produce_bulk(const CUtensorMap* act_map,
                                             const GemmArgs& p, uint8_t* smem,
                                             uint64_t* full, uint64_t* empty,
                                             int tok0, int nt0, int kt0,
                                             int count) {
  using C = Config<kBN>;
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
template <int kBN>
__device__ __forceinline__ void produce(const CUtensorMap* act_map,
                                        const GemmArgs& p, uint8_t* smem,
                                        uint64_t* full, uint64_t* empty,
                                        int tok0, int nt0, int kt0, int count,
                                        int lane) {
  using C = Config<kBN>;
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

// Warpgroup wg's packed weight tile in `stage` (after the activations).
template <int kBN>
__device__ __forceinline__ const uint32_t* weights_of(const uint8_t* stage,
                                                      int wg) {
  return reinterpret_cast<const uint32_t*>(stage + Config<kBN>::kActBytes +
                                           wg * kTileBytes);
}

// The stage's group rows (tile::GroupRows).
template <int kBN>
__device__ __forceinline__ const uint16_t* groups_of(const uint8_t* stage) {
  return reinterpret_cast<const uint16_t*>(stage + Config<kBN>::kGroupOffset);
}

// Grid (token tile, column block, K-split), token tiles fastest: the blocks
// that read the same weight tiles run together (all but one hit L2).
template <typename T, int kBN>
__global__ void __launch_bounds__(Config<kBN>::kThreads,
                                  Config<kBN>::kMinBlocks)
    w4a16_wgmma_tma_kernel(const __grid_constant__ CUtensorMap act_map,
                           const GemmArgs p) {
  using C = Config<kBN>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem =
      smem_raw + ((1024u - (tc::smem_addr(smem_raw) & 1023u)) & 1023u);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kBarrierOffset);
  uint64_t* empty = full + C::kStages;
  const int tid = threadIdx.x;
  const int warp_id = tid / 32, lane = tid % 32;
  const int tok0 = blockIdx.x * kBN;
  const int nt0 = blockIdx.y * kWarpgroups;
  const int kt0 = blockIdx.z * p.kt_per_split;
  const int count = max(0, min(p.k_tiles, kt0 + p.kt_per_split) - kt0);

  const bool bulk_rows = rows_by_bulk(p);
  if (tid == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      // The producer's arrive_expect_tx, and where the group rows are not
      // bulk copied its 32 lanes' arrivals for them.
      sm90::mbar_init(&full[s], bulk_rows ? 1 : 1 + 32);
      sm90::mbar_init(&empty[s], 32 * kConsumerWarps);
    }
    sm90::fence_barrier_init();
  }
  __syncthreads();

  if (warp_id >= kConsumerWarps) {
    if constexpr (C::kRealloc) sm90::setmaxnreg_dec<kProducerRegs>();
    if (warp_id == kConsumerWarps && count > 0) {
      if (!bulk_rows) {
        produce<kBN>(&act_map, p, smem, full, empty, tok0, nt0, kt0, count,
                     lane);
      } else if (lane == 0) {
        produce_bulk<kBN>(&act_map, p, smem, full, empty, tok0, nt0, kt0,
                          count);
      }
    }
    return;
  }

  if constexpr (C::kRealloc) sm90::setmaxnreg_inc<kConsumerRegs>();
  const int wg = warp_id / 4, warp = warp_id % 4;
  const int n0 = (nt0 + wg) * layout::kTileN;
  // Warpgroup-uniform: whether its n-tile exists.
  const bool active = n0 < p.n;
  float acc[C::kSub][C::kAcc];
#pragma unroll
  for (int u = 0; u < C::kSub; ++u)
#pragma unroll
    for (int i = 0; i < C::kAcc; ++i) acc[u][i] = 0.f;

  if (count > 0) {
    uint32_t a[layout::kSteps][4];
    sm90::mbar_wait(&full[0], 0);
    if (active) {
      tile::dequant_tile<T>(p, weights_of<kBN>(smem, wg), groups_of<kBN>(smem),
                            wg, warp, lane, a);
    }
    for (int i = 0; i < count; ++i) {
      const int s = i % C::kStages;
      if (active) {
        tile::mma_k_tile<T, kBN>(acc, a,
                                 tc::smem_addr(smem + s * C::kStageBytes));
      }
      uint32_t a_next[layout::kSteps][4];
      if (i + 1 < count) {
        const int s1 = (i + 1) % C::kStages;
        sm90::mbar_wait(&full[s1], ((i + 1) / C::kStages) & 1);
        if (active) {
          const uint8_t* stage1 = smem + s1 * C::kStageBytes;
          tile::dequant_tile<T>(p, weights_of<kBN>(stage1, wg),
                                groups_of<kBN>(stage1), wg, warp, lane, a_next);
        }
      }
      sm90::wgmma_wait<0>();
#pragma unroll
      for (int u = 0; u < C::kSub; ++u) sm90::fence_operands(acc[u]);
#pragma unroll
      for (int st = 0; st < layout::kSteps; ++st) sm90::fence_operands(a[st]);
      sm90::mbar_arrive(&empty[s]);
      if (i + 1 < count) {
#pragma unroll
        for (int st = 0; st < layout::kSteps; ++st)
#pragma unroll
          for (int j = 0; j < 4; ++j) a[st][j] = a_next[st][j];
      }
    }
  }
  tile::store_tile<T, kBN>(p, acc, tok0, n0, warp, lane);
}

// ---- Host
// --------------------------------------------------------------------

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    C10_CUDA_CHECK(cudaGetDriverEntryPointByVersion(
        "cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    TORCH_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr,
                "w4a16_gemm: the CUDA driver has no cuTensorMapEncodeTiled "
                "(the wgmma_tma path needs a driver for CUDA 12.0 or newer)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// The activation's tensor map: a as [M rows, K] with row stride a_stride,
// boxes of 64 k x kBN rows in the 128-byte swizzle, zeros outside.
CUtensorMap activation_map(const GemmArgs& p, bool is_half, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(p.k),
                              static_cast<cuuint64_t>(p.m)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(p.a_stride) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(layout::kTileK),
                             static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(
      &map,
      is_half ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
              : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
      2, const_cast<void*>(p.a), dims, strides, box, elem_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TORCH_CHECK(r == CUDA_SUCCESS, "w4a16_gemm: cuTensorMapEncodeTiled failed (",
              static_cast<int>(r), ") for a of ", p.m, " x ", p.k,
              ", row stride ", p.a_stride);
  return map;
}

template <typename T, int kBN>
void launch_tile(const GemmArgs& args, cudaStream_t stream) {
  using C = Config<kBN>;
  constexpr auto kKernel = w4a16_wgmma_tma_kernel<T, kBN>;
  cuda::allow_dynamic_smem<kKernel>(C::kSmemBytes);
  const CUtensorMap map = activation_map(args, std::is_same_v<T, __half>, kBN);
  const int n_tiles = (args.n + layout::kTileN - 1) / layout::kTileN;
  const dim3 grid((args.m + kBN - 1) / kBN,
                  (n_tiles + kWarpgroups - 1) / kWarpgroups, args.splits);
  kKernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(map, args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, int kBN>
int resident_blocks_of() {
  using C = Config<kBN>;
  constexpr auto kKernel = w4a16_wgmma_tma_kernel<T, kBN>;
  static const int blocks = [] {
    cuda::allow_dynamic_smem<kKernel>(C::kSmemBytes);
    int b = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &b, kKernel, C::kThreads, C::kSmemBytes));
    return b > 1 ? b : 1;
  }();
  return blocks;
}

template <typename T>
void launch_typed(const GemmArgs& args, cudaStream_t stream) {
  with_token_tile(args.m, [&](auto bn) {
    launch_tile<T, decltype(bn)::value>(args, stream);
  });
}

template <typename T>
int resident_blocks_typed(int64_t m) {
  return with_token_tile(
      m, [](auto bn) { return resident_blocks_of<T, decltype(bn)::value>(); });
}

}  // namespace

int stages(int64_t m) {
  return with_token_tile(
      m, [](auto bn) { return Config<decltype(bn)::value>::kStages; });
}

int resident_blocks(int64_t m, bool is_half) {
  return is_half ? resident_blocks_typed<__half>(m)
                 : resident_blocks_typed<__nv_bfloat16>(m);
}

void launch(const GemmArgs& args, bool is_half, cudaStream_t stream) {
  if (is_half) {
    launch_typed<__half>(args, stream);
  } else {
    launch_typed<__nv_bfloat16>(args, stream);
  }
}

}  // namespace vllm_myops::w4a16::wgmma
