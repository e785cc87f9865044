// SPDX-License-Identifier: Apache-2.0
//
// W4A16 GEMM on Hopper wgmma, warp-specialized (sm_90a): the kernel of path
// "wgmma_tma", out^T = W^T a^T (cuda/w4a16_wgmma.h says why; fragments,
// dequant, the wgmma k-tile and the epilogue are cuda/w4a16_wgmma_tile.cuh).
// Tiles: two consumer warpgroups, one 64-column layout n-tile each; token
// tiles of 16 / 32 / 64 / 128 (wgmma's N side); 64 k per stage.
//
// - A producer warp (warp 4 kWarpgroups, after the consumer warpgroups) fills
//   kStages stages: one elected lane per k-tile issues the activation tile by
//   TMA (a 2-D tensor map over a, box 64 k x kBN rows, 128-byte swizzle: the
//   layout the wgmma B descriptor reads; rows >= M and k >= K arrive as
//   zeros) and the block's packed weight tiles by bulk copy (2 KB each,
//   contiguous in global memory), all completing on the stage's `full`
//   mbarrier with their byte count.
// - The consumer warpgroups wait on `full`, never on each other: no block
//   barrier in the mainloop. A warpgroup releases a stage (one arrival on
//   its `empty` mbarrier, after a named barrier of its 128 threads) once the
//   wgmma that read its activations completed; its weight words were read
//   (dequantized) one k-tile earlier.
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
#include "cuda/sm90_pipeline.cuh"
#include "cuda/sm90_utils.cuh"
#include "quantization/w4a16/cuda/w4a16_layout.cuh"
#include "quantization/w4a16/cuda/w4a16_mma_common.cuh"
#include "quantization/w4a16/cuda/w4a16_tc_gemm.cuh"
#include "quantization/w4a16/cuda/w4a16_wgmma.h"
#include "quantization/w4a16/cuda/w4a16_wgmma_tile.cuh"

namespace vllm_myops::w4a16::wgmma {
namespace {

namespace layout = cuda_layout;
using dev::GemmArgs;
using dev::GroupRaw;
using tile::kTileBytes;

constexpr int kConsumerWarps = 4 * kWarpgroups;
constexpr int kTmaThreads = 32 * (kConsumerWarps + 1);
constexpr int kTileQuads = layout::kTileWords / 4;

// Stages: at least ~24 KB of weight tiles in flight per block at the small
// token tiles, fewer at the large ones, where
// the activation tile dominates a stage. Two resident blocks where the
// registers allow (one block's epilogue and pipeline fill run beside the
// other's mainloop); the 128-token tile needs more than two blocks' share
// (its two accumulator sets), so one.
template <int kBN>
struct Config : tile::TokenTile<kBN> {
  using tile::TokenTile<kBN>::kActBytes;
  static constexpr int kStageBytes = kActBytes + kWarpgroups * kTileBytes;
  static constexpr int kStages = kBN <= 32 ? 8 : kBN == 64 ? 6 : 4;
  static constexpr int kMinBlocks = kBN == 128 ? 1 : 2;
  // Stages from a 1024-byte boundary (the swizzle atom; the TMA box and the
  // descriptors need it), then the full and empty barriers.
  static constexpr int kBarrierOffset = kStages * kStageBytes;
  static constexpr int kSmemBytes = kBarrierOffset + 2 * kStages * 8 + 1024;
  static_assert(kStageBytes % sm90::kSwizzleAtomBytes == 0,
                "each stage starts on a swizzle atom");
};

// The producer: k-tiles kt0 .. kt0 + count - 1 into the stages, in order.
// One lane.
template <int kBN>
__device__ __forceinline__ void produce(const CUtensorMap* act_map,
                                        const GemmArgs& p, uint8_t* smem,
                                        uint64_t* full, uint64_t* empty,
                                        int tok0, int nt0, int kt0, int count) {
  using C = Config<kBN>;
  const int n_tiles = (p.n + layout::kTileN - 1) / layout::kTileN;
  const int tiles = min(kWarpgroups, n_tiles - nt0);
  const uint32_t bytes = C::kActBytes + tiles * kTileBytes;
  sm90::prefetch_tensormap(act_map);
  for (int j = 0; j < count; ++j) {
    const int s = j % C::kStages;
    const int round = j / C::kStages;
    // Round r reuses the stage of k-tile j - kStages: wait for the r-th
    // completion of its empty barrier (parity (r - 1) & 1).
    if (round > 0) sm90::mbar_wait(&empty[s], (round - 1) & 1);
    uint8_t* stage = smem + s * C::kStageBytes;
    const int kt = kt0 + j;
    sm90::mbar_arrive_expect_tx(&full[s], bytes);
    sm90::tma_load_2d(stage, act_map, kt * layout::kTileK, tok0, &full[s]);
    for (int w = 0; w < tiles; ++w) {
      const uint4* src =
          p.b + (static_cast<int64_t>(nt0 + w) * p.k_tiles + kt) * kTileQuads;
      sm90::bulk_copy_g2s(stage + C::kActBytes + w * kTileBytes, src,
                          kTileBytes, &full[s]);
    }
  }
}

// Warpgroup wg's packed weight tile in `stage` (after the activations).
template <int kBN>
__device__ __forceinline__ const uint32_t* weights_of(const uint8_t* stage,
                                                      int wg) {
  return reinterpret_cast<const uint32_t*>(stage + Config<kBN>::kActBytes +
                                           wg * kTileBytes);
}

// Grid (token tile, column block, K-split), token tiles fastest: the blocks
// that read the same weight tiles run together (all but one hit L2).
template <typename T, int kBN>
__global__ void __launch_bounds__(kTmaThreads, Config<kBN>::kMinBlocks)
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

  if (tid == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      sm90::mbar_init(&full[s], 1);  // the producer's arrive_expect_tx
      sm90::mbar_init(&empty[s], kWarpgroups);
    }
    sm90::fence_barrier_init();
  }
  __syncthreads();

  if (warp_id == kConsumerWarps) {
    if (lane == 0 && count > 0) {
      produce<kBN>(&act_map, p, smem, full, empty, tok0, nt0, kt0, count);
    }
    return;
  }

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
    GroupRaw gr[2];
    uint32_t a[layout::kSteps][4];
    w4a16::tc_gemm::load_tile_groups<2>(p, kt0, 0, n0, lane, gr);
    sm90::mbar_wait(&full[0], 0);
    if (active) {
      tile::dequant_tile<T>(p, weights_of<kBN>(smem, wg), warp, lane, n0, kt0,
                            count > 1, gr, a);
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
          tile::dequant_tile<T>(
              p, weights_of<kBN>(smem + s1 * C::kStageBytes, wg), warp, lane,
              n0, kt0 + i + 1, i + 2 < count, gr, a_next);
        }
      }
      sm90::wgmma_wait<0>();
#pragma unroll
      for (int u = 0; u < C::kSub; ++u) sm90::fence_operands(acc[u]);
#pragma unroll
      for (int st = 0; st < layout::kSteps; ++st) sm90::fence_operands(a[st]);
      // The warpgroup's reads of the stage (every lane's weight words, the
      // completed wgmma's activations) end at its named barrier; then one
      // thread's release orders them all before the refill.
      sm90::named_barrier_sync(1 + wg, 128);
      if (warp == 0 && lane == 0) sm90::mbar_arrive(&empty[s]);
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
  kKernel<<<grid, kTmaThreads, C::kSmemBytes, stream>>>(map, args);
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
        &b, kKernel, kTmaThreads, C::kSmemBytes));
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
