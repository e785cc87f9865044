// SPDX-License-Identifier: Apache-2.0
// Per-ISA entry points of the CPU W4A16 GEMM. w4a16_kernels_isa.cpp is
// compiled once per ISA (cpu/isa.h), each copy defining the function named
// for its ISA. The tile arrangement is documented in w4a16_kernels_isa.cpp.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace vllm_myops::cpu {

// The inner path of one call, chosen by the host (w4a16_kernels.cpp) from
// the ISA, the CPU's features, the dtype, M and VLLM_MYOPS_W4A16_CPU_PATH.
// Only the AVX512 copy runs the bf16 ones.
enum class W4A16CpuPath : int {
  kFp32 = 0,       // fp32 FMA, 4-row blocks (every ISA)
  kBf16Rows = 1,   // AVX512-BF16, weight decoded per row block (small M)
  kBf16Panel = 2,  // AVX512-BF16, a bf16 panel decoded once for all rows
  kAmx = 3,        // AMX-BF16 tiles on the same panel (bf16 and fp16)
};

// One GEMM call, in the form the tile loop wants. ATen-free.
struct W4A16CpuParams {
  const float* a;       // fp32 [m, lda], zero past k
  const void* a_half;   // bf16 paths: a as bf16 [a_rows, lda], zero past
                        // k and past m (AMX: in tile order; fp16 a: two
                        // such planes, hi then lo, see the AMX path);
                        // nullptr otherwise
  int64_t a_rows;       // rows of one a_half plane: round_up(m, 16)
                        // (m for the row-block path)
  int64_t lda;          // >= k_tiles * 64 and >= groups * group_rows
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
  W4A16CpuPath path;
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
