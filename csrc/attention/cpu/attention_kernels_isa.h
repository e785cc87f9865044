// SPDX-License-Identifier: Apache-2.0
// Per-ISA entry points of the CPU paged attention kernels.
// attention_kernels_isa.cpp is compiled once per ISA (cpu/isa.h); the work
// split and the launch live in attention_kernels.cpp.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace vllm_myops::cpu {

// How p . V is computed (VLLM_MYOPS_ATTENTION_CPU_PV, read by the host):
// kAuto and kFp32: fp32 FMAs (p in fp32); kBf16Dot (forced only, the host
// has checked for the avx512 ISA and AVX512-BF16): vdpbf16ps on pairs of
// tokens, p rounded to bf16, fp32 accumulate, for bf16 caches with
// D % 32 == 0 (other calls run fp32). Not the default (vdpbf16ps costs more
// than two FMAs where this was built); kept for CPUs where it is cheaper,
// and tested.
enum class PvPath { kAuto, kFp32, kBf16Dot };

// How bf16 q . k is computed (VLLM_MYOPS_ATTENTION_CPU_QK, read by the
// host): kAuto: fp32 FMAs on the even/odd halves of the bf16 pairs (the
// avx512 ISA, D % 32 == 0), otherwise as before; kBf16Dot: vdpbf16ps where
// AVX512-BF16 is present (the path before the split one), fp32 otherwise.
enum class QkPath { kAuto, kBf16Dot };

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
  QkPath qk_path;
  PvPath pv_path;
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
