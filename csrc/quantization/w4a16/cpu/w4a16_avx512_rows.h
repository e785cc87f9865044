// SPDX-License-Identifier: Apache-2.0
// The CPU W4A16 kernel's bf16 row-block path (AVX512-BF16: vdpbf16ps, two
// K-rows per instruction), chosen at run time from cpuid.
// Include only from w4a16_kernels_isa.cpp (compiled once per ISA,
// cpu/isa.h); everything here has internal linkage.
#pragma once

#if !defined(CPU_CAPABILITY_AVX512)
  #error "AVX-512 paths: include from the AVX-512 build only"
#endif

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include <immintrin.h>

#include "quantization/w4a16/cpu/w4a16_cpu_block.h"

namespace vllm_myops::cpu {
namespace {

// ---------------------------------------------------------------------------
// AVX512-BF16 (bf16 activations): vdpbf16ps does two K-rows per instruction.
// Built with a target attribute (the AVX512 build's flags do not include
// BF16) and chosen at run time from cpuid.
// ---------------------------------------------------------------------------
#define MYOPS_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

// bf16 bits of 16 columns (lanes past the mask 0) -> fp32, exact.
MYOPS_BF16_TARGET inline __m512 load_bf16_ps(const uint16_t* p, __mmask16 m) {
  const __m512i x = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
}

// Rows [m0, m0 + MB) x the 64 columns of one n-tile (words `bt`); the bf16
// scales (and zeros) of the tile's columns are read per group from `sp`
// (`zp`: nullptr when symmetric), row stride n, columns past `cols` masked
// to 0 (no contribution); `next`: the next n-tile's column offset from sp
// for the prefetch, 0 when this thread has none.
template <int MB>
MYOPS_BF16_TARGET void block_bf16(const __m512i lut, const W4A16CpuParams& p,
                                  const int32_t* bt, const uint16_t* sp,
                                  const uint16_t* zp, int cols, int64_t next,
                                  int64_t m0, float* tot) {
  constexpr int NV4 = 4;  // 64 columns
  __mmask16 colmask[NV4];
  for (int v = 0; v < NV4; ++v) {
    const int c = std::clamp(cols - v * 16, 0, 16);
    colmask[v] = __mmask16((uint32_t(1) << c) - 1);
  }
  const uint16_t* arow[MB];
  const float* srow[MB];
  for (int m = 0; m < MB; ++m) {
    arow[m] = static_cast<const uint16_t*>(p.a_half) + (m0 + m) * p.lda;
    srow[m] = p.a_sums + (m0 + m) * p.groups;
  }
  for (int64_t g = 0; g < p.groups; ++g) {
    const int64_t k_begin = g * p.group_rows;
    const int64_t k_end = std::min(p.k, k_begin + p.group_rows);
    const int64_t w_begin = k_begin / 8;
    const int64_t w_end = (k_end + 7) / 8;
    const int64_t ga = g + kParamsAhead;
    const int64_t off = ga < p.groups ? ga * p.n
                        : next && ga - p.groups < p.groups
                            ? (ga - p.groups) * p.n + next
                            : -1;
    if (off >= 0) {
      prefetch_params_row(sp + off);
      if (zp) prefetch_params_row(zp + off);
    }
    __m512 acc[MB][NV4];
    for (int m = 0; m < MB; ++m)
      for (int v = 0; v < NV4; ++v) acc[m][v] = _mm512_setzero_ps();
    for (int64_t r = w_begin; r < w_end; ++r) {
      const int32_t* wp = bt + r * kTileN;
      prefetch_row(wp);
      __m512i w[NV4];
      for (int v = 0; v < NV4; ++v) w[v] = _mm512_loadu_si512(wp + v * 16);
      const int64_t k0 = r * 8;
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        __m512i q[NV4];
        for (int v = 0; v < NV4; ++v) {
          // vpermw reads the low 5 bits of each half-word: the table repeats.
          q[v] = _mm512_permutexvar_epi16(w[v], lut);
          w[v] = _mm512_srli_epi32(w[v], 4);
        }
        for (int m = 0; m < MB; ++m) {
          int32_t pair;
          std::memcpy(&pair, arow[m] + k0 + 2 * j, sizeof(pair));
          const __m512i av = _mm512_set1_epi32(pair);
          for (int v = 0; v < NV4; ++v)
            acc[m][v] =
                _mm512_dpbf16_ps(acc[m][v], (__m512bh)q[v], (__m512bh)av);
        }
      }
    }
    // q' = q - 8 here: the symmetric zero needs no correction.
    __m512 sg[NV4], zg[NV4];
    for (int v = 0; v < NV4; ++v) {
      sg[v] = load_bf16_ps(sp + g * p.n + v * 16, colmask[v]);
      if (zp)
        zg[v] = _mm512_sub_ps(load_bf16_ps(zp + g * p.n + v * 16, colmask[v]),
                              _mm512_set1_ps(8.f));
    }
    for (int m = 0; m < MB; ++m) {
      const __m512 sa = _mm512_set1_ps(srow[m][g]);
      for (int v = 0; v < NV4; ++v) {
        __m512 x = acc[m][v];
        if (zp) x = _mm512_fnmadd_ps(zg[v], sa, x);
        float* t = tot + m * kTileN + v * 16;
        _mm512_storeu_ps(t, _mm512_fmadd_ps(sg[v], x, _mm512_loadu_ps(t)));
      }
    }
  }
}

MYOPS_BF16_TARGET void tiles_bf16(const W4A16CpuParams& p, int64_t nt_begin,
                                  int64_t nt_end) {
  alignas(64) uint16_t table[32];
  for (int i = 0; i < 32; ++i) table[i] = c10::BFloat16(float(i % 16 - 8)).x;
  const __m512i lut = _mm512_loadu_si512(table);
  alignas(64) float tot[4 * kTileN];
  const auto* scales = static_cast<const uint16_t*>(p.scales);
  const auto* zeros = static_cast<const uint16_t*>(p.zeros);
  for (int64_t g = 0; g < std::min(kParamsAhead, p.groups); ++g) {
    prefetch_params_row(scales + g * p.n + nt_begin * kTileN);
    if (zeros) prefetch_params_row(zeros + g * p.n + nt_begin * kTileN);
  }
  for (int64_t nt = nt_begin; nt < nt_end; ++nt) {
    const int64_t col0 = nt * kTileN;
    const int cols = int(std::min<int64_t>(kTileN, p.n - col0));
    const int64_t next = nt + 1 < nt_end ? kTileN : 0;
    const uint16_t* sp = scales + col0;
    const uint16_t* zp = zeros ? zeros + col0 : nullptr;
    const int32_t* bt = p.b + nt * p.k_tiles * 512;
    for (int64_t m0 = 0; m0 < p.m; m0 += 4) {
      const int mb = int(std::min<int64_t>(4, p.m - m0));
      std::fill(tot, tot + 4 * kTileN, 0.f);
      switch (mb) {
        case 4:
          block_bf16<4>(lut, p, bt, sp, zp, cols, next, m0, tot);
          break;
        case 3:
          block_bf16<3>(lut, p, bt, sp, zp, cols, next, m0, tot);
          break;
        case 2:
          block_bf16<2>(lut, p, bt, sp, zp, cols, next, m0, tot);
          break;
        default:
          block_bf16<1>(lut, p, bt, sp, zp, cols, next, m0, tot);
          break;
      }
      store_rows<c10::BFloat16>(p, tot, m0, mb, col0, cols);
    }
  }
}

}  // namespace
}  // namespace vllm_myops::cpu
