// SPDX-License-Identifier: Apache-2.0
//
// Host-side plan of a paged_attention call on CUDA: how many splits the
// decode_split kernel takes, and which prefill kernel runs (prefill_m64,
// prefill_m128 or prefill_wgmma), forced per process by
// VLLM_MYOPS_ATTENTION_CUDA_PREFILL. Also declares the launchers of
// prefill_m128 and prefill_wgmma, which their own translation units
// (paged_attention_prefill_m128.cu, sm90a/attention_prefill_wgmma.cu)
// define.
#pragma once

#include <algorithm>
#include <cstdint>

#include <cuda_runtime.h>

#include "attention/cuda/params.cuh"
#include "attention/cuda/traits.cuh"
#include "core/env_choice.h"

namespace vllm_myops::attention_cuda {

// Splits of the decode context for base = B * H_kv CTAs on `slots` resident
// CTA slots, each split >= one tile, at most kMaxSplits. If every split of
// one tile fits in one wave, take them all (a small batch is latency bound:
// the shortest chain per CTA; 1 x 3 kv heads x 512 tokens is 24 CTAs, not
// 9). Otherwise the fewest splits within 5% of the best slot-wave fill
// (ctas / (waves * slots)). (Within 2%, 32 x 8k at 396 slots took 26 splits
// for 0.989 over 3 splits' 0.970: 9x the partial traffic for 2% of fill.)
inline int choose_splits(int64_t base, int64_t max_seq_len, int64_t slots) {
  const int64_t tiles =
      std::max<int64_t>(1, (max_seq_len + kDecodeTileN - 1) / kDecodeTileN);
  const int max_splits = int(std::min<int64_t>(tiles, kMaxSplits));
  if (base * max_splits <= slots) return max_splits;
  double fill[kMaxSplits + 1] = {};
  double best = 0.0;
  for (int s = 1; s <= max_splits; ++s) {
    const int64_t per = (tiles + s - 1) / s;
    if ((tiles + per - 1) / per != s) continue;  // same as fewer splits
    const int64_t ctas = base * s;
    fill[s] = double(ctas) / double((ctas + slots - 1) / slots * slots);
    best = std::max(best, fill[s]);
  }
  for (int s = 1; s <= max_splits; ++s) {
    if (fill[s] >= best - 0.05) return s;
  }
  return 1;
}

// The prefill kernel: prefill_m64 (64 rows per CTA, 16 per warp, any head
// dim), prefill_m128 (128 rows per CTA, 32 per warp, D 64 / 128 only; D =
// 256 always runs prefill_m64) or prefill_wgmma (128 rows per CTA, two
// consumer warpgroups on wgmma, sm_90a, D 64 / 128). Forced per process by
// VLLM_MYOPS_ATTENTION_CUDA_PREFILL=m64|m128|wgmma|wgmma_overlap|
// wgmma_pingpong (read once); unset or "auto" chooses between m64 and m128
// by head dim and query length (prefill_m128_by_default): auto never takes
// any wgmma value, none has been measured enough yet. wgmma_overlap is
// prefill_wgmma with the overlapped consumer mainloop
// (prefill_wgmma_overlap.cuh), a temporary value offered for the A/B
// against wgmma: whoever measures the two removes the loser (the value, or
// the serial mainloop and the kernel's kOverlap switch). wgmma_pingpong is
// the overlapped mainloop with the two consumer warpgroups taking turns on
// the tensor cores (FA3's ping-pong; the kernel's kPingpong), temporary
// too, offered for the A/B against wgmma_overlap (the loser goes: the
// value, or the kPingpong switch). prefill_m128 and prefill_wgmma need
// scale > 0; other scales run prefill_m64. Forced wgmma / wgmma_overlap /
// wgmma_pingpong where it cannot run (a build without sm_90a, a device
// other than compute capability 9.0, D = 256) runs what auto would choose,
// as forced m128 at D = 256 runs prefill_m64. Any other value is refused,
// naming the variable and the values it takes.
enum class PrefillPath {
  kAuto,
  kM64,
  kM128,
  kWgmma,
  kWgmmaOverlap,
  kWgmmaPingpong
};

inline PrefillPath prefill_path() {
  static const PrefillPath path =
      env::choice("VLLM_MYOPS_ATTENTION_CUDA_PREFILL", PrefillPath::kAuto,
                  {{"m64", PrefillPath::kM64},
                   {"m128", PrefillPath::kM128},
                   {"wgmma", PrefillPath::kWgmma},
                   // Offered for the A/B against wgmma (see above).
                   {"wgmma_overlap", PrefillPath::kWgmmaOverlap},
                   // Offered for the A/B against wgmma_overlap (see above).
                   {"wgmma_pingpong", PrefillPath::kWgmmaPingpong}});
  return path;
}

// Whether a forced value is one of prefill_wgmma's, and which consumer
// mainloop it runs (prefill_wgmma.cuh: serial, overlapped, overlapped with
// the ping-pong).
enum class WgmmaMainloop { kSerial, kOverlap, kPingpong };
constexpr bool prefill_path_is_wgmma(PrefillPath path) {
  return path == PrefillPath::kWgmma || path == PrefillPath::kWgmmaOverlap ||
         path == PrefillPath::kWgmmaPingpong;
}
constexpr WgmmaMainloop wgmma_mainloop(PrefillPath path) {
  return path == PrefillPath::kWgmmaPingpong  ? WgmmaMainloop::kPingpong
         : path == PrefillPath::kWgmmaOverlap ? WgmmaMainloop::kOverlap
                                              : WgmmaMainloop::kSerial;
}

// Head dims prefill_wgmma is built for, and its rows per CTA (the row
// tiles the grid counts; PrefillWgmmaTraits::kRows).
constexpr bool prefill_wgmma_supports(int64_t head_dim) {
  return head_dim == 64 || head_dim == 128;
}
constexpr int kPrefillWgmmaRows = 128;

// "auto": prefill_m128 for D = 128 from 1024 query tokens. It launches half
// the CTAs of prefill_m64: it pays where there are rows enough to fill the
// GPU (D = 128, long prompts), not for short prompts (too few CTAs) nor for
// D = 64. Measurements: docs/attention/log/.
constexpr int64_t kPrefillM128MinQueryLen = 1024;
constexpr bool prefill_m128_by_default(int d, int64_t max_query_len) {
  return d == 128 && max_query_len >= kPrefillM128MinQueryLen;
}

// Launches prefill_m128 on grid (num_seqs, num_kv_heads, row_tiles) (row
// tiles of kPrefillM128Rows) and checks the launch. T: __half or
// __nv_bfloat16; D: 64 or 128.
template <typename T, int D>
void launch_prefill_m128(const Params& p, int64_t num_seqs,
                         int64_t num_kv_heads, int64_t row_tiles,
                         cudaStream_t stream);

// Launches prefill_wgmma on grid (num_seqs, num_kv_heads, row_tiles) (row
// tiles of kPrefillWgmmaRows) and checks the launch; defined only in builds
// with sm_90a (VLLM_MYOPS_WITH_SM90A), and the caller must be on a device
// of compute capability 9.0. T: __half or __nv_bfloat16; D: 64 or 128;
// mainloop: the consumer mainloop (wgmma_mainloop of the forced value).
template <typename T, int D>
void launch_prefill_wgmma(const Params& p, int64_t num_seqs,
                          int64_t num_kv_heads, int64_t row_tiles,
                          WgmmaMainloop mainloop, cudaStream_t stream);

}  // namespace vllm_myops::attention_cuda
