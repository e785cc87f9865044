// SPDX-License-Identifier: Apache-2.0
// CPU paged attention, one work item at a time, compiled once per ISA
// (cpu/isa.h). attention_kernels.cpp splits a call into items and merges
// the partial results of a context split.
//
// A work item is (sequence, kv head, query rows [q_begin, q_end), context
// [kv_begin, kv_end)). Its R = rows x G query rows (G = H_q / H_kv, every
// query head of the kv head's group) share each K/V tile: the tile's token
// pointers are gathered once through the block table (kTile tokens from
// one or more blocks, never past kv_end, so never past seq_len) and every
// row reads the same cache lines, which the first row brought into L1: GQA
// reuse is what makes decode cheaper than H_q passes over the cache. K and
// V are converted from the dtype once per tile: to an fp32 copy when more
// than 4 rows read it, in the load itself when one 4-row group does (the
// decode case), and not at all for bf16 q . k with AVX512-BF16 (vdpbf16ps
// multiplies bf16 pairs exactly into fp32).
//
// Per row and tile: scores s = (q . k) * scale * log2(e) (fp32), causal
// limit = the row's position (only tiles that reach past the first row's
// position mask anything), online softmax in the log2 domain (running max
// m, sum l; acc *= 2^(m_old - m_new) when the max grows), acc += p * v in
// fp32. The output is acc / l rounded once to the dtype.
//
// Vectorised (AVX-512): q . k as 16 dot products at a time (FMAs into 16
// accumulators, then one transpose-add reduction gives the 16 scores in one
// vector); bf16 with D % 32 == 0: 4 rows x 4 tokens, K split into its even
// and odd elements as fp32 by one ALU op each and q stored in that order, so
// each K load feeds the 4 rows (a kv head's 4 query heads at decode) with
// plain FMAs (vdpbf16ps, 8 tokens x 2 rows, kept behind
// VLLM_MYOPS_ATTENTION_CPU_QK=bf16_dot: where a vdpbf16ps costs more than
// two FMAs, the split path wins), exp2
// as a polynomial with vscalefps (exact underflow to 0), p * V as 4 rows x 64
// columns of fp32 accumulators in registers per pass over the tile (bf16 V
// widened as even/odd halves of 32-bit pairs, one ALU op per 16 elements).
// AVX2: the portable pieces below with 8-lane bodies for q . k (8 tokens,
// one accumulator each, a transpose-add), the softmax (exp2 as a
// polynomial) and p * V (a row's 64 columns in registers across the tile);
// the portable build keeps the plain loops.
//
// From DRAM the cache reads are not overlapped with the compute (a call
// costs about the compute plus a plain read of the cache). Left out: AMX
// for q . k (tdpbf16ps on S^T = K Q^T, softmax across the rows of the
// transposed scores), slower here for a cause not found (vLLM-CPU's AMX
// kernel shows the approach can be fast, so it deserves another try);
// software prefetch of the next tiles (no reliable gain: a (block, kv head)
// is contiguous, which the hardware prefetcher streams).
// Measurements: docs/attention/log/2026-12-06-from-code-comments.md.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "attention/cpu/attention_kernels_isa.h"
#include "cpu/isa.h"

#if defined(CPU_CAPABILITY_AVX512)
  #include <immintrin.h>
#elif defined(CPU_CAPABILITY_AVX2)
  #include "attention/cpu/attention_avx2.h"
#endif

namespace vllm_myops::cpu {
namespace {

constexpr int kTile = 32;  // context tokens per tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Per-thread buffers, grown on demand (an item never frees them).
struct Scratch {
  std::vector<float> qf;      // [R][D] query rows, fp32
  std::vector<float> acc;     // [R][D]
  std::vector<float> m, l;    // [R]
  std::vector<float> s;       // [R][kTile] scores, then probabilities
  std::vector<int> valid;     // [R] tokens of the tile the row may see
  std::vector<float> kf, vf;  // [kTile][D]
  std::vector<uint32_t> pb;   // [R][kTile / 2] bf16 pairs of p (dot path)

  void reserve(int64_t rows, int64_t d) {
    auto grow = [](std::vector<float>& v, int64_t n) {
      if (int64_t(v.size()) < n) v.resize(n);
    };
    grow(qf, rows * d);
    grow(acc, rows * d);
    grow(m, rows);
    grow(l, rows);
    grow(s, rows * kTile);
    if (int64_t(valid.size()) < rows) valid.resize(rows);
    grow(kf, kTile * d);
    grow(vf, kTile * d);
    if (int64_t(pb.size()) < rows * (kTile / 2)) pb.resize(rows * (kTile / 2));
  }
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// ---------------------------------------------------------------------------
// The pieces run_item is built from. Portable versions first (DEFAULT and
// AVX2 builds; AVX2 bodies where they pay), then the AVX-512 ones.
//   to_float(src, dst, n)        n elements of T -> fp32
//   key_needs_float(p)           whether qk_row reads the fp32 K tile
//   qk_row(...)                  s[t] = (q . k_t) * mul, t < v; s[t] = -inf
//                                for v <= t < kTile
//   softmax_row(s, m, l, acc, d) online softmax update of one row over the
//                                tile's kTile scores (-inf ones give p = 0):
//                                s becomes p
//   pv_rows(p, valid, rows, vf, d, acc)  acc[r] += sum_t p[r][t] * v_t
// ---------------------------------------------------------------------------
#if !defined(CPU_CAPABILITY_AVX512)
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

#else  // CPU_CAPABILITY_AVX512
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

inline __m512 load_as_float(const float* p) { return _mm512_loadu_ps(p); }

// acc[r0 + m][c0 .. c0 + 16 NV) += sum_{t < n} p[(r0 + m) * prs + t * pts]
// * v_t[c0 ...] for MB rows: MB x NV fp32 accumulators stay in registers
// over the tile; V rows are the fp32 tile or the cache's own bf16/fp16
// rows (converted in the load: one conversion per element when one row
// group reads the tile).
template <typename V, int MB, int NV>
inline void pv_block(const float* p, int64_t prs, int64_t pts, int r0, int n,
                     const V* const* vrows, int64_t d, int64_t c0, float* acc) {
  __m512 a[MB][NV];
  for (int m = 0; m < MB; ++m)
    for (int v = 0; v < NV; ++v)
      a[m][v] = _mm512_loadu_ps(acc + (r0 + m) * d + c0 + 16 * v);
  for (int t = 0; t < n; ++t) {
    __m512 x[NV];
    for (int v = 0; v < NV; ++v) x[v] = load_as_float(vrows[t] + c0 + 16 * v);
    for (int m = 0; m < MB; ++m) {
      const __m512 w = _mm512_set1_ps(p[(r0 + m) * prs + t * pts]);
      for (int v = 0; v < NV; ++v) a[m][v] = _mm512_fmadd_ps(w, x[v], a[m][v]);
    }
  }
  for (int m = 0; m < MB; ++m)
    for (int v = 0; v < NV; ++v)
      _mm512_storeu_ps(acc + (r0 + m) * d + c0 + 16 * v, a[m][v]);
}

template <typename V, int MB>
inline void pv_group(const float* p, int64_t prs, int64_t pts, int r0, int n,
                     const V* const* vrows, int64_t d, float* acc) {
  int64_t c0 = 0;
  for (; c0 + 64 <= d; c0 += 64)
    pv_block<V, MB, 4>(p, prs, pts, r0, n, vrows, d, c0, acc);
  for (; c0 < d; c0 += 16)
    pv_block<V, MB, 1>(p, prs, pts, r0, n, vrows, d, c0, acc);
}

// Rows in groups of 4 (4 x 64 fp32 accumulators: 16 of the 32 registers).
// p is 0 past each row's valid tokens, so a group runs to its longest row.
template <typename V>
void pv_rows(const float* p, int64_t prs, int64_t pts, const int* valid,
             int rows, const V* const* vrows, int64_t d, float* acc) {
  for (int r0 = 0; r0 < rows; r0 += 4) {
    const int mb = std::min(4, rows - r0);
    int n = 0;
    for (int m = 0; m < mb; ++m) n = std::max(n, valid[r0 + m]);
    if (n == 0) continue;
    switch (mb) {
      case 4:
        pv_group<V, 4>(p, prs, pts, r0, n, vrows, d, acc);
        break;
      case 3:
        pv_group<V, 3>(p, prs, pts, r0, n, vrows, d, acc);
        break;
      case 2:
        pv_group<V, 2>(p, prs, pts, r0, n, vrows, d, acc);
        break;
      default:
        pv_group<V, 1>(p, prs, pts, r0, n, vrows, d, acc);
        break;
    }
  }
}

// bf16 V read as 32-bit pairs: x << 16 is the even element of each pair,
// x & 0xFFFF0000 the odd one (one ALU op each, instead of a widening
// shuffle plus a shift per 16 elements). The accumulators then hold each
// 32 columns as [16 even | 16 odd]; run_item restores the order at the end.
// Needs d % 64 == 0 (whole 4-vector blocks).
constexpr bool kHavePairs = true;

template <int MB>
inline void pv_block_pairs(const float* p, int64_t prs, int64_t pts, int r0,
                           int n, const c10::BFloat16* const* vrows, int64_t d,
                           int64_t c0, float* acc) {
  const __m512i hi_mask = _mm512_set1_epi32(int32_t(0xFFFF0000u));
  __m512 a[MB][4];
  for (int m = 0; m < MB; ++m)
    for (int v = 0; v < 4; ++v)
      a[m][v] = _mm512_loadu_ps(acc + (r0 + m) * d + c0 + 16 * v);
  for (int t = 0; t < n; ++t) {
    const __m512i w0 = _mm512_loadu_si512(vrows[t] + c0);
    const __m512i w1 = _mm512_loadu_si512(vrows[t] + c0 + 32);
    const __m512 x[4] = {_mm512_castsi512_ps(_mm512_slli_epi32(w0, 16)),
                         _mm512_castsi512_ps(_mm512_and_si512(w0, hi_mask)),
                         _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16)),
                         _mm512_castsi512_ps(_mm512_and_si512(w1, hi_mask))};
    for (int m = 0; m < MB; ++m) {
      const __m512 w = _mm512_set1_ps(p[(r0 + m) * prs + t * pts]);
      for (int v = 0; v < 4; ++v) a[m][v] = _mm512_fmadd_ps(w, x[v], a[m][v]);
    }
  }
  for (int m = 0; m < MB; ++m)
    for (int v = 0; v < 4; ++v)
      _mm512_storeu_ps(acc + (r0 + m) * d + c0 + 16 * v, a[m][v]);
}

template <int MB>
void pv_rows_pairs(const float* p, int64_t prs, int64_t pts, const int* valid,
                   int rows, const c10::BFloat16* const* vrows, int64_t d,
                   float* acc) {
  for (int r0 = 0; r0 < rows; r0 += MB) {
    const int mb = std::min(MB, rows - r0);
    int n = 0;
    for (int m = 0; m < mb; ++m) n = std::max(n, valid[r0 + m]);
    if (n == 0) continue;
    for (int64_t c0 = 0; c0 < d; c0 += 64) {
      switch (mb) {
        case 4:
          pv_block_pairs<4>(p, prs, pts, r0, n, vrows, d, c0, acc);
          break;
        case 3:
          pv_block_pairs<3>(p, prs, pts, r0, n, vrows, d, c0, acc);
          break;
        case 2:
          pv_block_pairs<2>(p, prs, pts, r0, n, vrows, d, c0, acc);
          break;
        default:
          pv_block_pairs<1>(p, prs, pts, r0, n, vrows, d, c0, acc);
          break;
      }
    }
  }
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

// bf16 p . V with vdpbf16ps, two tokens per instruction (half the
// instructions of the fp32 path, no widening of V). Only when forced
// (VLLM_MYOPS_ATTENTION_CPU_PV=bf16_dot): it pays only where a vdpbf16ps
// costs less than two FMAs, unlike on the CPU this was built on (see the
// split q . k). V rows t and t + 1 are interleaved 16 bits at a time
// (vpunpck{l,h}wd, straight from the cache) and
// dotted with the pair (p_t, p_t+1) rounded to bf16 (RNE, as the CUDA kernel
// rounds P), products summed in fp32. Rounding p moves an output by at most
// 2^-9 sum_t p_t |v_t|, under half the output's own bf16 rounding bound.
// Per 128-bit lane L the unpacks give columns 8L..8L+3 (lo) and 8L+4..8L+7
// (hi), so the accumulators hold each 32 columns as [16 lo | 16 hi];
// run_item restores the order (unscramble_dot). Needs d % 32 == 0.
constexpr bool kHaveDot = true;
constexpr int kHalfTile = kTile / 2;  // packed p pairs per row and tile

bool pv_dot_applies(const PagedAttentionParams& p) {
  return p.pv_path == PvPath::kBf16Dot && p.dtype == DType::kBFloat16 &&
         p.head_dim % 32 == 0 && cpu_has_avx512_bf16();
}

// The tile's kTile probabilities of one row -> kHalfTile bf16 pairs
// (word j = p_2j | p_2j+1 << 16).
MYOPS_BF16_TARGET void pack_p_bf16(const float* s, uint32_t* pb) {
  const __m512bh h =
      _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + 16), _mm512_loadu_ps(s));
  _mm512_storeu_si512(pb, (__m512i)h);
}

template <int MB, int NCH, bool kTail>
MYOPS_BF16_TARGET inline void pv_step_dot(const uint32_t* pb, int r0, int t,
                                          const uint16_t* v0,
                                          const uint16_t* v1,
                                          __m512 (&a)[MB][2 * NCH]) {
  __m512i x[2 * NCH];
  for (int c = 0; c < NCH; ++c) {
    const __m512i w0 = _mm512_loadu_si512(v0 + 32 * c);
    const __m512i w1 =
        kTail ? _mm512_setzero_si512() : _mm512_loadu_si512(v1 + 32 * c);
    x[2 * c] = _mm512_unpacklo_epi16(w0, w1);
    x[2 * c + 1] = _mm512_unpackhi_epi16(w0, w1);
  }
  for (int m = 0; m < MB; ++m) {
    const __m512i w =
        _mm512_set1_epi32(int32_t(pb[(r0 + m) * kHalfTile + t / 2]));
    for (int v = 0; v < 2 * NCH; ++v)
      a[m][v] = _mm512_dpbf16_ps(a[m][v], (__m512bh)x[v], (__m512bh)w);
  }
}

// acc[r0 + m][c0 .. c0 + 32 NCH) += p . V over the first n tokens, MB rows.
template <int MB, int NCH>
MYOPS_BF16_TARGET inline void pv_block_dot(const uint32_t* pb, int r0, int n,
                                           const c10::BFloat16* const* vrows,
                                           int64_t d, int64_t c0, float* acc) {
  __m512 a[MB][2 * NCH];
  for (int m = 0; m < MB; ++m)
    for (int v = 0; v < 2 * NCH; ++v)
      a[m][v] = _mm512_loadu_ps(acc + (r0 + m) * d + c0 + 16 * v);
  auto row = [&](int t) {
    return reinterpret_cast<const uint16_t*>(vrows[t]) + c0;
  };
  int t = 0;
  for (; t + 1 < n; t += 2)
    pv_step_dot<MB, NCH, false>(pb, r0, t, row(t), row(t + 1), a);
  if (t < n) pv_step_dot<MB, NCH, true>(pb, r0, t, row(t), nullptr, a);
  for (int m = 0; m < MB; ++m)
    for (int v = 0; v < 2 * NCH; ++v)
      _mm512_storeu_ps(acc + (r0 + m) * d + c0 + 16 * v, a[m][v]);
}

template <int MB>
MYOPS_BF16_TARGET inline void pv_group_dot(const uint32_t* pb, int r0, int n,
                                           const c10::BFloat16* const* vrows,
                                           int64_t d, float* acc) {
  int64_t c0 = 0;
  for (; c0 + 64 <= d; c0 += 64)
    pv_block_dot<MB, 2>(pb, r0, n, vrows, d, c0, acc);
  if (c0 < d) pv_block_dot<MB, 1>(pb, r0, n, vrows, d, c0, acc);
}

// Rows in groups of 4 (4 x 64 columns: 16 accumulators), each group to
// its longest row (p is 0 past a row's valid tokens).
MYOPS_BF16_TARGET void pv_rows_dot(const uint32_t* pb, const int* valid,
                                   int rows, const c10::BFloat16* const* vrows,
                                   int64_t d, float* acc) {
  for (int r0 = 0; r0 < rows; r0 += 4) {
    const int mb = std::min(4, rows - r0);
    int n = 0;
    for (int m = 0; m < mb; ++m) n = std::max(n, valid[r0 + m]);
    if (n == 0) continue;
    switch (mb) {
      case 4:
        pv_group_dot<4>(pb, r0, n, vrows, d, acc);
        break;
      case 3:
        pv_group_dot<3>(pb, r0, n, vrows, d, acc);
        break;
      case 2:
        pv_group_dot<2>(pb, r0, n, vrows, d, acc);
        break;
      default:
        pv_group_dot<1>(pb, r0, n, vrows, d, acc);
        break;
    }
  }
}
#endif

// The dot path's [16 lo | 16 hi] per 32 columns (lo lane 4L + k holds
// column 8L + k, hi lane 4L + k column 8L + 4 + k) -> natural order.
void unscramble_dot(float* acc, int rows, int64_t d) {
  float tmp[32];
  for (int r = 0; r < rows; ++r) {
    float* a = acc + r * d;
    for (int64_t c0 = 0; c0 < d; c0 += 32) {
      for (int i = 0; i < 16; ++i) {
        const int col = 8 * (i / 4) + i % 4;
        tmp[col] = a[c0 + i];
        tmp[col + 4] = a[c0 + 16 + i];
      }
      std::memcpy(a + c0, tmp, sizeof(tmp));
    }
  }
}

template <typename T>
void run_item(const PagedAttentionParams& p, const AttentionWorkItem& w) {
  const int64_t d = p.head_dim;
  const int64_t g = p.num_heads / p.num_kv_heads;
  const int rows = int((w.q_end - w.q_begin) * g);
  const int64_t q_len =
      int64_t(p.query_start_loc[w.seq + 1]) - p.query_start_loc[w.seq];
  const int64_t ctx0 = p.seq_lens[w.seq] - q_len;  // position of query row 0
  const int64_t tok0 = p.query_start_loc[w.seq] + w.q_begin;
  const int32_t* table = p.block_table + w.seq * p.block_table_stride;
  const T* cache = static_cast<const T*>(p.kv_cache);
  const int64_t bs = p.block_size;
  const int64_t head_stride = bs * 2 * d;  // one (block, kv head)
  const int64_t block_stride = p.num_kv_heads * head_stride;
  const float mul = p.scale * kLog2e;

  const bool split_qk =
      kHaveSplitQk && std::is_same_v<T, c10::BFloat16> && qk_split_applies(p);
  const bool key_float = !split_qk && key_needs_float(p);
  // One row group of 4 reads V straight from the cache (one conversion per
  // element either way); more rows share one fp32 copy of the tile.
  // The dot path reads V straight from the cache for any number of rows
  // (no widening to repeat per row group).
  const bool dot =
      kHaveDot && std::is_same_v<T, c10::BFloat16> && pv_dot_applies(p);
  const bool v_direct = rows <= 4 || dot;
  const bool pairs = !dot && kHavePairs && v_direct &&
                     std::is_same_v<T, c10::BFloat16> && d % 64 == 0;
  Scratch& sc = scratch();
  sc.reserve(rows, d);
  float* qf = sc.qf.data();
  float* acc = sc.acc.data();
  float* m = sc.m.data();
  float* l = sc.l.data();
  float* s = sc.s.data();
  int* valid = sc.valid.data();
  const T* q_rows[256];
  const bool many_rows = rows > 256;
  std::vector<const T*> q_rows_big(many_rows ? rows : 0);
  const T** qr = many_rows ? q_rows_big.data() : q_rows;
  for (int r = 0; r < rows; ++r) {
    m[r] = kNegInf;
    l[r] = 0.f;
    const int64_t i = r / g;
    const int64_t hq = w.kv_head * g + r % g;
    qr[r] = static_cast<const T*>(p.query) + (tok0 + i) * p.q_stride_t +
            hq * p.q_stride_h;
    if (split_qk) {
      to_float_split(reinterpret_cast<const c10::BFloat16*>(qr[r]), qf + r * d,
                     d);
    } else if (key_float) {
      to_float(qr[r], qf + r * d, d);
    }
  }
  std::fill(acc, acc + rows * d, 0.f);

  // Token pointers of a tile, a block at a time: one table lookup per
  // block, no division per token (a division per token is a large share of
  // a decode call). No software prefetch of the next tiles: a (block, kv
  // head) is bs * 2D contiguous elements, which the hardware prefetcher
  // streams.
  const void* tile[kTile];
  const int64_t token_elems = 2 * d;
  auto gather = [&](int64_t t0, int n, const void** kp) {
    int64_t pos = t0;
    int t = 0;
    while (t < n) {
      const int64_t off = pos % bs;
      const int take = int(std::min<int64_t>(bs - off, n - t));
      const T* base = cache + table[pos / bs] * block_stride +
                      w.kv_head * head_stride + off * token_elems;
      for (int i = 0; i < take; ++i) kp[t + i] = base + i * token_elems;
      t += take;
      pos += take;
    }
  };
  const float* vrows_f[kTile];
  const T* vrows_t[kTile];
  auto pv = [&](const float* pp, int64_t prs, int64_t pts, const int* vl,
                int nrows, float* a) {
    if (dot) {
      uint32_t* pb = sc.pb.data();
      for (int r = 0; r < nrows; ++r)
        pack_p_bf16(pp + r * prs, pb + r * (kTile / 2));
      pv_rows_dot(pb, vl, nrows,
                  reinterpret_cast<const c10::BFloat16* const*>(vrows_t), d, a);
    } else if (pairs) {
      pv_rows_pairs<4>(pp, prs, pts, vl, nrows,
                       reinterpret_cast<const c10::BFloat16* const*>(vrows_t),
                       d, a);
    } else if (v_direct) {
      pv_rows(pp, prs, pts, vl, nrows, vrows_t, d, a);
    } else {
      pv_rows(pp, prs, pts, vl, nrows, vrows_f, d, a);
    }
  };
  const int64_t first_pos = ctx0 + w.q_begin;  // row 0's position
  for (int64_t t0 = w.kv_begin; t0 < w.kv_end; t0 += kTile) {
    const int n = int(std::min<int64_t>(kTile, w.kv_end - t0));
    const void** kp = tile;
    gather(t0, n, kp);
    // Causal limit: row r sees positions <= first_pos + r / g.
    const bool masked = t0 + n - 1 > first_pos;
    int longest = 0;
    for (int r = 0; r < rows; ++r) {
      int v = n;
      if (masked) {
        const int64_t lim = first_pos + r / g - t0 + 1;
        v = int(std::clamp<int64_t>(lim, 0, n));
      }
      valid[r] = v;
      longest = std::max(longest, v);
    }
    if (longest == 0) continue;  // the whole tile is after every row
    for (int t = 0; t < longest; ++t) {
      vrows_t[t] = static_cast<const T*>(kp[t]) + d;
      if (!v_direct) {
        float* dst = sc.vf.data() + t * d;
        to_float(vrows_t[t], dst, d);
        vrows_f[t] = dst;
      }
    }
    if (key_float) {
      for (int t = 0; t < longest; ++t)
        to_float(static_cast<const T*>(kp[t]), sc.kf.data() + t * d, d);
    }
    if (split_qk) {
      qk_rows_split(qf, rows, kp, longest, valid, d, mul, s);
      for (int r = 0; r < rows; ++r) {
        float* sr = s + r * kTile;
        if (valid[r] == 0) {  // the whole tile is after this row: p = 0
          std::fill(sr, sr + kTile, 0.f);
        } else {
          softmax_row(sr, m[r], l[r], acc + r * d, d);
        }
      }
      pv(s, kTile, 1, valid, rows, acc);
      continue;
    }
    for (int r = 0; r < rows; ++r) {
      float* sr = s + r * kTile;
      if (valid[r] == 0) {  // the whole tile is after this row: p = 0
        std::fill(sr, sr + kTile, 0.f);
        continue;
      }
      if (r + 1 < rows && valid[r + 1] > 0 &&
          qk_rows2(qr[r], qr[r + 1], kp, valid[r], valid[r + 1], d, mul,
                   key_float, sr, sr + kTile)) {
        softmax_row(sr, m[r], l[r], acc + r * d, d);
        ++r;
        softmax_row(sr + kTile, m[r], l[r], acc + r * d, d);
        continue;
      }
      qk_row(qf + r * d, qr[r], sc.kf.data(), kp, valid[r], d, mul, key_float,
             sr);
      softmax_row(sr, m[r], l[r], acc + r * d, d);
    }
    pv(s, kTile, 1, valid, rows, acc);
  }

  if (dot) unscramble_dot(acc, rows, d);
  if (pairs) {  // [16 even | 16 odd] per 32 columns -> natural order
    float tmp[32];
    for (int r = 0; r < rows; ++r) {
      float* a = acc + r * d;
      for (int64_t c0 = 0; c0 < d; c0 += 32) {
        for (int i = 0; i < 16; ++i) {
          tmp[2 * i] = a[c0 + i];
          tmp[2 * i + 1] = a[c0 + 16 + i];
        }
        std::memcpy(a + c0, tmp, sizeof(tmp));
      }
    }
  }
  if (w.partial != nullptr) {
    for (int r = 0; r < rows; ++r) {
      float* dst = w.partial + r * (d + 2);
      std::memcpy(dst, acc + r * d, d * sizeof(float));
      dst[d] = m[r];
      dst[d + 1] = l[r];
    }
    return;
  }
  T* out = static_cast<T*>(p.out);
  for (int r = 0; r < rows; ++r) {
    const int64_t i = r / g;
    const int64_t hq = w.kv_head * g + r % g;
    T* o = out + (tok0 + i) * p.out_stride_t + hq * p.out_stride_h;
    const float inv = 1.f / l[r];  // l >= 1: the row's own position counts
    const float* a = acc + r * d;
    for (int64_t j = 0; j < d; ++j) o[j] = T(a[j] * inv);
  }
}

}  // namespace

void MYOPS_CPU_ISA_FN(attention_item)(const PagedAttentionParams& p,
                                      const AttentionWorkItem& item) {
  if (p.dtype == DType::kBFloat16) {
    run_item<c10::BFloat16>(p, item);
  } else {
    run_item<c10::Half>(p, item);
  }
}

}  // namespace vllm_myops::cpu
