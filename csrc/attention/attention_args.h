// SPDX-License-Identifier: Apache-2.0
// Argument checks of the paged attention ops (paged_kv_write,
// paged_attention), shared by the CPU and CUDA entry points. Every check
// names the argument and what was expected.
//
// Formats (vllm_myops/attention/reference.py documents them):
//   kv_cache        [num_blocks, H_kv, block_size, 2*D] fp16/bf16, contiguous;
//                   K of a token in [..., :D], V in [..., D:]
//   key, value      [T, H_kv, D], the cache's dtype, last dim contiguous
//   slot_mapping    int64 [>= T], slot s -> block s / bs, offset s % bs,
//                   s < 0 skips the token
//   query, out      [T, H_q, D], last dim contiguous, H_q % H_kv == 0
//   query_start_loc int32 [B+1], seq_lens int32 [B],
//   block_table     int32 [B, max_blocks_per_seq], last dim contiguous
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace vllm_myops::attention {

struct KvWriteShape {
  int64_t num_tokens, num_kv_heads, head_dim, num_blocks, block_size;
};

struct AttentionShape {
  int64_t num_tokens;    // T (rows of query / out)
  int64_t num_heads;     // H_q
  int64_t num_kv_heads;  // H_kv
  int64_t head_dim;      // D
  int64_t num_blocks;
  int64_t block_size;
  int64_t num_seqs;            // B
  int64_t max_blocks_per_seq;  // block_table.size(1)
};

// All tensors on key's device; shapes, dtypes and layouts as above.
KvWriteShape check_kv_write_args(const at::Tensor& key, const at::Tensor& value,
                                 const at::Tensor& kv_cache,
                                 const at::Tensor& slot_mapping);

// All tensors on out's device; shapes, dtypes and layouts as above, scale
// finite, the hints >= 0. Values inside the index tensors are checked by
// check_attention_indices (it reads them: host tensors only).
AttentionShape check_attention_args(const at::Tensor& out,
                                    const at::Tensor& query,
                                    const at::Tensor& kv_cache,
                                    const at::Tensor& query_start_loc,
                                    const at::Tensor& seq_lens,
                                    const at::Tensor& block_table, double scale,
                                    int64_t max_query_len, int64_t max_seq_len);

// Host-side values: every slot < num_blocks * block_size.
void check_slots(const KvWriteShape& s, const at::Tensor& slot_mapping);

// Host-side values: query_start_loc starts at 0, never decreases, ends
// <= T; 0 <= q_len <= seq_len <= max_blocks_per_seq * block_size; q_len and
// seq_len within the hints; every block a sequence reads in [0, num_blocks).
void check_attention_indices(const AttentionShape& s,
                             const at::Tensor& query_start_loc,
                             const at::Tensor& seq_lens,
                             const at::Tensor& block_table,
                             int64_t max_query_len, int64_t max_seq_len);

}  // namespace vllm_myops::attention
