// SPDX-License-Identifier: Apache-2.0
//
// The launch description every CUDA paged-attention kernel takes, and the
// sequence lengths as the kernels clamp them (the clamping rules: the file
// comment of paged_attention.cu).
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

// The sequence's clamped (q0, q_len, seq_len).
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

}  // namespace vllm_myops::attention_cuda
