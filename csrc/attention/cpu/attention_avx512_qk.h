// SPDX-License-Identifier: Apache-2.0
// The AVX-512 q . k pieces of the CPU paged attention kernel: fp32 and
// bf16 loads, the 16-lane reduction and exp2, q . k rows (fp32 FMAs,
// vdpbf16ps, two rows at once), the online softmax row, and the default
// bf16 path on even/odd fp32 halves (qk_rows_split). Contracts:
// attention_kernels_isa.cpp.
// Include only from attention_kernels_isa.cpp (compiled once per ISA,
// cpu/isa.h); everything here has internal linkage.
#pragma once

#if !defined(CPU_CAPABILITY_AVX512)
  #error "AVX-512 pieces: include from the AVX-512 build only"
#endif

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <immintrin.h>

#include "attention/cpu/attention_tile.h"

namespace vllm_myops::cpu {
namespace {

inline __m512 load_as_float(const c10::BFloat16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 load_as_float(const c10::Half* p) {
  return _mm512_cvtph_ps(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

template <typename T>
void to_float(const T* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, load_as_float(src + i));
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

// Lane i of the result = the sum of the 16 lanes of a[i] (a transpose-add:
// 45 shuffles/adds for 16 dot products instead of 16 horizontal sums).
inline __m512 reduce16(__m512* a) {
  __m512 b[8];
  for (int i = 0; i < 8; ++i) {
    // Per 128-bit lane: (a0+a2, b0+b2, a1+a3, b1+b3).
    b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                         _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  }
  __m512 c[4];
  for (int i = 0; i < 4; ++i) {
    // Per 128-bit lane: the partial sums of 4 inputs, in input order.
    const __m512d x = _mm512_castps_pd(b[2 * i]);
    const __m512d y = _mm512_castps_pd(b[2 * i + 1]);
    c[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  // c[k]: 128-bit chunk j holds the partials (over input lanes 4j..4j+3) of
  // inputs 4k..4k+3. Add the 4 chunks of each c[k] and place c[k]'s sums in
  // chunk k.
  const __m512 d01 =
      _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                    _mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 d23 =
      _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], _MM_SHUFFLE(2, 0, 2, 0)),
                    _mm512_shuffle_f32x4(c[2], c[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(d01, d23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(d01, d23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// 2^x for x <= 0 (or -inf): 2^round(x) * poly(x - round(x)); vscalefps
// underflows to exactly 0 (x is clamped to -150 first, so -inf gives 0).
// Degree-7 Taylor on [-0.5, 0.5]: relative error < 1e-8 before rounding.
inline __m512 exp2_ps(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-150.f));
  const __m512 n =
      _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 y = _mm512_set1_ps(1.5252734e-05f);
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(1.5403530e-04f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(1.3333558e-03f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(9.6181291e-03f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(5.5504109e-02f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(2.4022651e-01f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(6.9314718e-01f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(y, n);
}

#define MYOPS_BF16_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

bool cpu_has_avx512_bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
}

bool key_needs_float(const PagedAttentionParams& p) {
  return !(p.dtype == DType::kBFloat16 && cpu_has_avx512_bf16());
}

// bf16 q . k for up to 16 tokens with vdpbf16ps (bf16 pairs multiplied
// exactly, summed in fp32), straight from the cache. NC = D / 32 chunks
// (0: runtime d with a possible half chunk).
template <int NC>
MYOPS_BF16_TARGET inline __m512 dots16_bf16(const uint16_t* q,
                                            const void* const* kp, int cnt,
                                            int64_t d) {
  const int nc = NC > 0 ? NC : int(d / 32);
  const bool half = NC == 0 && d % 32 != 0;
  __m512i qv[NC > 0 ? NC : 1];
  if constexpr (NC > 0) {
    for (int c = 0; c < NC; ++c) qv[c] = _mm512_loadu_si512(q + 32 * c);
  }
  __m512 acc[16];
  for (int t = 0; t < 16; ++t) {
    acc[t] = _mm512_setzero_ps();
    if (t >= cnt) continue;
    const uint16_t* k = static_cast<const uint16_t*>(kp[t]);
    for (int c = 0; c < nc; ++c) {
      const __m512i qc = NC > 0 ? qv[c] : _mm512_loadu_si512(q + 32 * c);
      acc[t] = _mm512_dpbf16_ps(
          acc[t], (__m512bh)_mm512_loadu_si512(k + 32 * c), (__m512bh)qc);
    }
    if (half) {
      const __m512i qh = _mm512_maskz_loadu_epi16(0xFFFF, q + 32 * nc);
      const __m512i kh = _mm512_maskz_loadu_epi16(0xFFFF, k + 32 * nc);
      acc[t] = _mm512_dpbf16_ps(acc[t], (__m512bh)kh, (__m512bh)qh);
    }
  }
  return reduce16(acc);
}

MYOPS_BF16_TARGET void qk_row_bf16(const void* q_half, const void* const* kp,
                                   int v, int64_t d, float mul, float* s) {
  const uint16_t* q = static_cast<const uint16_t*>(q_half);
  const __m512 vm = _mm512_set1_ps(mul);
  for (int g = 0; g < kTile; g += 16) {
    const int cnt = std::clamp(v - g, 0, 16);
    __m512 sv = _mm512_set1_ps(kNegInf);
    if (cnt > 0) {
      __m512 dots;
      switch (d) {
        case 64:
          dots = dots16_bf16<2>(q, kp + g, cnt, d);
          break;
        case 128:
          dots = dots16_bf16<4>(q, kp + g, cnt, d);
          break;
        case 256:
          dots = dots16_bf16<8>(q, kp + g, cnt, d);
          break;
        default:
          dots = dots16_bf16<0>(q, kp + g, cnt, d);
          break;
      }
      sv = _mm512_mask_mul_ps(sv, __mmask16((1u << cnt) - 1), dots, vm);
    }
    _mm512_storeu_ps(s + g, sv);
  }
}

// Two rows at once (bf16, D 64 or 128): 8 tokens x 2 rows per reduction,
// so each K vector loaded feeds both rows' vdpbf16ps (half the K loads of
// two qk_row calls). Lanes 0-7 are row a's scores, 8-15 row b's.
template <int NC>
MYOPS_BF16_TARGET inline __m512 dots8x2_bf16(const uint16_t* qa,
                                             const uint16_t* qb,
                                             const void* const* kp, int cnt) {
  __m512i va[NC], vb[NC];
  for (int c = 0; c < NC; ++c) {
    va[c] = _mm512_loadu_si512(qa + 32 * c);
    vb[c] = _mm512_loadu_si512(qb + 32 * c);
  }
  __m512 acc[16];
  for (int t = 0; t < 8; ++t) {
    acc[t] = acc[8 + t] = _mm512_setzero_ps();
    if (t >= cnt) continue;
    const uint16_t* k = static_cast<const uint16_t*>(kp[t]);
    for (int c = 0; c < NC; ++c) {
      const __m512bh kc = (__m512bh)_mm512_loadu_si512(k + 32 * c);
      acc[t] = _mm512_dpbf16_ps(acc[t], kc, (__m512bh)va[c]);
      acc[8 + t] = _mm512_dpbf16_ps(acc[8 + t], kc, (__m512bh)vb[c]);
    }
  }
  return reduce16(acc);
}

MYOPS_BF16_TARGET void qk_rows2_bf16(const void* qa, const void* qb,
                                     const void* const* kp, int va, int vb,
                                     int64_t d, float mul, float* sa,
                                     float* sb) {
  const __m512 vm = _mm512_set1_ps(mul);
  const int v = std::max(va, vb);
  for (int g = 0; g < kTile; g += 8) {
    const int cnt = std::clamp(v - g, 0, 8);
    __m512 sv = _mm512_set1_ps(kNegInf);
    if (cnt > 0) {
      const uint16_t* a = static_cast<const uint16_t*>(qa);
      const uint16_t* b = static_cast<const uint16_t*>(qb);
      const __m512 dots = d == 64 ? dots8x2_bf16<2>(a, b, kp + g, cnt)
                                  : dots8x2_bf16<4>(a, b, kp + g, cnt);
      const unsigned ma = (1u << std::clamp(va - g, 0, 8)) - 1;
      const unsigned mb = (1u << std::clamp(vb - g, 0, 8)) - 1;
      sv = _mm512_mask_mul_ps(sv, __mmask16(ma | (mb << 8)), dots, vm);
    }
    _mm256_storeu_ps(sa + g, _mm512_castps512_ps256(sv));
    _mm256_storeu_ps(sb + g, _mm512_extractf32x8_ps(sv, 1));
  }
}

// Returns false where the pair path does not apply (then qk_row per row).
bool qk_rows2(const void* qa, const void* qb, const void* const* kp, int va,
              int vb, int64_t d, float mul, bool key_float, float* sa,
              float* sb) {
  if (key_float || (d != 64 && d != 128)) return false;
  qk_rows2_bf16(qa, qb, kp, va, vb, d, mul, sa, sb);
  return true;
}

// fp32 q . k for up to 16 tokens of the converted tile. NC = D / 16.
template <int NC>
inline __m512 dots16_f32(const float* q, const float* kf, int cnt, int64_t d) {
  const int nc = NC > 0 ? NC : int(d / 16);
  __m512 acc[16];
  for (int t = 0; t < 16; ++t) {
    acc[t] = _mm512_setzero_ps();
    if (t >= cnt) continue;
    const float* k = kf + t * d;
    for (int c = 0; c < nc; ++c)
      acc[t] = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * c),
                               _mm512_loadu_ps(k + 16 * c), acc[t]);
  }
  return reduce16(acc);
}

void qk_row(const float* q, const void* q_half, const float* kf,
            const void* const* kp, int v, int64_t d, float mul, bool key_float,
            float* s) {
  if (!key_float) return qk_row_bf16(q_half, kp, v, d, mul, s);
  const __m512 vm = _mm512_set1_ps(mul);
  for (int g = 0; g < kTile; g += 16) {
    const int cnt = std::clamp(v - g, 0, 16);
    __m512 sv = _mm512_set1_ps(kNegInf);
    if (cnt > 0) {
      const float* k = kf + g * d;
      __m512 dots;
      switch (d) {
        case 64:
          dots = dots16_f32<4>(q, k, cnt, d);
          break;
        case 128:
          dots = dots16_f32<8>(q, k, cnt, d);
          break;
        default:
          dots = dots16_f32<0>(q, k, cnt, d);
          break;
      }
      sv = _mm512_mask_mul_ps(sv, __mmask16((1u << cnt) - 1), dots, vm);
    }
    _mm512_storeu_ps(s + g, sv);
  }
}

static_assert(kTile == 32, "softmax_row handles two vectors of scores");

void softmax_row(float* s, float& m, float& l, float* acc, int64_t d) {
  __m512 s0 = _mm512_loadu_ps(s), s1 = _mm512_loadu_ps(s + 16);
  const float m_new = std::max(m, _mm512_reduce_max_ps(_mm512_max_ps(s0, s1)));
  const __m512 mv = _mm512_set1_ps(m_new);
  s0 = exp2_ps(_mm512_sub_ps(s0, mv));
  s1 = exp2_ps(_mm512_sub_ps(s1, mv));
  _mm512_storeu_ps(s, s0);
  _mm512_storeu_ps(s + 16, s1);
  if (m_new != m) {
    const float corr = std::exp2(m - m_new);  // 0 for the first tile
    const __m512 cv = _mm512_set1_ps(corr);
    for (int64_t i = 0; i < d; i += 16)
      _mm512_storeu_ps(acc + i, _mm512_mul_ps(_mm512_loadu_ps(acc + i), cv));
    l *= corr;
    m = m_new;
  }
  l += _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

// bf16 q . k as fp32 FMAs on even/odd halves (the default where it
// applies): a K chunk of 32 bf16 loaded as 16 32-bit words gives its even
// elements (w << 16) and odd ones (w & 0xFFFF0000) as fp32 in one ALU op
// each, exactly; q is stored in the same split order once per item, so
// the dot product needs no shuffle. 4 rows x 4 tokens per reduce16, so each
// K vector loaded and split feeds every row of a group of 4 (a kv head's G
// query heads at decode). Where a vdpbf16ps zmm costs more than two FMAs
// (as on the Xeon this was built on: docs/attention/log/), 2 FMAs per 32
// elements beat one vdpbf16ps.
constexpr bool kHaveSplitQk = true;

bool qk_split_applies(const PagedAttentionParams& p) {
  return p.qk_path != QkPath::kBf16Dot && p.dtype == DType::kBFloat16 &&
         p.head_dim % 32 == 0;
}

// Row of d bf16 -> fp32 as [16 even | 16 odd] per 32 columns.
void to_float_split(const c10::BFloat16* src, float* dst, int64_t d) {
  const __m512i hi = _mm512_set1_epi32(int32_t(0xFFFF0000u));
  for (int64_t c0 = 0; c0 < d; c0 += 32) {
    const __m512i w = _mm512_loadu_si512(src + c0);
    _mm512_storeu_ps(dst + c0, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    _mm512_storeu_ps(dst + c0 + 16,
                     _mm512_castsi512_ps(_mm512_and_si512(w, hi)));
  }
}

// Lane 4m + t: q_(r0+m) . k_t for MB rows and cnt <= 4 tokens (0 past cnt
// and MB). NCH = D / 32 (0: runtime d).
template <int MB, int NCH>
inline __m512 dots4x4_split(const float* qs, int r0, const void* const* kp,
                            int cnt, int64_t d) {
  const int nch = NCH > 0 ? NCH : int(d / 32);
  const __m512i hi = _mm512_set1_epi32(int32_t(0xFFFF0000u));
  __m512 a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_setzero_ps();
  for (int c = 0; c < nch; ++c) {
    for (int t = 0; t < 4; ++t) {
      if (t >= cnt) break;
      const __m512i w =
          _mm512_loadu_si512(static_cast<const uint16_t*>(kp[t]) + 32 * c);
      const __m512 ke = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
      const __m512 ko = _mm512_castsi512_ps(_mm512_and_si512(w, hi));
      for (int m = 0; m < MB; ++m) {
        const float* q = qs + (r0 + m) * d + 32 * c;
        a[4 * m + t] = _mm512_fmadd_ps(_mm512_loadu_ps(q), ke, a[4 * m + t]);
        a[4 * m + t] =
            _mm512_fmadd_ps(_mm512_loadu_ps(q + 16), ko, a[4 * m + t]);
      }
    }
  }
  return reduce16(a);
}

// s[r][t] = (q_r . k_t) * mul for rows r0 .. r0 + MB, t < valid[r]; -inf
// for valid[r] <= t < kTile. Tokens past `longest` are never read.
template <int MB, int NCH>
void qk_group_split(const float* qs, int r0, const void* const* kp, int longest,
                    const int* valid, int64_t d, float mul, float* s) {
  const __m512 vm = _mm512_set1_ps(mul);
  alignas(64) float tmp[16];
  for (int t0 = 0; t0 < kTile; t0 += 4) {
    const int cnt = std::clamp(longest - t0, 0, 4);
    const __m512 v =
        cnt > 0
            ? _mm512_mul_ps(dots4x4_split<MB, NCH>(qs, r0, kp + t0, cnt, d), vm)
            : _mm512_setzero_ps();
    _mm512_store_ps(tmp, v);
    for (int m = 0; m < MB; ++m)
      std::memcpy(s + (r0 + m) * kTile + t0, tmp + 4 * m, 4 * sizeof(float));
  }
  const __m512 ninf = _mm512_set1_ps(kNegInf);
  for (int m = 0; m < MB; ++m) {
    float* sr = s + (r0 + m) * kTile;
    const int v = valid[r0 + m];
    const __mmask16 k0 = __mmask16(v >= 16 ? 0xFFFFu : (1u << v) - 1);
    const __mmask16 k1 = __mmask16(v >= 32   ? 0xFFFFu
                                   : v <= 16 ? 0u
                                             : (1u << (v - 16)) - 1);
    _mm512_storeu_ps(sr, _mm512_mask_mov_ps(ninf, k0, _mm512_loadu_ps(sr)));
    _mm512_storeu_ps(sr + 16,
                     _mm512_mask_mov_ps(ninf, k1, _mm512_loadu_ps(sr + 16)));
  }
}

template <int NCH>
void qk_rows_split_d(const float* qs, int rows, const void* const* kp,
                     int longest, const int* valid, int64_t d, float mul,
                     float* s) {
  for (int r0 = 0; r0 < rows; r0 += 4) {
    switch (std::min(4, rows - r0)) {
      case 4:
        qk_group_split<4, NCH>(qs, r0, kp, longest, valid, d, mul, s);
        break;
      case 3:
        qk_group_split<3, NCH>(qs, r0, kp, longest, valid, d, mul, s);
        break;
      case 2:
        qk_group_split<2, NCH>(qs, r0, kp, longest, valid, d, mul, s);
        break;
      default:
        qk_group_split<1, NCH>(qs, r0, kp, longest, valid, d, mul, s);
        break;
    }
  }
}

void qk_rows_split(const float* qs, int rows, const void* const* kp,
                   int longest, const int* valid, int64_t d, float mul,
                   float* s) {
  switch (d) {
    case 64:
      return qk_rows_split_d<2>(qs, rows, kp, longest, valid, d, mul, s);
    case 128:
      return qk_rows_split_d<4>(qs, rows, kp, longest, valid, d, mul, s);
    default:
      return qk_rows_split_d<0>(qs, rows, kp, longest, valid, d, mul, s);
  }
}

}  // namespace
}  // namespace vllm_myops::cpu
