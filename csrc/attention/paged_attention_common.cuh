// SPDX-License-Identifier: Apache-2.0
//
// What the CUDA paged-attention kernels share (paged_attention.cu: decode and
// the first prefill kernel; paged_attention_prefill_v2.cu: the 128-row
// prefill kernel): the launch description, the clamped sequence lengths, the
// block-table lookup of one token, the exp2 and quad reductions of the
// softmax, and the host entry of the v2 prefill kernel. See
// paged_attention.cu's file comment for the design and the clamping rules.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/launch.cuh"

namespace vllm_myops::attention_cuda {

struct Params {
  void* out;
  int64_t out_s0, out_s1;  // elements
  const void* query;
  int64_t q_s0, q_s1;
  const void* cache;
  const int* qsl;
  const int* seq_lens;
  const int* table;
  int64_t table_s0;
  int max_blocks_per_seq;
  int num_tokens;
  int num_blocks;
  int block_size;
  cuda::FastDivmod block_div;  // by block_size (>= 2)
  int num_kv_heads;
  int group;  // G = H_q / H_kv
  float scale_log2;
  // Decode splits.
  int splits;
  int split_tokens;  // a multiple of kDecodeTileN
  float* part_o;     // [B, H_q, splits, D]
  float2* part_ml;   // [B, H_q, splits] (max, sum)
  int* counters;     // [B, H_kv] splits finished; 0 between launches
  bool skip_decode_rows;
};

// The sequence's clamped (q0, q_len, seq_len); see the file comment.
struct SeqInfo {
  int q0, q_len, seq_len;
};

__device__ __forceinline__ SeqInfo seq_info(const Params& p, int b) {
  SeqInfo s;
  s.q0 = p.qsl[b];
  const int q1 = p.qsl[b + 1];
  s.seq_len = max(0, min(p.seq_lens[b], p.max_blocks_per_seq * p.block_size));
  if (s.q0 < 0 || s.q0 > p.num_tokens) {
    s.q0 = 0;
    s.q_len = 0;
  } else {
    s.q_len = max(0, min(min(q1, p.num_tokens) - s.q0, s.seq_len));
  }
  return s;
}

// Token pos's (physical block, offset) from the sequence's block-table row;
// phys -1 at or past `bound`.
__device__ __forceinline__ void table_entry(const Params& p, const int* table,
                                            int pos, int bound, int& phys,
                                            int& off) {
  phys = -1;
  off = 0;
  if (pos < bound) {
    const int blk =
        p.block_size == 1 ? pos : int(p.block_div.divide(uint32_t(pos)));
    off = pos - blk * p.block_size;
    phys = __ldg(table + blk);
  }
}

// 2^x (ex2.approx, ~2 ulp; 2^-inf = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---- The v2 prefill kernel (paged_attention_prefill_v2.cu) ------------------
// Rows (query token, q head) per CTA; head dims it is built for.
constexpr int kPrefillV2Rows = 128;
constexpr bool prefill_v2_supports(int64_t head_dim) {
  return head_dim == 64 || head_dim == 128;
}

// Launches the v2 prefill kernel on grid (num_seqs, num_kv_heads, row_tiles)
// (row tiles of kPrefillV2Rows) and checks the launch. T: __half or
// __nv_bfloat16; D: 64 or 128.
template <typename T, int D>
void launch_prefill_v2(const Params& p, int64_t num_seqs, int64_t num_kv_heads,
                       int64_t row_tiles, cudaStream_t stream);

}  // namespace vllm_myops::attention_cuda
