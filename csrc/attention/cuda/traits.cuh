// SPDX-License-Identifier: Apache-2.0
//
// Tile sizes and shared-memory layout of the CUDA paged-attention kernels:
// decode_split and prefill_m64 (one m16 row tile per warp, M16Traits) and
// prefill_m128 (two m16 row tiles per warp, PrefillM128Traits). All take
// 128 threads (4 warps) and 2 cp.async stages.
#pragma once

#include <cstdint>

namespace vllm_myops::attention_cuda {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kStages = 2;             // tiles in flight (cp.async groups)
constexpr int kDecodeTileN = 64;       // decode KV tile (16 tokens per warp)
constexpr int kPrefillM64Rows = 64;    // rows per prefill_m64 CTA (16 / warp)
constexpr int kPrefillM128Rows = 128;  // rows per prefill_m128 CTA (32 / warp)
constexpr int kDecodeMaxGroup = 16;    // G the decode kernel takes (one m16)
constexpr int kMaxSplits = 64;

// Head dims prefill_m128 is built for.
constexpr bool prefill_m128_supports(int64_t head_dim) {
  return head_dim == 64 || head_dim == 128;
}

// decode_split (kDecode) and prefill_m64: 16 rows per warp.
template <int D, bool kDecode>
struct M16Traits {
  static constexpr int kRows = kDecode ? 16 : kPrefillM64Rows;
  // KV tokens per tile. Prefill D = 256 takes 32: its S fragment for 64
  // tokens (32 registers) beside the 128-register accumulator spills.
  static constexpr int kTileN = kDecode ? kDecodeTileN : (D == 256 ? 32 : 64);
  static constexpr int kWarpTokens = kDecode ? kTileN / kWarps : kTileN;
  // Tokens of S held at once: prefill D = 256 walks its 32-token tile in
  // halves (sm_80 spilled 16 bytes at 32; sm_90a did not).
  static constexpr int kSubN = (D == 256 && !kDecode) ? 16 : kWarpTokens;
  static constexpr int kNB = kSubN / 8;    // n8 blocks of S per warp
  static constexpr int kDB = D / 8;        // n8 blocks of O
  static constexpr int kKS = D / 16;       // k16 steps of Q K^T
  static constexpr int kChunksKV = D / 4;  // 16-byte chunks per token (K, V)
  static constexpr int kChunksQ = D / 8;
  static constexpr bool kQInRegs = D <= 128;
  static constexpr int kKvStageBytes = kTileN * kChunksKV * 16;
  static constexpr int kQBytes = kRows * kChunksQ * 16;
  // Decode: the warps' (acc, m, l) merge reuses the K/V stages.
  static constexpr int kMergeBytes = kWarps * 16 * (D + 2) * 4;
  static_assert(!kDecode || kMergeBytes <= kStages * kKvStageBytes);
  static constexpr int kSmemBytes = kStages * kKvStageBytes + kQBytes;
  // Resident CTAs per SM the registers must allow at decode D = 64 / 128
  // (<= 128 / 168 registers). Unbounded, the one-pass merge and the
  // shuffled copies took sm_90a to 120 / 192 registers; D = 128 keeps the
  // 3 CTAs its shared memory allows, D = 64 drops from 5 to 4 (at 96
  // registers, the old count, it spilled): 16 warps and ~64 KB in flight
  // per SM, still above the ~40 KB the bandwidth needs.
  // Prefill D = 64: 3 (<= 168 registers, 40 KB of shared memory each).
  // Unbounded, sm_90a takes 173 registers for it, which leaves 2.
  static constexpr int kMinCtas = !kDecode   ? (D == 64 ? 3 : 1)
                                  : D == 64  ? 4
                                  : D == 128 ? 3
                                             : 1;
};

// prefill_m128: 32 rows per warp, D 64 / 128.
template <int D>
struct PrefillM128Traits {
  static constexpr int kRows = kPrefillM128Rows;
  static constexpr int kWarpRows = kRows / kWarps;  // 32: two m16 tiles
  static constexpr int kMT = kWarpRows / 16;
  static constexpr int kTileN = 64;
  static constexpr int kNB = kTileN / 8;   // n8 blocks of S
  static constexpr int kDB = D / 8;        // n8 blocks of O
  static constexpr int kKS = D / 16;       // k16 steps of Q K^T
  static constexpr int kChunksKV = D / 4;  // 16-byte chunks per token (K, V)
  static constexpr int kChunksQ = D / 8;
  static constexpr bool kQInRegs = D <= 64;
  static constexpr int kKvStageBytes = kTileN * kChunksKV * 16;
  static constexpr int kQBytes = kRows * kChunksQ * 16;
  static constexpr int kSmemBytes = kStages * kKvStageBytes + kQBytes;
};

}  // namespace vllm_myops::attention_cuda
