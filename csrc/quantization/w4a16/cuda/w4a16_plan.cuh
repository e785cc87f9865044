// SPDX-License-Identifier: Apache-2.0
//
// The plan of a W4A16 GEMM on CUDA (host side): which path runs at which M,
// the forced values of VLLM_MYOPS_W4A16_CUDA_PATH, and how K is split
// across blocks (docs/quantization/design.md). The launchers in
// w4a16_gemm.cu follow it.
//
// Paths by M under "auto":
//   M = 0                    empty output, no launch.
//   1 <= M <= kSwapMaxM      w4a16_swap_kernel (cuda/w4a16_swap_decode.cuh),
//                            its activations through its cp.async ring, or
//                            from global memory where a's rows cannot be
//                            16-byte copied ("swap_global").
//   kSwapMaxM < M <= kRingMaxM
//                            w4a16_decode_kernel (cuda/w4a16_ring_decode.cuh,
//                            "ring4").
//   kRingMaxM < M < kTcMaxM  w4a16_tc_kernel (cuda/w4a16_tc_gemm.cuh, "tc"):
//                            its 32-row build up to kTcSmallMaxM, above it
//                            the 64-row build of 4 or 8 warps ("tc4" /
//                            "tc8") that choose_tc_splits' cost model makes
//                            faster.
//   M >= kTcMaxM             dequantize W to a's dtype
//                            (cuda/w4a16_dequant.cuh), then cuBLAS through
//                            at::mm / at::addmm ("dequant"), so large M is
//                            never much slower than bf16.
//   On Hopper (a build with the sm_90a kernels, a device of compute
//   capability 9.0), kSwapMaxM < M <= kWgmmaMaxM runs the warp-specialized
//   wgmma kernel instead of ring4 / tc / dequant ("wgmma_tma",
//   csrc/sm90a/w4a16_wgmma_tma.cu): its time is flat over its 16-token tile
//   and below ring4's at M = 16 (docs/quantization/log/).
// Split-K: when the blocks of one K pass leave the GPU poorly filled, K is
// split across blocks: each split writes its fp32 partial to its own slice
// of a workspace (caching allocator, no memset) and a second kernel
// (cuda/w4a16_splitk_reduce.cuh) sums the slices in split order, adds the
// bias and rounds once (deterministic, no host sync, CUDA-graph
// capturable).
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/env_choice.h"
#include "quantization/w4a16/cuda/w4a16_layout.cuh"
#include "quantization/w4a16/cuda/w4a16_mma_common.cuh"
#include "quantization/w4a16/cuda/w4a16_tc_gemm.cuh"
#include "quantization/w4a16/w4a16_args.h"

namespace vllm_myops::w4a16::plan {

namespace layout = cuda_layout;

// ---- Paths by M -------------------------------------------------------------
// Largest M the swap kernel takes. A block is one token octet: a 2-octet
// build needs 205 registers (2 blocks per SM), and at M = 16 the ring kernel
// beats it (docs/quantization/log/).
constexpr int64_t kSwapMaxM = 8;
// Largest M the ring kernel takes (M tiles of 16; the blocks of one
// n-tile's M tiles run together, so all but the first read B from L2).
constexpr int64_t kRingMaxM = 16;
// M from which dequant + cuBLAS is used; the tc kernel (A and B through
// shared memory, each code dequantized once per block of 32 / 64 rows) runs
// above kRingMaxM and below it. The tc kernel's dequant work grows with the
// number of blocks along M, dequant + cuBLAS pays one dequant of W and then
// runs at cuBLAS's rate: 160 is where the two tie on the benchmark's shapes
// (bf16, g128; docs/quantization/log/).
constexpr int64_t kTcMaxM = 160;
// Largest M the Hopper kernel takes under "auto": up to here it beat tc and
// dequant + cuBLAS on the benchmark's shapes (bf16, g128); above it cuBLAS on
// the dequantized weight is faster (docs/quantization/log/).
constexpr int64_t kWgmmaMaxM = 1024;

// VLLM_MYOPS_W4A16_CUDA_PATH (read once) forces one path at every M, so the
// tests cover each and the benchmark can compare them. Only paths "auto"
// takes are offered: "swap" (w4a16_swap_kernel; "swap_global": its build
// that loads the activations from global memory, which "swap" falls back to
// when they cannot go through the cp.async ring), "ring4"
// (w4a16_decode_kernel), "tc" (w4a16_tc_kernel, its build by M and cost
// model; "tc4" / "tc8": the 64-row build of 4 / 8 warps at every M) or
// "dequant" (dequant + cuBLAS) or "wgmma_tma" (the Hopper kernel; refused
// on other devices); unset or "auto" chooses by M and device.
enum class CudaPath {
  kAuto,
  kSwap,
  kSwapGlobal,
  kRing4,
  kTc,
  kTc4,
  kTc8,
  kDequant,
  kWgmmaTma
};

inline CudaPath forced_cuda_path() {
  static const CudaPath f =
      env::choice("VLLM_MYOPS_W4A16_CUDA_PATH", CudaPath::kAuto,
                  {{"swap", CudaPath::kSwap},
                   {"swap_global", CudaPath::kSwapGlobal},
                   {"ring4", CudaPath::kRing4},
                   {"tc", CudaPath::kTc},
                   {"tc4", CudaPath::kTc4},
                   {"tc8", CudaPath::kTc8},
                   {"dequant", CudaPath::kDequant},
                   {"wgmma_tma", CudaPath::kWgmmaTma}});
  return f;
}

// `hopper`: the wgmma kernel can run here (see above).
inline CudaPath cuda_path_for(int64_t m, bool hopper) {
  const CudaPath f = forced_cuda_path();
  if (f != CudaPath::kAuto) return f;
  if (m <= kSwapMaxM) return CudaPath::kSwap;
  if (hopper && m <= kWgmmaMaxM) return CudaPath::kWgmmaTma;
  if (m <= kRingMaxM) return CudaPath::kRing4;
  return m < kTcMaxM ? CudaPath::kTc : CudaPath::kDequant;
}

// ---- Split-K of the decode kernels ------------------------------------------
// Split-K bounds: a split gives each warp at least one full ring of k-tiles
// (kWarps * stages), and at most kMaxSplits splits (workspace traffic grows
// with them).
constexpr int kMaxSplits = 16;

// K splits for `base_blocks` (n-tiles x M-tiles) blocks on a GPU with
// `slots` resident blocks. The kernel is bound by weight bandwidth, so what
// counts is how full the resident slots stay: the fraction of slot-waves
// used, blocks / (ceil(blocks / slots) * slots). Take the fewest splits
// within 2% of the best fraction (fewer splits: less workspace traffic,
// longer per-warp pipelines).
inline int choose_splits(int64_t base_blocks, int k_tiles, int64_t slots,
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

// K splits of the wgmma kernel. Its grid holds every token tile, so from
// M = 64 up it often fills the GPU unsplit, where choose_splits' fill rule
// would still split: that rule ignores the fp32 workspace (splits x M x N x
// 4 bytes written, then read again by the reduce). So: split only a grid
// under one wave of resident slots, up to one wave, and only while the
// workspace stays within kWgmmaWorkspaceBytes (about the L2; beyond it the
// round trip goes to DRAM).
// Measurements: docs/quantization/log/2026-12-06-wgmma-first-run-h100.md.
constexpr int64_t kWgmmaWorkspaceBytes = 32 << 20;

inline int choose_wgmma_splits(int64_t base_blocks, int k_tiles, int64_t slots,
                               int min_k_tiles_per_split, int64_t mn) {
  const int max_splits =
      std::max(1, std::min(k_tiles / min_k_tiles_per_split, kMaxSplits));
  int s = static_cast<int>(std::clamp<int64_t>(
      slots / std::max<int64_t>(base_blocks, 1), 1, max_splits));
  while (s > 1 && static_cast<int64_t>(s) * mn * 4 > kWgmmaWorkspaceBytes) --s;
  // The split count the launch really has: ceil(k_tiles / per) for per =
  // ceil(k_tiles / s) can be fewer than s.
  const int per = (k_tiles + s - 1) / s;
  return (k_tiles + per - 1) / per;
}

// ---- The tc builds and their split-K cost model -----------------------------
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

// One tc build as the launcher runs it.
struct TcKernel {
  void (*kernel)(dev::GemmArgs);
  int bm, bn, threads, smem_bytes, blocks_per_sm, stages;
};

struct TcPlan {
  int splits;
  double us;  // modelled
};

inline TcPlan choose_tc_splits(const TcKernel& kern, int64_t base_blocks,
                               int k_tiles, int sms, int64_t mn) {
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

// Which tc build: by M and the cost model, or one forced (tests, A/B).
enum class TcBuild { kAuto, kLarge4, kLarge8 };

}  // namespace vllm_myops::w4a16::plan
