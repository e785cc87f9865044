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
//   in the previous iteration, then wait for wgmma(i - 1) (one k-tile of
//   wgmma stays in flight), release k-tile i - 1's stage, wait for stage
//   i + 1 and dequantize it into the fragment buffer wgmma(i - 1) read.
// - The producer is cuda/w4a16_wgmma_producer.cuh.
// Edges: weight tiles past the last n-tile are not copied; the warpgroup
// that owns such an n-tile issues no dequant and no wgmma (its columns are
// never stored) but keeps the barrier protocol.

#include <algorithm>
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
#include "quantization/w4a16/cuda/w4a16_wgmma_producer.cuh"
#include "quantization/w4a16/cuda/w4a16_wgmma_tile.cuh"

namespace vllm_myops::w4a16::wgmma {
namespace {

namespace layout = cuda_layout;
using dev::GemmArgs;
using tile::kTileBytes;

constexpr int kConsumerWarps = 4 * kWarpgroups;
// setmaxnreg of the builds that reallocate: 128 x 40 + 256 x 232 <= 64 K.
constexpr int kProducerRegs = 40, kConsumerRegs = 232;

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

// A consumer warpgroup's mainloop over its `count` k-tiles, two fragment
// buffers: after issuing wgmma(i) a consumer waits only for wgmma(i - 1),
// which frees k-tile i - 1's stage (released then) and the buffer it read,
// into which k-tile i + 1 is dequantized while wgmma(i) runs. Every consumer
// thread releases every stage after its own last read of it (its fragments
// were read one k-tile earlier; the wait covers wgmma's activation reads).
template <typename T, int kBN, bool kZeros>
struct Consumer {
  using C = Config<kBN>;
  using Frag = uint32_t[layout::kSteps][4];
  using Acc = float[C::kSub][C::kAcc];
  const GemmArgs& p;
  uint8_t* smem;
  uint64_t* full;
  uint64_t* empty;
  int count, wg, warp, lane;
  bool active;      // warpgroup-uniform: whether its n-tile exists
  bool two_halves;  // tile::GroupRows::halves(p) == 2

  __device__ __forceinline__ const uint8_t* stage(int i) const {
    return smem + (i % C::kStages) * C::kStageBytes;
  }
  // Waits for k-tile i's stage and dequantizes the warp's fragments of it.
  __device__ __forceinline__ void load(int i, Frag& f) const {
    sm90::mbar_wait(&full[i % C::kStages], (i / C::kStages) & 1);
    if (active) {
      tile::dequant_tile<T, kZeros>(weights_of<kBN>(stage(i), wg),
                                    groups_of<kBN>(stage(i)), two_halves, wg,
                                    warp, lane, f);
    }
  }
  __device__ __forceinline__ void release(int i) const {
    sm90::mbar_arrive(&empty[i % C::kStages]);
  }
  // k-tile i on `cur` (dequantized before); k-tile i + 1 into `next`.
  __device__ __forceinline__ void step(int i, Acc& acc, Frag& cur,
                                       Frag& next) const {
    if (active) tile::mma_k_tile<T, kBN>(acc, cur, tc::smem_addr(stage(i)));
    sm90::wgmma_wait<1>();
#pragma unroll
    for (int st = 0; st < layout::kSteps; ++st) sm90::fence_operands(next[st]);
    if (i > 0) release(i - 1);
    if (i + 1 < count) load(i + 1, next);
  }
  __device__ __forceinline__ void run(Acc& acc) const {
    Frag f0, f1;
    load(0, f0);
    // Two k-tiles per trip: each buffer stays one set of registers.
    for (int i = 0; i < count; i += 2) {
      step(i, acc, f0, f1);
      if (i + 1 < count) step(i + 1, acc, f1, f0);
    }
    sm90::wgmma_wait<0>();
#pragma unroll
    for (int u = 0; u < C::kSub; ++u) sm90::fence_operands(acc[u]);
    release(count - 1);
  }
};

// Grid (token tile, column block, K-split), token tiles fastest: the blocks
// that read the same weight tiles run together (all but one hit L2).
// kZeros: p.zeros != nullptr (one build each, so the symmetric consumer has
// no zero-point work or branch per k-tile).
template <typename T, int kBN, bool kZeros>
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

  const bool bulk_rows = producer::rows_by_bulk(p);
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
        producer::produce<C>(&act_map, p, smem, full, empty, tok0, nt0, kt0,
                             count, lane);
      } else if (lane == 0) {
        producer::produce_bulk<C>(&act_map, p, smem, full, empty, tok0, nt0,
                                  kt0, count);
      }
    }
    return;
  }

  if constexpr (C::kRealloc) sm90::setmaxnreg_inc<kConsumerRegs>();
  const int wg = warp_id / 4, warp = warp_id % 4;
  const int n0 = (nt0 + wg) * layout::kTileN;
  float acc[C::kSub][C::kAcc];
#pragma unroll
  for (int u = 0; u < C::kSub; ++u)
#pragma unroll
    for (int i = 0; i < C::kAcc; ++i) acc[u][i] = 0.f;
  if (count > 0) {
    const Consumer<T, kBN, kZeros> consumer{
        p,  smem, full, empty,    count,
        wg, warp, lane, n0 < p.n, tile::GroupRows::halves(p) == 2};
    consumer.run(acc);
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

template <typename T, int kBN, bool kZeros>
void launch_build(const GemmArgs& args, cudaStream_t stream) {
  using C = Config<kBN>;
  constexpr auto kKernel = w4a16_wgmma_tma_kernel<T, kBN, kZeros>;
  cuda::allow_dynamic_smem<kKernel>(C::kSmemBytes);
  const CUtensorMap map = activation_map(args, std::is_same_v<T, __half>, kBN);
  const int n_tiles = (args.n + layout::kTileN - 1) / layout::kTileN;
  const dim3 grid((args.m + kBN - 1) / kBN,
                  (n_tiles + kWarpgroups - 1) / kWarpgroups, args.splits);
  kKernel<<<grid, C::kThreads, C::kSmemBytes, stream>>>(map, args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T, int kBN>
void launch_tile(const GemmArgs& args, cudaStream_t stream) {
  if (args.zeros != nullptr) {
    launch_build<T, kBN, true>(args, stream);
  } else {
    launch_build<T, kBN, false>(args, stream);
  }
}

// Resident blocks per SM of the token tile's builds: the fewer of the
// builds with and without zero points (their registers may differ), so the
// split plan, which does not know which one runs, never counts on more.
template <typename T, int kBN>
int resident_blocks_of() {
  using C = Config<kBN>;
  static const int blocks =
      std::min(cuda::resident_blocks<w4a16_wgmma_tma_kernel<T, kBN, false>>(
                   C::kThreads, C::kSmemBytes),
               cuda::resident_blocks<w4a16_wgmma_tma_kernel<T, kBN, true>>(
                   C::kThreads, C::kSmemBytes));
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
