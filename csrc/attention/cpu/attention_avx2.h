// SPDX-License-Identifier: Apache-2.0
// The AVX2 bodies of the CPU paged attention kernel's portable pieces
// (attention_kernels_isa.cpp): 8-lane reductions, exp2 and the p * V
// columns. Include only from that per-ISA source compiled for AVX2
// (cpu/isa.h); everything here has internal linkage.
#pragma once

#include <immintrin.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>

namespace vllm_myops::cpu {
namespace {
namespace attn_avx2 {

// Lane j of the result = the sum of the 8 lanes of a[j] (a transpose-add).
inline __m256 sum_lanes8(const __m256 (&a)[8]) {
  const __m256 s01 = _mm256_hadd_ps(a[0], a[1]);
  const __m256 s23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 s45 = _mm256_hadd_ps(a[4], a[5]);
  const __m256 s67 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 s0123 = _mm256_hadd_ps(s01, s23);  // rows 0-3: low | high half
  const __m256 s4567 = _mm256_hadd_ps(s45, s67);  // rows 4-7
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
                       _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

// 2^x for 8 lanes with x <= 0 (scores minus the running max), -inf or NaN:
// 2^round(x) by the exponent bits times 2^f, f in [-0.5, 0.5], by Cephes'
// exp2f polynomial (~2 ulp); below -126 (and -inf) exactly 0, as exp2
// underflows; NaN stays NaN (max_ps returns its second operand on NaN).
inline __m256 exp2_nonpositive(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-126.f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(lo, x);
  const __m256 xi =
      _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(x, xi);
  __m256 p = _mm256_set1_ps(1.535336188319500e-4f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.339887440266574e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.618437357674640e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.550332471162809e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.402264791363012e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.931472028550421e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.f));
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(xi), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

inline float lanes_max(__m256 v) {
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}

inline float lanes_sum(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}

inline __m256 load8(const float* v) { return _mm256_loadu_ps(v); }
inline __m256 load8(const c10::BFloat16* v) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 load8(const c10::Half* v) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v)));
}

// acc[0 .. 8 kN) += sum_{t < valid} p[t * pts] * v_t[c0 ..], the kN
// accumulators in registers across the tile's tokens.
template <int kN, typename V>
inline void pv_cols(const float* p, int64_t pts, int valid,
                    const V* const* vrows, int64_t c0, float* acc) {
  __m256 a[kN];
  for (int k = 0; k < kN; ++k) a[k] = _mm256_loadu_ps(acc + 8 * k);
  for (int t = 0; t < valid; ++t) {
    const __m256 w = _mm256_set1_ps(p[t * pts]);
    const V* v = vrows[t] + c0;
    for (int k = 0; k < kN; ++k)
      a[k] = _mm256_fmadd_ps(w, load8(v + 8 * k), a[k]);
  }
  for (int k = 0; k < kN; ++k) _mm256_storeu_ps(acc + 8 * k, a[k]);
}
}  // namespace attn_avx2
}  // namespace
}  // namespace vllm_myops::cpu
