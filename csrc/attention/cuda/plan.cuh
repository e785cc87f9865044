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
// VLLM_MYOPS_ATTENTION_CUDA_PREFILL=m64|m128|wgmma (read once); unset or
// "auto" takes prefill_wgmma where it can run and its grid fills the GPU
// (prefill_wgmma_by_default), else chooses between m64 and m128 by head
// dim and query length (prefill_m128_by_default). prefill_m128 and
// prefill_wgmma need scale > 0; other scales run prefill_m64. Forced wgmma
// where it cannot run (a build without sm_90a, a device other than compute
// capability 9.0, D = 256) runs what auto would choose there, as forced
// m128 at D = 256 runs prefill_m64. Any other value is refused, naming the
// variable and the values it takes.
enum class PrefillPath { kAuto, kM64, kM128, kWgmma };

inline PrefillPath prefill_path() {
  static const PrefillPath path =
      env::choice("VLLM_MYOPS_ATTENTION_CUDA_PREFILL", PrefillPath::kAuto,
                  {{"m64", PrefillPath::kM64},
                   {"m128", PrefillPath::kM128},
                   {"wgmma", PrefillPath::kWgmma}});
  return path;
}

// Head dims prefill_wgmma is built for, and its rows per CTA (the row
// tiles the grid counts; PrefillWgmmaTraits::kRows).
constexpr bool prefill_wgmma_supports(int64_t head_dim) {
  return head_dim == 64 || head_dim == 128;
}
constexpr int kPrefillWgmmaRows = 128;

// "auto" on sm_90a (the caller checks that prefill_wgmma can run there and
// that scale > 0): prefill_wgmma for D 64 / 128 when its grid, num_seqs x
// num_kv_heads x row tiles of kPrefillWgmmaRows packed (query token, q
// head) rows, has at least one CTA per SM (sms: the device's SM count).
// Why: prefill_wgmma runs one CTA per SM (384 threads; its shared memory
// and registers), so a smaller grid leaves SMs idle, while prefill_m64,
// auto's other choice on most such grids, spreads the same rows over twice
// the CTAs (64 rows each, several per SM): that is the faster kernel there,
// prefill_wgmma from one CTA per SM on (docs/attention/log/, the
// prefill_wgmma A/B entry). Written without the CTA product, which could
// overflow for absurd hints.
constexpr bool prefill_wgmma_by_default(int64_t head_dim, int64_t num_seqs,
                                        int64_t num_kv_heads,
                                        int64_t max_query_len, int64_t group,
                                        int64_t sms) {
  const int64_t pairs = num_seqs * num_kv_heads;
  if (!prefill_wgmma_supports(head_dim) || pairs < 1 || max_query_len < 1) {
    return false;
  }
  const int64_t row_tiles =
      (max_query_len * group + kPrefillWgmmaRows - 1) / kPrefillWgmmaRows;
  return pairs >= sms || row_tiles >= (sms + pairs - 1) / pairs;
}
// On 132 SMs: 1 sequence x 8 kv heads (G 4) from 513 query tokens (8 x
// 17 CTAs), 4 x 8 from 129 (32 x 5); 1 x 3 (G 3) from 1835 (3 x 44); D
// 256 never.
static_assert(!prefill_wgmma_by_default(128, 1, 8, 512, 4, 132) &&
              prefill_wgmma_by_default(128, 1, 8, 513, 4, 132) &&
              !prefill_wgmma_by_default(128, 4, 8, 128, 4, 132) &&
              prefill_wgmma_by_default(128, 4, 8, 129, 4, 132) &&
              !prefill_wgmma_by_default(64, 1, 3, 1834, 3, 132) &&
              prefill_wgmma_by_default(64, 1, 3, 1835, 3, 132) &&
              !prefill_wgmma_by_default(256, 1, 8, 1 << 20, 4, 132));

// "auto" where it does not take prefill_wgmma: prefill_m128 for D = 128
// from 1024 query tokens, prefill_m64 otherwise. prefill_m128 launches half
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
// of compute capability 9.0. T: __half or __nv_bfloat16; D: 64 or 128.
template <typename T, int D>
void launch_prefill_wgmma(const Params& p, int64_t num_seqs,
                          int64_t num_kv_heads, int64_t row_tiles,
                          cudaStream_t stream);

}  // namespace vllm_myops::attention_cuda
