// SPDX-License-Identifier: Apache-2.0
// Per-ISA entry points of the CPU W4A16 GEMM. w4a16_kernels_isa.cpp is
// compiled once per ISA (cpu/isa.h), each copy defining the function named
// for its ISA. The tile arrangement is documented in w4a16_kernels_isa.cpp.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace vllm_myops::cpu {

// One GEMM call, in the form the tile loop wants. ATen-free.
struct W4A16CpuParams {
  const float* a;       // fp32 [m, lda], zero past k
  const void* a_half;   // a in its dtype [m, lda], zero past k
  int64_t lda;          // >= k_words * 8
  const float* a_sums;  // fp32 [m, groups]: sum of a over each group
  const int32_t* b;     // [n_tiles, k_tiles, 512]
  const void* scales;   // [groups, n], dtype
  const void* zeros;    // [groups, n], dtype, or nullptr (symmetric)
  const float* bias;    // fp32 [n] or nullptr
  void* out;            // [m, n], dtype, contiguous
  int64_t m, n, k;
  int64_t k_words;     // ceil(k / 8)
  int64_t k_tiles;     // ceil(k / 64)
  int64_t group_rows;  // rows of K per group (k for per-channel)
  int64_t groups;
  DType dtype;  // kFloat16 or kBFloat16
};

// Computes the output columns of n-tiles [nt_begin, nt_end) for every row.
using W4A16TilesFn = void (*)(const W4A16CpuParams& p, int64_t nt_begin,
                              int64_t nt_end);

void w4a16_gemm_tiles_DEFAULT(const W4A16CpuParams& p, int64_t nt_begin,
                              int64_t nt_end);
void w4a16_gemm_tiles_AVX2(const W4A16CpuParams& p, int64_t nt_begin,
                           int64_t nt_end);
void w4a16_gemm_tiles_AVX512(const W4A16CpuParams& p, int64_t nt_begin,
                             int64_t nt_end);

}  // namespace vllm_myops::cpu
