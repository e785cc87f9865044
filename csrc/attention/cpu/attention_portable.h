// SPDX-License-Identifier: Apache-2.0
// The pieces of the CPU paged attention kernel for the DEFAULT and AVX2
// builds (plain loops; AVX2 bodies from attention_avx2.h where they pay),
// and the stubs of the AVX-512-only paths (kHavePairs, kHaveSplitQk,
// kHaveDot false). The list of pieces and their contracts is in
// attention_kernels_isa.cpp.
// Include only from attention_kernels_isa.cpp (compiled once per ISA,
// cpu/isa.h); everything here has internal linkage.
#pragma once

#if defined(CPU_CAPABILITY_AVX512)
  #error "portable pieces: the AVX-512 build has its own (attention_avx512_*.h)"
#endif

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#if defined(CPU_CAPABILITY_AVX2)
  #include "attention/cpu/attention_avx2.h"
#endif

#include "attention/cpu/attention_tile.h"

namespace vllm_myops::cpu {
namespace {

template <typename T>
void to_float(const T* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

float dot(const float* a, const float* b, int64_t d) {
  // 8 independent partial sums: vectorisable without reassociation flags.
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= d; i += 8)
    for (int j = 0; j < 8; ++j) part[j] += a[i + j] * b[i + j];
  float sum = 0.f;
  for (; i < d; ++i) sum += a[i] * b[i];
  for (int j = 0; j < 8; ++j) sum += part[j];
  return sum;
}

bool key_needs_float(const PagedAttentionParams&) { return true; }

void qk_row(const float* q, const void* /*q_half*/, const float* kf,
            const void* const* /*kp*/, int v, int64_t d, float mul,
            bool /*key_float*/, float* s) {
  int t = 0;
#if defined(CPU_CAPABILITY_AVX2)
  // 8 tokens at a time, one accumulator each (independent FMA chains, not
  // one dot product's dependent adds), reduced by one transpose-add.
  if (d % 8 == 0) {
    const __m256 vmul = _mm256_set1_ps(mul);
    for (; t + 8 <= v; t += 8) {
      __m256 a[8];
      for (int j = 0; j < 8; ++j) a[j] = _mm256_setzero_ps();
      const float* k = kf + t * d;
      for (int64_t i = 0; i < d; i += 8) {
        const __m256 qv = _mm256_loadu_ps(q + i);
        for (int j = 0; j < 8; ++j) {
          a[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + j * d + i), a[j]);
        }
      }
      _mm256_storeu_ps(s + t, _mm256_mul_ps(attn_avx2::sum_lanes8(a), vmul));
    }
  }
#endif
  for (; t < v; ++t) s[t] = dot(q, kf + t * d, d) * mul;
  for (t = v; t < kTile; ++t) s[t] = kNegInf;
}

void softmax_row(float* s, float& m, float& l, float* acc, int64_t d) {
#if defined(CPU_CAPABILITY_AVX2)
  // The loops below 8 lanes at a time (libm's exp2 is not vectorised).
  static_assert(kTile % 8 == 0);
  __m256 vmx = _mm256_set1_ps(kNegInf);
  for (int t = 0; t < kTile; t += 8) {
    vmx = _mm256_max_ps(vmx, _mm256_loadu_ps(s + t));
  }
  const float m_new = std::max(m, attn_avx2::lanes_max(vmx));
  const __m256 vm = _mm256_set1_ps(m_new);
  __m256 vsum = _mm256_setzero_ps();
  for (int t = 0; t < kTile; t += 8) {
    const __m256 e =
        attn_avx2::exp2_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + t), vm));
    _mm256_storeu_ps(s + t, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  const float sum = attn_avx2::lanes_sum(vsum);
#else
  float mx = kNegInf;
  for (int t = 0; t < kTile; ++t) mx = std::max(mx, s[t]);
  const float m_new = std::max(m, mx);
  float sum = 0.f;
  for (int t = 0; t < kTile; ++t) {
    s[t] = std::exp2(s[t] - m_new);  // exp2(-inf) = 0
    sum += s[t];
  }
#endif
  if (m_new != m) {
    const float corr = std::exp2(m - m_new);  // 0 for the first tile
    for (int64_t i = 0; i < d; ++i) acc[i] *= corr;
    l *= corr;
    m = m_new;
  }
  l += sum;
}

// acc[r] += sum_{t < valid[r]} p[r * prs + t * pts] * v_t, V rows of any
// element type (the fp32 tile or the cache itself).
template <typename V>
void pv_rows(const float* p, int64_t prs, int64_t pts, const int* valid,
             int rows, const V* const* vrows, int64_t d, float* acc) {
#if defined(CPU_CAPABILITY_AVX2)
  // A row's output 64 columns at a time in 8 registers (one load and store
  // of acc per tile, not per token), then 8 at a time.
  if (d % 8 == 0) {
    for (int r = 0; r < rows; ++r) {
      float* a = acc + r * d;
      int64_t c = 0;
      for (; c + 64 <= d; c += 64)
        attn_avx2::pv_cols<8>(p + r * prs, pts, valid[r], vrows, c, a + c);
      for (; c < d; c += 8)
        attn_avx2::pv_cols<1>(p + r * prs, pts, valid[r], vrows, c, a + c);
    }
    return;
  }
#endif
  for (int r = 0; r < rows; ++r) {
    float* a = acc + r * d;
    for (int t = 0; t < valid[r]; ++t) {
      const float w = p[r * prs + t * pts];
      const V* v = vrows[t];
      for (int64_t i = 0; i < d; ++i) a[i] += w * static_cast<float>(v[i]);
    }
  }
}

bool qk_rows2(const void*, const void*, const void* const*, int, int, int64_t,
              float, bool, float*, float*) {
  return false;
}

constexpr bool kHavePairs = false;
template <int MB>
void pv_rows_pairs(const float*, int64_t, int64_t, const int*, int,
                   const c10::BFloat16* const*, int64_t, float*) {}

constexpr bool kHaveSplitQk = false;
bool qk_split_applies(const PagedAttentionParams&) { return false; }
void to_float_split(const c10::BFloat16*, float*, int64_t) {}
void qk_rows_split(const float*, int, const void* const*, int, const int*,
                   int64_t, float, float*) {}

constexpr bool kHaveDot = false;
bool pv_dot_applies(const PagedAttentionParams&) { return false; }
void pack_p_bf16(const float*, uint32_t*) {}
void pv_rows_dot(const uint32_t*, const int*, int, const c10::BFloat16* const*,
                 int64_t, float*) {}

}  // namespace
}  // namespace vllm_myops::cpu
