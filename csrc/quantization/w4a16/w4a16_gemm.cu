// SPDX-License-Identifier: Apache-2.0
//
// w4a16_gemm on CUDA (sm_80+): out[M, N] = a[M, K] @ dequant(W)[K, N] + bias,
// dequant W = (q - z) * s per group of K rows, fp32 accumulation.
//
// Weight layout: b_packed tiles as arranged by w4a16_repack.cu
// (cuda/w4a16_layout.cuh): a warp's 16-byte load of k16 step s of a tile is
// exactly the 4 words holding its mma.sync m16n8k16 B fragments for the 8
// n8 blocks of that step, so B goes from global memory straight to registers
// (no shared memory, no ldmatrix for B), read once, coalesced.
//
// Paths by M under "auto" (constants below; docs/quantization/design.md):
//   M = 0                   empty output, no launch.
//   1 <= M <= kRingMaxM     tensor-core decode kernels: w4a16_swap_kernel for
//                           M <= kSwapMaxM (out^T = W^T a^T: the codes are the
//                           mma's A operand, scales and zeros applied per group
//                           to fp32 sums; B through a per-warp cp.async ring in
//                           shared memory), w4a16_decode_kernel (its 4-blocks
//                           build, M tiles of 16) above. w4a16_mma_kernel (M
//                           tiles of 16 * kMaxMTiles, B in a register ring)
//                           is a forced path only.
//                           A block is 4 warps on one (n-tile, M-tile,
//                           K-split); the warps split the k-tiles of the
//                           split and are summed in shared memory in a fixed
//                           order. Blocks run M-tiles fastest (shared weight
//                           tiles hit L2). When the n-tiles x M-tiles leave
//                           the GPU's resident block slots poorly filled
//                           (choose_splits), K is split across blocks: each
//                           split writes its fp32 partial to its own slice
//                           of a workspace (caching allocator, no memset)
//                           and a second kernel sums the slices in split
//                           order, adds the bias and rounds once
//                           (deterministic, no host sync, CUDA-graph
//                           capturable).
//   kRingMaxM < M < kTcMaxM w4a16_tc_kernel (cuda/w4a16_tc_gemm.cuh): A and
//                           B through a cp.async pipeline in shared memory,
//                           blocks of 32 / 64 rows x 256 columns, split-K
//                           (the same workspace and reduce kernel) from a
//                           cost model (choose_tc_splits).
//   M >= kTcMaxM            dequantize W to a's dtype (one kernel), then
//                           cuBLAS through at::mm / at::addmm, so large M is
//                           never much slower than bf16.
//
// Dequant in registers (Marlin's lop3 trick): (q >> 4r) & 0x000f000f | EX
// puts two codes into the mantissas of a half2 / bfloat162 whose value is
// base + q (EX = 1024.0 for fp16, 128.0 for bf16; exact). Then
// (x - (base + z)) is the exact small integer q - z and one multiply by s
// rounds W = (q - z) * s to a's dtype before the mma (the contract allows
// it; the CPU kernel and the reference keep fp32). The dequant kernel of
// the cuBLAS path rounds the same value the same way.
//
// Edges: A rows >= M and columns >= K load as 0 (the padded codes are 0 but
// (0 - z) * s is not, so A must be zero there); group indices are clamped to
// G - 1 for the padding rows; stores past M / N are skipped.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/env_choice.h"
#include "cuda/dispatch_utils.cuh"
#include "cuda/launch.cuh"
#include "cuda/mma_utils.cuh"
#include "ops.h"
#include "quantization/w4a16/cuda/w4a16_layout.cuh"
#include "quantization/w4a16/cuda/w4a16_mma_common.cuh"
#include "quantization/w4a16/cuda/w4a16_tc_gemm.cuh"
#include "quantization/w4a16/w4a16_args.h"

namespace vllm_myops {
namespace {

namespace layout = w4a16::cuda_layout;
using namespace w4a16::dev;  // the helpers shared with the tc kernel

// ---- Tunables ---------------------------------------------------------------
// M from which dequant + cuBLAS is used; the tc kernel (A and B through
// shared memory, each code dequantized once per block of 32 / 64 rows) runs
// above kRingMaxM and below it. The tc kernel's dequant work grows with the
// number of blocks along M, dequant + cuBLAS pays one dequant of W and then
// runs at cuBLAS's rate: 160 is where the two tie on the benchmark's shapes
// (bf16, g128; docs/quantization/log/).
constexpr int64_t kTcMaxM = 160;
// Largest M the ring kernel takes under "auto" (M tiles of 16; the blocks of
// one n-tile's M tiles run together, so all but the first read B from L2).
constexpr int64_t kRingMaxM = 16;
constexpr int kWarps = 4;  // warps per GEMM block
// m16 tiles per block above M = 16. 4 (M tile 64) needs more than the 255
// registers of a thread with this warp-owns-the-n-tile design (it spills), so
// M > 16 uses M tiles of 32 until a shared-memory A / split-N variant lands.
constexpr int kMaxMTiles = 2;
constexpr int kThreads = kWarps * 32;
// k-tiles a warp keeps in flight in registers (a ring: tile i + stages - 1
// is requested before tile i is used). 2: 4 stages at M <= 16 take 248
// registers (2 blocks per SM) and do not pay, as the decode kernel is not
// bound by bytes in flight (docs/quantization/design.md).
template <int kMTiles>
constexpr int kStagesFor = 2;
// M <= 16 (decode): the B tiles go through a ring of kDecodeStages shared-
// memory slots per warp (one less in the 4-blocks build), filled by
// cp.async, so the bytes in flight cost no registers. (The register ring of
// the mma kernel keeps one tile ahead per warp: its registers cap both the
// occupancy and the bytes in flight.)
constexpr int kDecodeStages = 4;
// Resident blocks per SM the ring kernel is compiled for (registers capped
// at 65536 / (128 x blocks)). The 4-blocks build ("ring4", <= 128
// registers, 3 slots) is the default: the kernel is latency bound, and a
// fourth resident block pays more than a fourth slot of the 3-blocks build
// ("ring", 4 slots; docs/quantization/log/).
constexpr int kDecodeMinBlocksPerSm = 3;
constexpr int kDecodeMoreBlocksPerSm = 4;
// Split-K bounds: a split gives each warp at least one full ring of k-tiles
// (kWarps * stages), and at most kMaxSplits splits (workspace traffic grows
// with them).
constexpr int kMaxSplits = 16;

// Element types, the lop3 dequant, GemmArgs and the per-group scales /
// zeros: cuda/w4a16_mma_common.cuh (shared with cuda/w4a16_tc_gemm.cuh).

// Streamed once: bypass L1 (the tiles are never re-read by this block).
__device__ __forceinline__ uint4 load_stream_16(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Two consecutive elements (k, k + 1) of row `row` of A as a T2, zero past
// M and K.
template <typename T>
__device__ __forceinline__ uint32_t load_a_pair(const GemmArgs& p, int row,
                                                int k) {
  if (row >= p.m || k >= p.k) return 0u;
  const T* ptr = static_cast<const T*>(p.a) + row * p.a_stride + k;
  if (p.a_aligned4 && k + 1 < p.k) {
    return __ldg(reinterpret_cast<const unsigned int*>(ptr));
  }
  const uint32_t lo = __ldg(reinterpret_cast<const unsigned short*>(ptr));
  const uint32_t hi =
      k + 1 < p.k ? __ldg(reinterpret_cast<const unsigned short*>(ptr) + 1)
                  : 0u;
  return lo | (hi << 16);
}

// A fragment (m16 x k16, row-major) at rows row0.., columns k0..: a0 = (g,
// 2t), a1 = (g + 8, 2t), a2 = (g, 2t + 8), a3 = (g + 8, 2t + 8).
template <typename T>
__device__ __forceinline__ void load_a_frag(const GemmArgs& p, int row0, int k0,
                                            int lane, uint32_t (&a)[4]) {
  const int g = lane / 4, t = lane % 4;
  a[0] = load_a_pair<T>(p, row0 + g, k0 + 2 * t);
  a[1] = load_a_pair<T>(p, row0 + g + 8, k0 + 2 * t);
  a[2] = load_a_pair<T>(p, row0 + g, k0 + 2 * t + 8);
  a[3] = load_a_pair<T>(p, row0 + g + 8, k0 + 2 * t + 8);
}

// What one warp loads for one k-tile ahead of using it.
template <int kMTiles>
struct Stage {
  static constexpr bool kHasA = kMTiles == 1;
  uint4 b[layout::kSteps];  // step s: words of pairs p = 0..3 (x, y, z, w)
  GroupRaw group[2];        // steps 0-1 and 2-3 (differ only for group 32)
  uint32_t a[kHasA ? layout::kSteps : 1][4];
};

template <typename T, int kMTiles>
__device__ __forceinline__ void load_stage(const GemmArgs& p, int nt, int kt,
                                           int row0, int lane,
                                           Stage<kMTiles>& st) {
  const uint4* tile = p.b + (static_cast<int64_t>(nt) * p.k_tiles + kt) *
                                (layout::kTileWords / 4);
#pragma unroll
  for (int s = 0; s < layout::kSteps; ++s) {
    st.b[s] = load_stream_16(tile + s * 32 + lane);
  }
  const int n0 = nt * layout::kTileN;
  const int g0 = group_of(p, kt, 0);
  const int g2 = group_of(p, kt, 2);
  load_group(p, g0, n0, lane, st.group[0]);
  if (g2 != g0) {
    load_group(p, g2, n0, lane, st.group[1]);
  } else {
    st.group[1] = st.group[0];
  }
  if constexpr (Stage<kMTiles>::kHasA) {
#pragma unroll
    for (int s = 0; s < layout::kSteps; ++s) {
      load_a_frag<T>(p, row0, kt * layout::kTileK + 16 * s, lane, st.a[s]);
    }
  }
}

template <typename T, int kMTiles>
__device__ __forceinline__ void compute_stage(const GemmArgs& p, int kt,
                                              int row0, int lane,
                                              const Stage<kMTiles>& st,
                                              float (&acc)[kMTiles][8][4]) {
  uint32_t zb[8], sc[8];
#pragma unroll
  for (int s = 0; s < layout::kSteps; ++s) {
    // Steps 2-3 start a new group only for group size 32 (the only size
    // below a tile; larger ones are multiples of 64, or all of K).
    if (s == 0 || (s == 2 && p.group_size < layout::kTileK)) {
      group_pairs<T>(p, st.group[s / 2], lane, zb, sc);
    }
    uint32_t a[kMTiles][4];
    if constexpr (Stage<kMTiles>::kHasA) {
#pragma unroll
      for (int r = 0; r < 4; ++r) a[0][r] = st.a[s][r];
    } else {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        load_a_frag<T>(p, row0 + 16 * mt, kt * layout::kTileK + 16 * s, lane,
                       a[mt]);
      }
    }
    const uint32_t words[4] = {st.b[s].x, st.b[s].y, st.b[s].z, st.b[s].w};
#pragma unroll
    for (int pr = 0; pr < layout::kPairs; ++pr) {
      const uint32_t q = words[pr];
      const int j0 = 2 * pr, j1 = 2 * pr + 1;
      // Block 2p: nibbles (0, 4) = b0, (1, 5) = b1; block 2p + 1: (2, 6),
      // (3, 7).
      const uint32_t b00 = dequant_pair<T>(codes_pair<T, 0>(q), zb[j0], sc[j0]);
      const uint32_t b01 = dequant_pair<T>(codes_pair<T, 1>(q), zb[j0], sc[j0]);
      const uint32_t b10 = dequant_pair<T>(codes_pair<T, 2>(q), zb[j1], sc[j1]);
      const uint32_t b11 = dequant_pair<T>(codes_pair<T, 3>(q), zb[j1], sc[j1]);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        tc::mma_16816<T>(acc[mt][j0], a[mt], b00, b01);
        tc::mma_16816<T>(acc[mt][j1], a[mt], b10, b11);
      }
    }
  }
}

// The block's summed tile in shared memory -> the output tile (+ bias,
// rounded once) or this split's fp32 slice of the workspace. Whole block.
template <typename T, int kRows>
__device__ __forceinline__ void store_partial(
    const GemmArgs& p, const float (&partial)[kRows][layout::kTileN], int row0,
    int nt, int split) {
  const int n0 = nt * layout::kTileN;
  for (int idx = threadIdx.x; idx < kRows * layout::kTileN; idx += kThreads) {
    const int r = idx / layout::kTileN, c = idx % layout::kTileN;
    const int row = row0 + r, col = n0 + c;
    if (row >= p.m || col >= p.n) continue;
    const float v = partial[r][c];
    if (p.splits == 1) {
      const float b = p.bias != nullptr
                          ? cuda::to_float(static_cast<const T*>(p.bias)[col])
                          : 0.f;
      static_cast<T*>(p.out)[static_cast<int64_t>(row) * p.n + col] =
          cuda::from_float<T>(v + b);
    } else {
      p.workspace[(static_cast<int64_t>(split) * p.m + row) * p.n + col] = v;
    }
  }
}

// The block's result: the warps' partial tiles summed in shared memory in
// warp order, then either the output tile (+ bias, rounded once) or this
// split's fp32 slice of the workspace. Whole block.
template <typename T, int kMTiles>
__device__ __forceinline__ void finish_block(
    const GemmArgs& p, const float (&acc)[kMTiles][8][4],
    float (&partial)[16 * kMTiles][layout::kTileN], int row0, int nt, int split,
    int lane, int warp) {
  constexpr int kRows = 16 * kMTiles;
  // C fragment: c0, c1 = (g, 2t, 2t + 1),
  // c2, c3 = (g + 8, 2t, 2t + 1) of each m16 x n8 block.
  const int g = lane / 4, t = lane % 4;
  for (int w = 0; w < kWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int row = 16 * mt + g + 8 * (r / 2);
            const int col = 8 * j + 2 * t + (r % 2);
            partial[row][col] =
                w == 0 ? acc[mt][j][r] : partial[row][col] + acc[mt][j][r];
          }
    }
    __syncthreads();
  }
  store_partial<T, kRows>(p, partial, row0, nt, split);
}

// The k-tiles one warp of a block takes from its K-split: tile
// first + i * stride for i < count.
struct WarpTiles {
  int first;
  int count;
  int stride;
};

// Interleaved (kt_begin + w, + kWarps, ...): the warps of a block stay on
// neighbouring tiles.
__device__ __forceinline__ WarpTiles interleaved_tiles(const GemmArgs& p,
                                                       int split, int warp) {
  const int kt_begin = split * p.kt_per_split;
  const int kt_end = min(kt_begin + p.kt_per_split, p.k_tiles);
  const int first = kt_begin + warp;
  const int count = first < kt_end ? (kt_end - first + kWarps - 1) / kWarps : 0;
  return {first, count, kWarps};
}

// Contiguous runs of ceil(tiles / kWarps): a warp crosses each group of K
// rows once (the swap kernel applies scales per group).
__device__ __forceinline__ WarpTiles contiguous_tiles(const GemmArgs& p,
                                                      int split, int warp) {
  const int kt_begin = split * p.kt_per_split;
  const int kt_end = min(kt_begin + p.kt_per_split, p.k_tiles);
  const int per_warp = (kt_end - kt_begin + kWarps - 1) / kWarps;
  const int first = kt_begin + warp * per_warp;
  return {first, max(0, min(per_warp, kt_end - first)), 1};
}

// Grid: (M-tile, n-tile, K-split), M-tiles fastest so the blocks that read
// the same weight tiles run together and all but the first hit L2. Warp w of
// a block takes k-tiles
// kt_begin + w, + kWarps, ... of the split; the warps' partial tiles are
// summed in shared memory in warp order.
template <typename T, int kMTiles>
__global__ void __launch_bounds__(kThreads) w4a16_mma_kernel(const GemmArgs p) {
  constexpr int kRows = 16 * kMTiles;
  constexpr int kStages = kStagesFor<kMTiles>;
  __shared__ float partial[kRows][layout::kTileN];

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int row0 = blockIdx.x * kRows;
  const int nt = blockIdx.y;
  const int split = blockIdx.z;
  const WarpTiles wt = interleaved_tiles(p, split, warp);
  const int first = wt.first, count = wt.count;

  float acc[kMTiles][8][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[mt][j][r] = 0.f;

  // Register ring of kStages k-tiles: tile i + kStages - 1 is requested
  // before tile i is used. Fully unrolled by kStages so the ring index is a
  // compile-time constant (registers cannot be indexed).
  Stage<kMTiles> st[kStages];
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < count) {
      load_stage<T, kMTiles>(p, nt, first + i * kWarps, row0, lane, st[i]);
    }
  }
  for (int i0 = 0; i0 < count; i0 += kStages) {
#pragma unroll
    for (int j = 0; j < kStages; ++j) {
      const int i = i0 + j;
      const int ahead = i + kStages - 1;
      if (ahead < count) {
        load_stage<T, kMTiles>(p, nt, first + ahead * kWarps, row0, lane,
                               st[(j + kStages - 1) % kStages]);
      }
      if (i < count) {
        compute_stage<T, kMTiles>(p, first + i * kWarps, row0, lane, st[j],
                                  acc);
      }
    }
  }

  finish_block<T, kMTiles>(p, acc, partial, row0, nt, split, lane, warp);
}

// Grid (M tile of 16, n-tile, K-split) as the mma kernel. Each
// warp streams its k-tiles (kt_begin + w, + kWarps, ...) through its own ring
// of kDecodeStages shared-memory slots: tile i + kDecodeStages - 1 is copied
// (cp.async, one commit group per tile) before tile i is used. A lane copies
// and later reads exactly its own 16-byte words of a slot (the layout gives
// lane l words 4l..4l+3 of each k16 step), so the ring needs no barrier. The
// scales / zeros of a tile ride along in a register ring of the same depth,
// the A fragments one tile ahead (A is small and read by every block: L2).
template <typename T, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    w4a16_decode_kernel(const GemmArgs p) {
  // The 4-blocks build fits 128 registers with one slot less and A loaded
  // when used (4 slots and A one tile ahead spill ~100 bytes there).
  constexpr bool kMoreBlocks = kMinBlocks > kDecodeMinBlocksPerSm;
  constexpr int kS = kMoreBlocks ? kDecodeStages - 1 : kDecodeStages;
  constexpr int kQuads = layout::kTileWords / 4;  // 16-byte words per tile
  __shared__ __align__(16) uint4 ring[kWarps][kS][kQuads];
  __shared__ float partial[16][layout::kTileN];

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int row0 = blockIdx.x * 16;
  const int nt = blockIdx.y;
  const int split = blockIdx.z;
  const WarpTiles wt = interleaved_tiles(p, split, warp);
  const int first = wt.first, count = wt.count;
  const uint4* tiles = p.b + static_cast<int64_t>(nt) * p.k_tiles * kQuads;
  const int n0 = nt * layout::kTileN;

  // Tile i of this warp -> slot: its 4 quads (one per k16 step) and groups.
  const auto issue = [&](int i, int slot, GroupRaw(&gr)[2]) {
    const int kt = first + i * kWarps;
    const uint4* src = tiles + static_cast<int64_t>(kt) * kQuads;
#pragma unroll
    for (int s = 0; s < layout::kSteps; ++s) {
      tc::cp_async_16(tc::smem_addr(&ring[warp][slot][s * 32 + lane]),
                      src + s * 32 + lane, true);
    }
    const int g0 = group_of(p, kt, 0);
    const int g2 = group_of(p, kt, 2);
    load_group(p, g0, n0, lane, gr[0]);
    if (g2 != g0) {
      load_group(p, g2, n0, lane, gr[1]);
    } else {
      gr[1] = gr[0];
    }
  };

  float acc[1][8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[0][j][r] = 0.f;

  GroupRaw groups[kS][2];
#pragma unroll
  for (int i = 0; i < kS - 1; ++i) {
    if (i < count) issue(i, i, groups[i]);
    tc::cp_async_commit();  // one group per ring slot, even if empty
  }
  Stage<1> st;
  if (!kMoreBlocks && count > 0) {
#pragma unroll
    for (int s = 0; s < layout::kSteps; ++s) {
      load_a_frag<T>(p, row0, first * layout::kTileK + 16 * s, lane, st.a[s]);
    }
  }
  for (int i0 = 0; i0 < count; i0 += kS) {
#pragma unroll
    for (int j = 0; j < kS; ++j) {
      const int i = i0 + j;
      if (i < count) {
        const int ahead = i + kS - 1;
        if (ahead < count) {
          issue(ahead, (j + kS - 1) % kS, groups[(j + kS - 1) % kS]);
        }
        tc::cp_async_commit();
        tc::cp_async_wait<kS - 1>();  // this lane's copies of tile i landed
#pragma unroll
        for (int s = 0; s < layout::kSteps; ++s) {
          st.b[s] = ring[warp][j][s * 32 + lane];  // i % kS == j
        }
        st.group[0] = groups[j][0];
        st.group[1] = groups[j][1];
        uint32_t a_next[layout::kSteps][4];
        if constexpr (kMoreBlocks) {
#pragma unroll
          for (int s = 0; s < layout::kSteps; ++s) {
            load_a_frag<T>(p, row0,
                           (first + i * kWarps) * layout::kTileK + 16 * s, lane,
                           st.a[s]);
          }
        } else if (i + 1 < count) {
#pragma unroll
          for (int s = 0; s < layout::kSteps; ++s) {
            load_a_frag<T>(p, row0,
                           (first + (i + 1) * kWarps) * layout::kTileK + 16 * s,
                           lane, a_next[s]);
          }
        }
        compute_stage<T, 1>(p, first + i * kWarps, row0, lane, st, acc);
        if (!kMoreBlocks && i + 1 < count) {
#pragma unroll
          for (int s = 0; s < layout::kSteps; ++s)
#pragma unroll
            for (int r = 0; r < 4; ++r) st.a[s][r] = a_next[s][r];
        }
      }
    }
  }
  tc::cp_async_wait<0>();

  finish_block<T, 1>(p, acc, partial, row0, nt, split, lane, warp);
}

// ---- Swap-AB decode kernel --------------------------------------------------
// The two kernels above spend ~370 instructions per 2 KB tile and are
// issue/latency-bound with few warps, not bound by the stream
// (docs/quantization/design.md).
// This one computes out^T = W^T a^T: the weight codes are the mma's A operand
// (16 columns n x k16) and one octet of tokens is B (k16 x 8 tokens), so an
// mma covers 16 columns of the tokens there are, where the m16 A operand of
// the kernels above spends 15 of its 16 rows on padding at M = 1: half the
// mma and accumulator count. The tile layout needs no change: the word of
// pair p of a lane is exactly the A fragment of n16 block p (a0 = b0 of n8
// block 2p, a1 = b0 of 2p + 1, a2 = b1 of 2p, a3 = b1 of 2p + 1).
// Scales and zeros are applied per group to fp32 sums instead of to every
// weight: the codes enter the mma as base + q (one lop3 per pair, exact) and
//   sum_group = s_n * (sum_k a_k * (base + q_kn) - (base + z_n) * sum_k a_k),
// sum_k a_k coming from one more mma per k16 step against an A of ones.
// W is not rounded to a's dtype here (the other paths round each weight);
// the subtraction cancels up to (base + 15) / |q - z| of the fp32 sum
// (base 1024 for fp16, 128 for bf16): ~2^-14 of sum_k |a_k| * s_n, far below
// the per-weight rounding the tests allow the other kernels.
// A warp takes a contiguous run of its split's k-tiles (one flush per group,
// not per tile) and streams them through its cp.async ring as
// w4a16_decode_kernel does. A tile's activation slice (the block's 8 token
// rows x the tile's 64 k, 1 KB) rides in the same ring slot, copied with the
// tile's codes kS - 1 tiles ahead, and is read with two ldmatrix: loading it
// from global memory when the tile is used put an L2 round trip on the
// critical path of every tile (kActRing = false, kept for activations that
// are not 16-byte copyable and as the forced path "swap_global").
// Ring slots per warp and resident blocks per SM the swap kernel is compiled
// for (128 registers). 3 slots: 5 (4 for group 32) did not pay at any
// M <= 8 (docs/quantization/log/).
constexpr int kSwapStages = 3;
constexpr int kSwapBlocksPerSm = 4;
// Largest M the swap kernel takes under "auto". A block is one token octet:
// a 2-octet build needs 205 registers (2 blocks per SM), and at M = 16
// the ring4 kernel beats it (docs/quantization/log/).
constexpr int64_t kSwapMaxM = 8;
// Activation slice of a ring slot: 8 rows of 8 16-byte chunks (8 elements
// each), rows 9 chunks (144 bytes) apart so that the 8 row addresses of one
// ldmatrix matrix (one chunk of rows 0..7) fall in 8 different 16-byte bank
// groups, and the cp.async stores of a chunk column too.
constexpr int kActChunks = layout::kTileK / 8;
constexpr int kActRowQuads = kActChunks + 1;
constexpr int kActQuads = 8 * kActRowQuads;

// tc::cp_async_16 through L1 (.ca): every block of an SM copies the same
// activation rows (its k-tiles' slices), so they stay L1 hits as the global
// loads of the fallback are, where .cg would send each copy to L2.
__device__ __forceinline__ void cp_async_ca_16(uint32_t dst, const void* src,
                                               bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(src), "r"(bytes));
}

template <typename T>
__device__ __forceinline__ float code_base() {
  return std::is_same_v<T, __half> ? 1024.f : 128.f;
}

// One 16-bit half of a raw pair as fp32.
template <typename T>
__device__ __forceinline__ float half_to_float(uint32_t pair, int half_shift) {
  return cuda::to_float(
      from_bits<T>(static_cast<uint16_t>((pair >> half_shift) & 0xffffu)));
}

// The scale and base + zero of the 8 columns a lane's accumulators hold:
// column 16 p + 8 h + g of the tile for (p, h). Lane c / 2 loaded column c
// (load_group); one shuffle each. Whole warp.
template <typename T>
__device__ __forceinline__ void swap_group_values(const GemmArgs& p,
                                                  const GroupRaw& gr, int lane,
                                                  float (&s)[4][2],
                                                  float (&zb)[4][2]) {
  const int g = lane / 4;
  const int half_shift = 16 * (g % 2);
  const bool has_zeros = p.zeros != nullptr;
#pragma unroll
  for (int pr = 0; pr < layout::kPairs; ++pr)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int src = 8 * pr + 4 * h + g / 2;
      s[pr][h] =
          half_to_float<T>(__shfl_sync(0xffffffffu, gr.s2, src), half_shift);
      // Zero codes are stored as T; rounded as the other paths do.
      const float z =
          has_zeros ? rintf(half_to_float<T>(
                          __shfl_sync(0xffffffffu, gr.z2, src), half_shift))
                    : 8.f;
      zb[pr][h] = code_base<T>() + z;
    }
}

// Grid (token octet, n-tile, K-split). kS: ring slots per warp;
// kTwoGroups: group size 32, two groups per tile (both groups' raw scales
// ride in the register ring; one otherwise). kActRing: the activations go
// through the ring (the host checks that a's base is 16-byte aligned, its
// row stride and K multiples of 8 elements, so every chunk is one aligned
// copy wholly inside or wholly past K); else they are loaded from global
// memory when the tile is used.
template <typename T, int kS, bool kTwoGroups, bool kActRing>
__global__ void __launch_bounds__(kThreads, kSwapBlocksPerSm)
    w4a16_swap_kernel(const GemmArgs p) {
  constexpr int kOctets = 1;
  constexpr int kGroupsPerTile = kTwoGroups ? 2 : 1;
  constexpr int kQuads = layout::kTileWords / 4;  // 16-byte words per tile
  constexpr int kRows = 8 * kOctets;
  static_assert(!kActRing || kOctets == 1, "the act slice holds one octet");
  using Act = uint32_t[kOctets][layout::kSteps][2];
  __shared__ __align__(16) uint4 ring[kWarps][kS][kQuads];
  __shared__ __align__(16)
      uint4 act_ring[kWarps][kActRing ? kS : 1][kActRing ? kActQuads : 1];
  __shared__ float partial[kRows][layout::kTileN];

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int row0 = blockIdx.x * kRows;
  const int nt = blockIdx.y;
  const int split = blockIdx.z;
  const WarpTiles wt = contiguous_tiles(p, split, warp);
  const int first = wt.first, count = wt.count;
  const uint4* tiles = p.b + static_cast<int64_t>(nt) * p.k_tiles * kQuads;
  const int n0 = nt * layout::kTileN;
  // Act slice: lane l copies chunks l / 8 and l / 8 + 4 of token row l % 8,
  // and gives the ldmatrix row address of the same (row, chunk); rows >= M
  // and chunks past K are zero-filled (the padding codes are 0, but
  // base + 0 is not).
  const int act_row = lane % 8, act_chunk = lane / 8;
  const bool act_row_ok = row0 + act_row < p.m;
  const T* act_src =
      static_cast<const T*>(p.a) +
      static_cast<int64_t>(act_row_ok ? row0 + act_row : 0) * p.a_stride;

  // Tile i of this warp -> ring slot `slot`: its 4 quads, its act slice and
  // the raw scales / zeros of its groups (steps 0-1 and, for group 32, 2-3).
  const auto issue = [&](int i, int slot, GroupRaw(&gr)[kGroupsPerTile]) {
    const int kt = first + i;
    const uint4* src = tiles + static_cast<int64_t>(kt) * kQuads;
#pragma unroll
    for (int s = 0; s < layout::kSteps; ++s) {
      tc::cp_async_16(tc::smem_addr(&ring[warp][slot][s * 32 + lane]),
                      src + s * 32 + lane, true);
    }
    if constexpr (kActRing) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int chunk = act_chunk + kActChunks / 2 * h;
        const int k = kt * layout::kTileK + 8 * chunk;
        const bool valid = act_row_ok && k < p.k;
        cp_async_ca_16(
            tc::smem_addr(
                &act_ring[warp][slot][act_row * kActRowQuads + chunk]),
            valid ? static_cast<const void*>(act_src + k) : p.a, valid);
      }
    }
    load_group(p, group_of(p, kt, 0), n0, lane, gr[0]);
    if constexpr (kTwoGroups) {
      load_group(p, group_of(p, kt, 2), n0, lane, gr[kGroupsPerTile - 1]);
    }
  };
  // B fragments of k-tile kt: token 8 o + g, k = 16 s + 2 t (+ 8).
  const auto load_act = [&](int kt, Act& act) {
#pragma unroll
    for (int o = 0; o < kOctets; ++o)
#pragma unroll
      for (int s = 0; s < layout::kSteps; ++s) {
        const int row = row0 + 8 * o + g;
        const int k = kt * layout::kTileK + 16 * s + 2 * t;
        act[o][s][0] = load_a_pair<T>(p, row, k);
        act[o][s][1] = load_a_pair<T>(p, row, k + 8);
      }
  };
  // The same fragments from the act slice of ring slot `slot`: ldmatrix h
  // takes chunks 4h .. 4h + 3 as its matrices c, and lane (g, t) receives
  // token g, k 8 (4h + c) + 2t, + 1 of each: b0 (c even) and b1 (c odd) of
  // k16 step 2h + c / 2.
  const auto read_act = [&](int slot, Act& act) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t r[4];
      tc::ldsm_x4(
          r,
          tc::smem_addr(&act_ring[warp][slot][act_row * kActRowQuads +
                                              kActChunks / 2 * h + act_chunk]));
      act[0][2 * h][0] = r[0];
      act[0][2 * h][1] = r[1];
      act[0][2 * h + 1][0] = r[2];
      act[0][2 * h + 1][1] = r[3];
    }
  };

  // Accumulator element r of (octet o, pair p): column 16 p + 8 (r / 2) + g,
  // token 8 o + 2 t + (r % 2) (C fragment of m16n8: rows = columns n).
  float total[kOctets][layout::kPairs][4];
  float group_acc[kOctets][layout::kPairs][4];
  float act_sum[kOctets][4];  // [0], [1]: sum_k a of tokens 2t, 2t + 1
#pragma unroll
  for (int o = 0; o < kOctets; ++o) {
#pragma unroll
    for (int pr = 0; pr < layout::kPairs; ++pr)
#pragma unroll
      for (int r = 0; r < 4; ++r) total[o][pr][r] = group_acc[o][pr][r] = 0.f;
#pragma unroll
    for (int r = 0; r < 4; ++r) act_sum[o][r] = 0.f;
  }
  int group = -1;  // the group group_acc holds
  GroupRaw group_raw{0u, 0u};
  const auto flush = [&]() {
    float s[layout::kPairs][2], zb[layout::kPairs][2];
    swap_group_values<T>(p, group_raw, lane, s, zb);
#pragma unroll
    for (int o = 0; o < kOctets; ++o) {
#pragma unroll
      for (int pr = 0; pr < layout::kPairs; ++pr)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int h = r / 2, c = r % 2;
          const float d = fmaf(-zb[pr][h], act_sum[o][c], group_acc[o][pr][r]);
          total[o][pr][r] = fmaf(s[pr][h], d, total[o][pr][r]);
          group_acc[o][pr][r] = 0.f;
        }
#pragma unroll
      for (int r = 0; r < 4; ++r) act_sum[o][r] = 0.f;
    }
  };
  const auto enter_group = [&](int kt, int step, const GroupRaw& gr) {
    const int gi = group_of(p, kt, step);
    if (gi != group) {  // warp-uniform
      if (group >= 0) flush();
      group = gi;
      group_raw = gr;
    }
  };
  constexpr uint32_t kOnes =
      std::is_same_v<T, __half> ? 0x3c003c00u : 0x3f803f80u;
  const uint32_t ones[4] = {kOnes, kOnes, kOnes, kOnes};
  const auto compute = [&](int kt, const uint4(&b)[layout::kSteps],
                           const GroupRaw(&gr)[kGroupsPerTile],
                           const Act& act) {
#pragma unroll
    for (int s = 0; s < layout::kSteps; ++s) {
      // A new group can start at step 2 only for group size 32 (the only
      // size below a tile; larger ones are multiples of 64, or all of K).
      if (s == 0) enter_group(kt, 0, gr[0]);
      if constexpr (kTwoGroups) {
        if (s == 2) enter_group(kt, 2, gr[kGroupsPerTile - 1]);
      }
      const uint32_t words[4] = {b[s].x, b[s].y, b[s].z, b[s].w};
#pragma unroll
      for (int pr = 0; pr < layout::kPairs; ++pr) {
        const uint32_t q = words[pr];
        const uint32_t a[4] = {codes_pair<T, 0>(q), codes_pair<T, 2>(q),
                               codes_pair<T, 1>(q), codes_pair<T, 3>(q)};
#pragma unroll
        for (int o = 0; o < kOctets; ++o) {
          tc::mma_16816<T>(group_acc[o][pr], a, act[o][s][0], act[o][s][1]);
        }
      }
#pragma unroll
      for (int o = 0; o < kOctets; ++o) {
        tc::mma_16816<T>(act_sum[o], ones, act[o][s][0], act[o][s][1]);
      }
    }
  };

  GroupRaw raws[kS][kGroupsPerTile];
#pragma unroll
  for (int i = 0; i < kS - 1; ++i) {
    if (i < count) issue(i, i, raws[i]);
    tc::cp_async_commit();  // one group per ring slot, even if empty
  }
  for (int i0 = 0; i0 < count; i0 += kS) {
#pragma unroll
    for (int j = 0; j < kS; ++j) {
      const int i = i0 + j;
      if (i < count) {
        constexpr int kAheadSlotOffset = kS - 1;
        const int ahead = i + kAheadSlotOffset;
        // The act slot refilled below (tile i - 1's) was read by every lane
        // of the warp, not only by the lanes that copied it.
        if constexpr (kActRing) __syncwarp();
        if (ahead < count) {
          issue(ahead, (j + kAheadSlotOffset) % kS,
                raws[(j + kAheadSlotOffset) % kS]);
        }
        tc::cp_async_commit();
        Act act;
        if constexpr (!kActRing) {
          // L1 / L2 hits (every block reads them), loaded while the tile's
          // copies land.
          load_act(first + i, act);
        }
        tc::cp_async_wait<kS - 1>();  // this lane's copies of tile i landed
        if constexpr (kActRing) {
          __syncwarp();  // ... and every lane's: ldmatrix reads them all
          read_act(j, act);
        }
        uint4 b[layout::kSteps];
#pragma unroll
        for (int s = 0; s < layout::kSteps; ++s) {
          b[s] = ring[warp][j][s * 32 + lane];  // i % kS == j
        }
        compute(first + i, b, raws[j], act);
      }
    }
  }
  tc::cp_async_wait<0>();
  if (group >= 0) flush();

  for (int w = 0; w < kWarps; ++w) {
    if (warp == w) {
#pragma unroll
      for (int o = 0; o < kOctets; ++o)
#pragma unroll
        for (int pr = 0; pr < layout::kPairs; ++pr)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int row = 8 * o + 2 * t + (r % 2);
            const int col = 16 * pr + 8 * (r / 2) + g;
            partial[row][col] =
                w == 0 ? total[o][pr][r] : partial[row][col] + total[o][pr][r];
          }
    }
    __syncthreads();
  }
  store_partial<T, kRows>(p, partial, row0, nt, split);
}

// out = T(sum over splits of workspace + bias), splits summed in order.
template <typename T>
__global__ void w4a16_splitk_reduce_kernel(const float* __restrict__ ws,
                                           const T* __restrict__ bias,
                                           T* __restrict__ out, int64_t mn,
                                           int n, int splits) {
  for (int64_t idx =
           blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       idx < mn; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float v = 0.f;
    for (int s = 0; s < splits; ++s) v += ws[s * mn + idx];
    if (bias != nullptr) v += cuda::to_float(bias[idx % n]);
    out[idx] = cuda::from_float<T>(v);
  }
}

// W[k, n] = T((q - z) * s) for k < K, n < N, from b_packed. One block per
// 64x64 tile: its 512 words go to shared memory with one coalesced 16-byte
// load per thread. A thread then writes runs of 8 columns of one row (one
// 16-byte store; 8 threads cover a row of the tile): the 8 codes of a run
// sit in 8 words 16 apart at one nibble position (cuda/w4a16_layout.cuh),
// so the slot is computed once per run and the scales and zeros of the run
// are one 16-byte load each. The pass is bound by writing W (4x the bytes it
// reads).
constexpr int kDequantThreads = 128;
constexpr int kRunsPerTile = layout::kTileK * layout::kTileN / 8;
static_assert(kDequantThreads * 4 == layout::kTileWords, "a word quad each");

template <typename T>
__device__ __forceinline__ void load_run(const T* __restrict__ src, int n0,
                                         int n_size, bool vector_ok,
                                         float (&v)[8]) {
  if (vector_ok) {
    alignas(16) T tmp[8];
    *reinterpret_cast<uint4*>(tmp) = __ldg(reinterpret_cast<const uint4*>(src));
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = cuda::to_float(tmp[i]);
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      v[i] = n0 + i < n_size ? cuda::to_float(src[i]) : 0.f;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kDequantThreads)
    w4a16_dequant_kernel(const uint4* __restrict__ b,
                         const T* __restrict__ scales,
                         const T* __restrict__ zeros, T* __restrict__ w,
                         int k_size, int n_size, int k_tiles, int group_size,
                         bool groups_aligned16, int nt0) {
  __shared__ uint4 tile_quads[layout::kTileWords / 4];
  const int kt = blockIdx.x, nt = nt0 + static_cast<int>(blockIdx.y);
  tile_quads[threadIdx.x] =
      b[(static_cast<int64_t>(nt) * k_tiles + kt) * (layout::kTileWords / 4) +
        threadIdx.x];
  __syncthreads();
  const uint32_t* words = reinterpret_cast<const uint32_t*>(tile_quads);

  for (int run = threadIdx.x; run < kRunsPerTile; run += kDequantThreads) {
    const int kr = run / 8, c = (run % 8) * 8;  // row, first column in tile
    const int k = kt * layout::kTileK + kr;
    const int n0 = nt * layout::kTileN + c;
    if (k >= k_size || n0 >= n_size) continue;
    // 16-byte accesses need N % 8 == 0 (every row start aligned) and a
    // whole run inside N.
    const bool vector_ok = n_size % 8 == 0 && n0 + 8 <= n_size;
    const int64_t g_off = static_cast<int64_t>(k / group_size) * n_size + n0;
    float s[8], z[8];
    load_run(scales + g_off, n0, n_size, vector_ok && groups_aligned16, s);
    if (zeros != nullptr) {
      load_run(zeros + g_off, n0, n_size, vector_ok && groups_aligned16, z);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) z[i] = 8.f;
    }
    const layout::TileSlot slot = layout::slot_of(kr, c);  // column c + i:
    const int shift = 4 * slot.nibble;                     // word + 16 i
    alignas(16) T vals[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t q = (words[slot.word + 16 * i] >> shift) & 0xFu;
      // (q - z) is exact; one product rounded to T, as in the mma path.
      vals[i] = cuda::from_float<T>((static_cast<float>(q) - z[i]) * s[i]);
    }
    T* dst = w + static_cast<int64_t>(k) * n_size + n0;
    if (vector_ok) {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(vals);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if (n0 + i < n_size) dst[i] = vals[i];
      }
    }
  }
}

// VLLM_MYOPS_W4A16_CUDA_PATH (read once) forces one path at every M, so the
// tests cover each and the benchmark can compare them: "swap"
// (w4a16_swap_kernel; "swap_global": its build that loads the activations
// from global memory, which "swap" falls back to when they cannot go through
// the cp.async ring), "ring" (w4a16_decode_kernel,
// M tiles of 16; "ring4": its 4-blocks-per-SM build), "mma" (w4a16_mma_kernel),
// "tc" (w4a16_tc_kernel, run_tc_gemm: its build by M and cost model; "tc4" /
// "tc8": the 64-row build of 4 / 8 warps at every M) or "dequant" (dequant
// + cuBLAS; "dequant_pipe": the same in column chunks whose dequant overlaps
// the previous chunk's GEMM, run_dequant_pipelined); unset or "auto" chooses
// by M (kSwapMaxM, kRingMaxM, kTcMaxM).
enum class CudaPath {
  kAuto,
  kSwap,
  kSwapGlobal,
  kRing,
  kRing4,
  kMma,
  kTc,
  kTc4,
  kTc8,
  kDequant,
  kDequantPipe
};

// One tensor-core kernel as run_gemm launches it.
struct GemmKernel {
  void (*kernel)(GemmArgs);
  int rows_per_block;  // M rows of one block
  int stages;          // k-tiles per warp in flight (sizes the K splits)
  int blocks_per_sm;   // resident blocks per SM (sizes the K splits)
};

// Resident blocks of kKernel per SM (asked once per kernel; the process
// drives one kind of GPU).
template <auto kKernel>
int blocks_per_sm() {
  static const int blocks = [] {
    int b = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kKernel,
                                                                 kThreads, 0));
    return std::max(b, 1);
  }();
  return blocks;
}

template <auto kKernel>
GemmKernel gemm_kernel(int rows_per_block, int stages) {
  return {kKernel, rows_per_block, stages, blocks_per_sm<kKernel>()};
}

template <typename T, bool kActRing>
GemmKernel swap_gemm_kernel(bool two_groups) {
  return two_groups
             ? gemm_kernel<w4a16_swap_kernel<T, kSwapStages, true, kActRing>>(
                   8, kSwapStages)
             : gemm_kernel<w4a16_swap_kernel<T, kSwapStages, false, kActRing>>(
                   8, kSwapStages);
}

// act_ring: a's rows can go through the swap kernel's cp.async ring.
template <typename T>
GemmKernel gemm_kernel_for(CudaPath path, int group_rows, bool act_ring) {
  const bool two_groups = group_rows < layout::kTileK;
  switch (path) {
    case CudaPath::kRing:
      return gemm_kernel<w4a16_decode_kernel<T, kDecodeMinBlocksPerSm>>(
          16, kDecodeStages);
    case CudaPath::kRing4:
      return gemm_kernel<w4a16_decode_kernel<T, kDecodeMoreBlocksPerSm>>(
          16, kDecodeStages);
    case CudaPath::kMma:
      return gemm_kernel<w4a16_mma_kernel<T, kMaxMTiles>>(
          16 * kMaxMTiles, kStagesFor<kMaxMTiles>);
    case CudaPath::kSwapGlobal:
      return swap_gemm_kernel<T, false>(two_groups);
    default:  // kSwap
      return act_ring ? swap_gemm_kernel<T, true>(two_groups)
                      : swap_gemm_kernel<T, false>(two_groups);
  }
}

// K splits for `base_blocks` (n-tiles x M-tiles) blocks on a GPU with
// `slots` resident blocks. The kernel is bound by weight bandwidth, so what
// counts is how full the resident slots stay: the fraction of slot-waves
// used, blocks / (ceil(blocks / slots) * slots). Take the fewest splits
// within 2% of the best fraction (fewer splits: less workspace traffic,
// longer per-warp pipelines).
int choose_splits(int64_t base_blocks, int k_tiles, int64_t slots,
                  int min_k_tiles_per_split) {
  const int max_splits =
      std::max(1, std::min(k_tiles / min_k_tiles_per_split, kMaxSplits));
  double fill[kMaxSplits + 1] = {};
  double best_fill = 0.0;
  for (int s = 1; s <= max_splits; ++s) {
    const int per = (k_tiles + s - 1) / s;
    if ((k_tiles + per - 1) / per != s) continue;  // same as fewer splits
    const int64_t blocks = base_blocks * s;
    fill[s] = static_cast<double>(blocks) /
              static_cast<double>(w4a16::ceil_div(blocks, slots) * slots);
    best_fill = std::max(best_fill, fill[s]);
  }
  for (int s = 1; s <= max_splits; ++s) {
    if (fill[s] >= best_fill - 0.02) return s;
  }
  return 1;
}

// Rows of `a` as 16-byte copies: every 8-element chunk of a row aligned,
// inside K or past it (k >= K must read 0, so K % 8 == 0). The swap kernel's
// activation ring and the tc kernel's cp.async path need it.
bool a_rows_copy16(const void* a, int64_t a_stride, int64_t k) {
  return reinterpret_cast<uintptr_t>(a) % 16 == 0 && a_stride % 8 == 0 &&
         k % 8 == 0;
}

// The launch description every GEMM kernel takes (out / workspace set by
// the caller). An M = 1 row's stride is K (any view of one row).
GemmArgs gemm_args(const at::Tensor& a, const at::Tensor& b_packed,
                   const at::Tensor& scales,
                   const std::optional<at::Tensor>& zeros,
                   const std::optional<at::Tensor>& bias,
                   const w4a16::GemmShape& shape, int group_rows, int k_tiles,
                   int kt_per_split, int splits) {
  GemmArgs args{};
  args.a = a.data_ptr();
  args.a_stride = shape.m > 1 ? a.stride(0) : shape.k;
  args.b = reinterpret_cast<const uint4*>(b_packed.data_ptr<int32_t>());
  args.scales = scales.data_ptr();
  args.zeros = zeros.has_value() ? zeros->data_ptr() : nullptr;
  args.bias = bias.has_value() ? bias->data_ptr() : nullptr;
  args.m = static_cast<int>(shape.m);
  args.k = static_cast<int>(shape.k);
  args.n = static_cast<int>(shape.n);
  args.group_size = group_rows;
  args.groups = static_cast<int>(shape.groups);
  args.k_tiles = k_tiles;
  args.kt_per_split = kt_per_split;
  args.splits = splits;
  args.a_aligned4 =
      reinterpret_cast<uintptr_t>(args.a) % 4 == 0 && args.a_stride % 2 == 0;
  args.a_aligned16 = a_rows_copy16(args.a, args.a_stride, shape.k);
  return args;
}

// The split-K second pass: out = T(sum of the splits' fp32 workspace slices
// in split order + bias).
template <typename T>
void reduce_splits(const GemmArgs& args, at::Tensor& out, cudaStream_t stream) {
  const int64_t mn = static_cast<int64_t>(args.m) * args.n;
  constexpr int kReduceThreads = 256;
  const int64_t blocks =
      std::min<int64_t>(w4a16::ceil_div(mn, kReduceThreads), int64_t{1} << 16);
  w4a16_splitk_reduce_kernel<T>
      <<<static_cast<unsigned>(blocks), kReduceThreads, 0, stream>>>(
          args.workspace, static_cast<const T*>(args.bias),
          static_cast<T*>(out.data_ptr()), mn, args.n, args.splits);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T>
void run_gemm(const at::Tensor& a, const at::Tensor& b_packed,
              const at::Tensor& scales, const std::optional<at::Tensor>& zeros,
              const std::optional<at::Tensor>& bias,
              const w4a16::GemmShape& shape, int group_rows, CudaPath path,
              at::Tensor& out) {
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int m = static_cast<int>(shape.m);
  const int64_t a_stride = m > 1 ? a.stride(0) : shape.k;
  const bool act_ring = a_rows_copy16(a.data_ptr(), a_stride, shape.k);
  const GemmKernel kern = gemm_kernel_for<T>(path, group_rows, act_ring);
  const int m_blocks = (m + kern.rows_per_block - 1) / kern.rows_per_block;
  const int n_tiles = static_cast<int>(shape.n_tiles);
  const int k_tiles = static_cast<int>(shape.k_tiles);
  TORCH_CHECK(n_tiles <= 65535,
              "w4a16_gemm: size_n must be <= ", 65535 * w4a16::kTile,
              " on CUDA (one grid row per 64 columns)");

  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t slots = static_cast<int64_t>(sms) * kern.blocks_per_sm;
  int splits = choose_splits(static_cast<int64_t>(n_tiles) * m_blocks, k_tiles,
                             slots, kWarps * kern.stages);
  const int kt_per_split = (k_tiles + splits - 1) / splits;
  splits = (k_tiles + kt_per_split - 1) / kt_per_split;  // none empty

  GemmArgs args = gemm_args(a, b_packed, scales, zeros, bias, shape, group_rows,
                            k_tiles, kt_per_split, splits);

  const auto launch = [&](const GemmArgs& launch_args) {
    const dim3 grid(m_blocks, n_tiles, launch_args.splits);
    kern.kernel<<<grid, kThreads, 0, stream>>>(launch_args);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  if (splits == 1) {
    args.out = out.data_ptr();
    launch(args);
    return;
  }
  at::Tensor workspace =
      at::empty({splits, shape.m, shape.n}, a.options().dtype(at::kFloat));
  args.workspace = workspace.data_ptr<float>();
  args.out = nullptr;
  launch(args);
  reduce_splits<T>(args, out, stream);
}

// ---- The tc path (cuda/w4a16_tc_gemm.cuh) ----------------------------------
// Block tiles: 4 warps side by side along N (BN = 256), so every code is
// dequantized once per block and a warp's tile is 16 * kWM x 64 (kWM = 4: two
// ALU instructions of dequant per mma). BM = 32 up to M = 32 (half of a 64-row
// tile would be padding), 64 above (the M = 64 .. 1023 rows in M blocks).
// Above M = 32 two builds of the 64-row tile: 4 warps (2 blocks per SM) or 8
// warps as two K slices of 4 (1 block per SM; half the blocks for the same
// warps per SM, so fewer K splits: no workspace at 28672x4096, M = 64);
// choose_tc_splits' cost model picks. 4 stages: 3 k-tiles (24 KB at BM = 64)
// in flight per block.
using TcSmall = w4a16::tc_gemm::Config<1, 4, 2, 4, 1>;   // 32 x 256, 48 KB
using TcLarge = w4a16::tc_gemm::Config<1, 4, 4, 4, 1>;   // 64 x 256, 66 KB
using TcLarge8 = w4a16::tc_gemm::Config<1, 4, 4, 4, 2>;  // the same, 8 warps
constexpr int64_t kTcSmallMaxM = 32;
constexpr int kTcSmallMinBlocks = 3;   // <= 170 registers
constexpr int kTcLargeMinBlocks = 2;   // <= 255 registers
constexpr int kTcLarge8MinBlocks = 1;  // <= 255 registers
// The 8-warp build only where the model says it is faster by more than this
// (two 4-warp blocks overlap one's barriers and epilogue with the other).
constexpr double kTcLarge8Margin = 0.97;
// K splits of the tc kernel from a cost model (the fill rule of
// choose_splits ignores the workspace, which at M = 64, N = 28672 is 7 MB
// per split): time(s) = the busiest SM's blocks x k-tiles per split x the
// time of one block k-tile at the SM's rate (each resident warp reaching
// kTcWarpShare of it, up to the whole SM) + writing and reading the fp32
// workspace + the reduce launch. Rates are estimates for the H200 (mma.sync
// with the dequant over its 132 SMs; L2 / DRAM bandwidth), to be fitted
// there.
constexpr double kTcSmFlopsPerUs = 4.0e6;
constexpr double kTcWarpShare = 0.15;
constexpr double kTcWorkspaceL2Bytes = 16e6;  // fits the 50 MB L2 with W
constexpr double kTcL2BytesPerUs = 8e6;
constexpr double kTcDramBytesPerUs = 3e6;
constexpr double kTcReduceUs = 2.0;

struct TcKernel {
  void (*kernel)(GemmArgs);
  int bm, bn, threads, smem_bytes, blocks_per_sm, stages;
};

struct TcPlan {
  int splits;
  double us;  // modelled
};

TcPlan choose_tc_splits(const TcKernel& kern, int64_t base_blocks, int k_tiles,
                        int sms, int64_t mn) {
  const int bm = kern.bm, bn = kern.bn, blocks_per_sm = kern.blocks_per_sm;
  const int min_k_tiles_per_split = kern.stages;
  const int warps = kern.threads / 32;
  const double block_k_tile_us =
      2.0 * bm * bn * layout::kTileK / kTcSmFlopsPerUs;
  const int max_splits =
      std::max(1, std::min(k_tiles / min_k_tiles_per_split, kMaxSplits));
  int best = 1;
  double best_us = 0.0;
  for (int s = 1; s <= max_splits; ++s) {
    const int per = (k_tiles + s - 1) / s;
    if ((k_tiles + per - 1) / per != s) continue;  // same as fewer splits
    const int64_t per_sm = w4a16::ceil_div(base_blocks * s, sms);
    const double share = std::min(
        1.0, static_cast<double>(std::min<int64_t>(per_sm, blocks_per_sm)) *
                 warps * kTcWarpShare);
    double us = static_cast<double>(per_sm) * per * block_k_tile_us /
                (per_sm <= blocks_per_sm ? share : 1.0);
    if (s > 1) {
      const double bytes = static_cast<double>(s) * mn * 4;
      us += 2 * bytes /
                (bytes <= kTcWorkspaceL2Bytes ? kTcL2BytesPerUs
                                              : kTcDramBytesPerUs) +
            kTcReduceUs;
    }
    if (s == 1 || us < best_us) {
      best = s;
      best_us = us;
    }
  }
  return {best, best_us};
}

template <typename T, class C, int kMinBlocks>
TcKernel tc_kernel() {
  constexpr auto kKernel = w4a16::tc_gemm::w4a16_tc_kernel<T, C, kMinBlocks>;
  cuda::allow_dynamic_smem<kKernel>(C::kSmemBytes);
  static const int blocks = [] {
    int b = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &b, kKernel, C::kThreads, C::kSmemBytes));
    return std::max(b, 1);
  }();
  return {kKernel,       C::kBM, C::kBN,    C::kThreads,
          C::kSmemBytes, blocks, C::kStages};
}

// Which tc build: by M and the cost model, or one forced (tests, A/B).
enum class TcBuild { kAuto, kLarge4, kLarge8 };

template <typename T>
void run_tc_gemm(const at::Tensor& a, const at::Tensor& b_packed,
                 const at::Tensor& scales,
                 const std::optional<at::Tensor>& zeros,
                 const std::optional<at::Tensor>& bias,
                 const w4a16::GemmShape& shape, int group_rows, TcBuild build,
                 at::Tensor& out) {
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int m = static_cast<int>(shape.m);
  const int n_tiles = static_cast<int>(shape.n_tiles);
  const int k_tiles = static_cast<int>(shape.k_tiles);
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  // All builds have 256-column blocks.
  const int n_blocks = static_cast<int>(w4a16::ceil_div(n_tiles, 4));
  static_assert(
      TcSmall::kBN == 256 && TcLarge::kBN == 256 && TcLarge8::kBN == 256,
      "256-column blocks");
  TORCH_CHECK(n_blocks <= 65535, "w4a16_gemm: size_n must be <= ", 65535 * 256,
              " on the CUDA tc path (one grid row per 256 columns)");
  const auto plan_for = [&](const TcKernel& kern) {
    const int64_t m_blocks = w4a16::ceil_div(m, kern.bm);
    return choose_tc_splits(kern, n_blocks * m_blocks, k_tiles, sms,
                            shape.m * shape.n);
  };
  TcKernel kern;
  TcPlan plan;
  if (build == TcBuild::kLarge8) {
    kern = tc_kernel<T, TcLarge8, kTcLarge8MinBlocks>();
    plan = plan_for(kern);
  } else if (build == TcBuild::kAuto && m <= kTcSmallMaxM) {
    kern = tc_kernel<T, TcSmall, kTcSmallMinBlocks>();
    plan = plan_for(kern);
  } else {
    kern = tc_kernel<T, TcLarge, kTcLargeMinBlocks>();
    plan = plan_for(kern);
    if (build == TcBuild::kAuto) {
      const TcKernel kern8 = tc_kernel<T, TcLarge8, kTcLarge8MinBlocks>();
      const TcPlan plan8 = plan_for(kern8);
      if (plan8.us < kTcLarge8Margin * plan.us) {
        kern = kern8;
        plan = plan8;
      }
    }
  }
  const int m_blocks = (m + kern.bm - 1) / kern.bm;
  int splits = plan.splits;
  const int kt_per_split = (k_tiles + splits - 1) / splits;
  splits = (k_tiles + kt_per_split - 1) / kt_per_split;  // none empty

  GemmArgs args = gemm_args(a, b_packed, scales, zeros, bias, shape, group_rows,
                            k_tiles, kt_per_split, splits);

  at::Tensor workspace;
  if (splits == 1) {
    args.out = out.data_ptr();
  } else {
    workspace =
        at::empty({splits, shape.m, shape.n}, a.options().dtype(at::kFloat));
    args.workspace = workspace.data_ptr<float>();
  }
  const dim3 grid(m_blocks, n_blocks, splits);
  kern.kernel<<<grid, kern.threads, kern.smem_bytes, stream>>>(args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (splits == 1) return;
  reduce_splits<T>(args, out, stream);
}

CudaPath forced_cuda_path() {
  static const CudaPath f =
      env::choice("VLLM_MYOPS_W4A16_CUDA_PATH", CudaPath::kAuto,
                  {{"swap", CudaPath::kSwap},
                   {"swap_global", CudaPath::kSwapGlobal},
                   {"ring", CudaPath::kRing},
                   {"ring4", CudaPath::kRing4},
                   {"mma", CudaPath::kMma},
                   {"tc", CudaPath::kTc},
                   {"tc4", CudaPath::kTc4},
                   {"tc8", CudaPath::kTc8},
                   {"dequant", CudaPath::kDequant},
                   {"dequant_pipe", CudaPath::kDequantPipe}});
  return f;
}

CudaPath cuda_path_for(int64_t m) {
  const CudaPath f = forced_cuda_path();
  if (f != CudaPath::kAuto) return f;
  if (m <= kSwapMaxM) return CudaPath::kSwap;
  if (m <= kRingMaxM) return CudaPath::kRing4;
  return m < kTcMaxM ? CudaPath::kTc : CudaPath::kDequant;
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Dequantizes the n-tiles [nt0, nt0 + nts) of the weight into w [K, N]
// (a's dtype) on `stream`.
template <typename T>
void launch_dequant(const at::Tensor& b_packed, const at::Tensor& scales,
                    const std::optional<at::Tensor>& zeros,
                    const w4a16::GemmShape& shape, int group_rows, int64_t nt0,
                    int64_t nts, at::Tensor& w, cudaStream_t stream) {
  TORCH_CHECK(nts <= 65535,
              "w4a16_gemm: size_n must be <= ", 65535 * w4a16::kTile,
              " on CUDA (one grid row per 64 columns)");
  const dim3 grid(static_cast<unsigned>(shape.k_tiles),
                  static_cast<unsigned>(nts));
  w4a16_dequant_kernel<T><<<grid, kDequantThreads, 0, stream>>>(
      reinterpret_cast<const uint4*>(b_packed.data_ptr<int32_t>()),
      static_cast<const T*>(scales.data_ptr()),
      zeros.has_value() ? static_cast<const T*>(zeros->data_ptr()) : nullptr,
      static_cast<T*>(w.data_ptr()), static_cast<int>(shape.k),
      static_cast<int>(shape.n), static_cast<int>(shape.k_tiles), group_rows,
      aligned16(scales.data_ptr()) &&
          (!zeros.has_value() || aligned16(zeros->data_ptr())),
      static_cast<int>(nt0));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// out[:, n0:n0+nc] (+ bias) = a @ w[:, n0:n0+nc] through cuBLAS on the
// current stream; the column views keep their row stride N (cuBLAS's ld),
// so nothing is copied.
void mm_columns(const at::Tensor& a, const at::Tensor& w,
                const std::optional<at::Tensor>& bias, int64_t n0, int64_t nc,
                at::Tensor& out) {
  at::Tensor out_cols = out.narrow(1, n0, nc);
  const at::Tensor w_cols = w.narrow(1, n0, nc);
  if (bias.has_value()) {
    at::addmm_out(out_cols, bias->narrow(0, n0, nc), a, w_cols);
  } else {
    at::mm_out(out_cols, a, w_cols);
  }
}

// "dequant": the whole weight, then one cuBLAS GEMM.
template <typename T>
void run_dequant(const at::Tensor& a, const at::Tensor& b_packed,
                 const at::Tensor& scales,
                 const std::optional<at::Tensor>& zeros,
                 const std::optional<at::Tensor>& bias,
                 const w4a16::GemmShape& shape, int group_rows,
                 at::Tensor& out) {
  at::Tensor w = at::empty({shape.k, shape.n}, a.options());
  launch_dequant<T>(b_packed, scales, zeros, shape, group_rows, 0,
                    shape.n_tiles, w, at::cuda::getCurrentCUDAStream());
  mm_columns(a, w, bias, 0, shape.n, out);
}

// "dequant_pipe": column chunks of whole tiles. Chunk c + 1's dequant
// (memory-bound) runs on a pool stream while cuBLAS multiplies chunk c
// (compute-bound from M ~ 1k) on the caller's stream, so about one chunk's
// dequant stays exposed instead of the whole weight's. Fork / join by events
// (no host sync; CUDA-graph capturable: the pool stream joins the capture
// through the fork event and is joined back by the last chunk's). w is
// allocated on the caller's stream and the pool stream waits for that
// stream first, so its writes follow every earlier user of the memory; the
// caller's stream waits for the last chunk before w can be freed.
constexpr int64_t kPipeMaxChunks = 8;
constexpr int64_t kPipeMinChunkTiles = 16;  // 1024 columns per cuBLAS call

template <typename T>
void run_dequant_pipelined(const at::Tensor& a, const at::Tensor& b_packed,
                           const at::Tensor& scales,
                           const std::optional<at::Tensor>& zeros,
                           const std::optional<at::Tensor>& bias,
                           const w4a16::GemmShape& shape, int group_rows,
                           at::Tensor& out) {
  const int64_t chunks = std::clamp<int64_t>(shape.n_tiles / kPipeMinChunkTiles,
                                             1, kPipeMaxChunks);
  if (chunks == 1) {
    run_dequant<T>(a, b_packed, scales, zeros, bias, shape, group_rows, out);
    return;
  }
  const int64_t per = w4a16::ceil_div(shape.n_tiles, chunks);
  at::Tensor w = at::empty({shape.k, shape.n}, a.options());
  const at::cuda::CUDAStream caller = at::cuda::getCurrentCUDAStream();
  const at::cuda::CUDAStream side =
      at::cuda::getStreamFromPool(false, caller.device_index());
  at::cuda::CUDAEvent fork;
  fork.record(caller);
  fork.block(side);
  // Re-recorded per chunk: a wait takes the record made before it. The host
  // enqueues both streams' work asynchronously, so chunk c's GEMM does not
  // hold back chunk c + 1's dequant.
  at::cuda::CUDAEvent chunk_done;
  for (int64_t nt0 = 0; nt0 < shape.n_tiles; nt0 += per) {
    const int64_t nts = std::min(per, shape.n_tiles - nt0);
    launch_dequant<T>(b_packed, scales, zeros, shape, group_rows, nt0, nts, w,
                      side);
    chunk_done.record(side);
    chunk_done.block(caller);
    const int64_t n0 = nt0 * w4a16::kTile;
    mm_columns(a, w, bias, n0, std::min(nts * w4a16::kTile, shape.n - n0), out);
  }
}

}  // namespace
}  // namespace vllm_myops

using namespace vllm_myops;

at::Tensor w4a16_gemm_cuda(const at::Tensor& a, const at::Tensor& b_packed,
                           const at::Tensor& scales,
                           const std::optional<at::Tensor>& zeros,
                           const std::optional<at::Tensor>& bias,
                           int64_t size_k, int64_t size_n, int64_t group_size) {
  const w4a16::GemmShape shape = w4a16::check_gemm_args(
      a, b_packed, scales, zeros, bias, size_k, size_n, group_size);
  const c10::cuda::CUDAGuard device_guard(a.device());
  // 32-bit index math in the kernels (rows, columns, k).
  TORCH_CHECK(shape.k < (int64_t{1} << 30) && shape.n < (int64_t{1} << 30) &&
                  shape.m < (int64_t{1} << 30),
              "w4a16_gemm: size_k, size_n and M must be < 2^30");
  at::Tensor out = at::empty({shape.m, shape.n}, a.options());
  if (shape.m == 0) return out;
  const int group_rows =
      static_cast<int>(group_size == -1 ? shape.k : group_size);

  const at::Tensor a_rows = w4a16::unit_stride_rows(a);

  const bool is_half = a.scalar_type() == at::kHalf;
  const CudaPath path = cuda_path_for(shape.m);
  if (path == CudaPath::kDequant || path == CudaPath::kDequantPipe) {
    // cuBLAS's kernel choice depends on the operands' layout: a strided a
    // (row stride not a multiple of 8 elements) gave sums that differ in the
    // last bit from the contiguous a's. The copy (M x K, small beside the
    // K x N dequant) makes the result independent of a's layout.
    const at::Tensor a_dense = a_rows.contiguous();
    const bool pipe = path == CudaPath::kDequantPipe;
    if (is_half) {
      (pipe ? run_dequant_pipelined<__half>
            : run_dequant<__half>)(a_dense, b_packed, scales, zeros, bias,
                                   shape, group_rows, out);
    } else {
      (pipe ? run_dequant_pipelined<__nv_bfloat16>
            : run_dequant<__nv_bfloat16>)(a_dense, b_packed, scales, zeros,
                                          bias, shape, group_rows, out);
    }
    return out;
  }
  if (path == CudaPath::kTc || path == CudaPath::kTc4 ||
      path == CudaPath::kTc8) {
    const TcBuild build = path == CudaPath::kTc4   ? TcBuild::kLarge4
                          : path == CudaPath::kTc8 ? TcBuild::kLarge8
                                                   : TcBuild::kAuto;
    if (is_half) {
      run_tc_gemm<__half>(a_rows, b_packed, scales, zeros, bias, shape,
                          group_rows, build, out);
    } else {
      run_tc_gemm<__nv_bfloat16>(a_rows, b_packed, scales, zeros, bias, shape,
                                 group_rows, build, out);
    }
    return out;
  }
  if (is_half) {
    run_gemm<__half>(a_rows, b_packed, scales, zeros, bias, shape, group_rows,
                     path, out);
  } else {
    run_gemm<__nv_bfloat16>(a_rows, b_packed, scales, zeros, bias, shape,
                            group_rows, path, out);
  }
  return out;
}
