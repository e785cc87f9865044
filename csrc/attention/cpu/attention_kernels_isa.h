// SPDX-License-Identifier: Apache-2.0
// Per-ISA entry points of the CPU paged attention kernels.
// attention_kernels_isa.cpp is compiled once per ISA (cpu/isa.h); the work
// split and the launch live in attention_kernels.cpp.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace vllm_myops::cpu {

// One paged_attention call, ATen-free. Strides in elements.
struct PagedAttentionParams {
  void* out;
  int64_t out_stride_t, out_stride_h;
  const void* query;
  int64_t q_stride_t, q_stride_h;
  const void* kv_cache;  // [num_blocks, H_kv, block_size, 2*D], contiguous
  const int32_t* query_start_loc;
  const int32_t* seq_lens;
  const int32_t* block_table;
  int64_t block_table_stride;
  int64_t num_heads, num_kv_heads, head_dim, block_size;
  float scale;
  DType dtype;  // kFloat16 or kBFloat16
};

// Query rows [q_begin, q_end) (indices inside sequence `seq`) of all the
// query heads of kv head `kv_head`, against context positions
// [kv_begin, kv_end). With `partial` == nullptr the item covers the rows'
// whole context and writes out; otherwise it writes, per row (token-major,
// then head), the unnormalised fp32 accumulator [D] then its running max
// (log2 domain) and sum to partial[row * (D + 2) ...] for the merge.
struct AttentionWorkItem {
  int32_t seq, kv_head;
  int32_t q_begin, q_end;
  int32_t kv_begin, kv_end;
  float* partial;
};

using AttentionItemFn = void (*)(const PagedAttentionParams& p,
                                 const AttentionWorkItem& item);

void attention_item_DEFAULT(const PagedAttentionParams& p,
                            const AttentionWorkItem& item);
void attention_item_AVX2(const PagedAttentionParams& p,
                         const AttentionWorkItem& item);
void attention_item_AVX512(const PagedAttentionParams& p,
                           const AttentionWorkItem& item);

}  // namespace vllm_myops::cpu
