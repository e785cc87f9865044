// SPDX-License-Identifier: Apache-2.0
// AVX2 (+FMA, F16C) RMSNorm rows. Included only by layernorm_kernels_isa.cpp
// in its AVX2 and AVX512 builds; everything here has internal linkage, so the
// copies compiled with different ISA flags never meet at link time.
//
// Per row: pass 1 reads the row (adding the residual and storing the rounded
// sum for the fused op) and accumulates the fp32 sum of squares; pass 2
// re-reads the row, now in L1/L2, scales, rounds to the dtype, multiplies by
// the weight, rounds again and stores. Rounding points and NaN/Inf behaviour
// are the contract of rms_norm_params.h / vllm_myops/reference.py.
//
// Vectors hold 16 elements: bf16 as two fp32 vectors of the even and odd
// elements (one shift or mask each, and the same two ops pack them back), fp16
// and fp32 as the low and high 8. The weight is loaded in the same lane order,
// so every lane meets its own weight element whatever the permutation.
//
// Cost (Zen 3, hot L1/L2, bf16 with weight): ~11 core cycles per 16 elements
// for rms_norm (pass 1: 4 vector ops, pass 2: 25, mostly the two exact bf16
// roundings done with integer ops), ~16 for the fused add. That is compute,
// not memory, bound even with 2 threads on this machine; the memory side is
// handled by prefetching the next row during pass 2 and by streaming stores
// for large rms_norm outputs.
#pragma once

#include <immintrin.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "layernorm/rms_norm_params.h"

namespace vllm_myops::cpu {
namespace {
namespace avx2 {

constexpr int64_t kChunk = 16;  // elements per step (two fp32 vectors)

// ---------------------------------------------------------------------------
// Element types. Each provides:
//   load(p, a, b)        16 elements -> two fp32 vectors (in the type's order)
//   round(a, b)          rounds both to the type and back to fp32
//   store(p, a, b)       rounds to the type and stores 16 elements
//   stream(p, a, b)      same with non-temporal stores (p 32-byte aligned)
//   to_float / from_float  the scalar equivalents for heads and tails
// ---------------------------------------------------------------------------

// bf16 <-> fp32 by integer ops. Round to nearest even: bits + 0x7FFF + lsb,
// where lsb is bit 16 (the last kept bit).
//
// NaN lanes need no blend: the carry out of the low 16 bits (which would turn
// an all-ones-mantissa NaN into -0 / +0) needs low 16 bits >= 0x8000, and no
// NaN reaching a rounding here has any low bit set. Every NaN in this kernel
// is either a bf16 input (weight, x, residual: low 16 bits zero after
// widening) propagated by x86 arithmetic, which only quiets NaNs (bit 22) and
// never sets payload bits, or the default NaN 0xFFC00000 created by inf-inf,
// 0*inf or sqrt of a negative. So a NaN keeps its upper 16 bits exactly
// (0x7FFF stays 0x7FFF), and Inf stays Inf. The scalar heads and tails use
// c10::BFloat16, which gives the same bits for every non-NaN value.
struct BF16 {
  using T = c10::BFloat16;
  static constexpr bool kPrepareWeight = true;  // weight kept as fp32

  static __m256 even(__m256i v) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
  static __m256 odd(__m256i v) {
    return _mm256_castsi256_ps(
        _mm256_and_si256(v, _mm256_set1_epi32(int32_t(0xFFFF0000u))));
  }
  // bits + 0x7FFF + lsb: the rounded bf16 value sits in the upper 16 bits.
  static __m256i rne_bias(__m256 f) {
    const __m256i b = _mm256_castps_si256(f);
    const __m256i lsb =
        _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(b,
                            _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
  }
  static __m256 upper(__m256i t) {
    return _mm256_castsi256_ps(
        _mm256_and_si256(t, _mm256_set1_epi32(int32_t(0xFFFF0000u))));
  }
  // Rounds even/odd fp32 lanes to the 16 bf16 of memory order, working on
  // 16-bit words: H = the kept upper halves (truncated bf16), L = the dropped
  // lower halves; round up iff L + lsb(H) > 0x8000, i.e. iff
  // avg_epu16(L, 0x7FFE | lsb) = (L + lsb + 0x7FFF) >> 1 has its top bit set.
  // A carry out of H only turns the largest finite value into Inf (correct);
  // NaN lanes have L == 0 (see above), so they never carry.
  static __m256i pack(__m256 e, __m256 o) {
    const __m256i be = _mm256_castps_si256(e), bo = _mm256_castps_si256(o);
    const __m256i hi = _mm256_blend_epi16(_mm256_srli_epi32(be, 16), bo, 0xAA);
    const __m256i lo = _mm256_blend_epi16(be, _mm256_slli_epi32(bo, 16), 0xAA);
    const __m256i half = _mm256_or_si256(
        _mm256_and_si256(hi, _mm256_set1_epi16(1)), _mm256_set1_epi16(0x7FFE));
    const __m256i carry = _mm256_srli_epi16(_mm256_avg_epu16(lo, half), 15);
    return _mm256_add_epi16(hi, carry);
  }

  static void load(const T* p, __m256& a, __m256& b) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    a = even(v);
    b = odd(v);
  }
  static void round(__m256& a, __m256& b) {
    a = upper(rne_bias(a));
    b = upper(rne_bias(b));
  }
  static void store(T* p, __m256 a, __m256 b) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), pack(a, b));
  }
  static void stream(T* p, __m256 a, __m256 b) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), pack(a, b));
  }
  // Rounds and stores, and returns the rounded values as fp32 (fused add).
  static void store_rounded(T* p, __m256& a, __m256& b) {
    const __m256i v = pack(a, b);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
    a = even(v);
    b = odd(v);
  }

  static float to_float(T v) { return static_cast<float>(v); }
  static T from_float(float f) { return T(f); }
};

// fp16 through F16C: vcvtps2ph rounds to nearest even and keeps NaN/Inf.
struct F16 {
  using T = c10::Half;
  static constexpr bool kPrepareWeight = false;  // measured: no gain
  static constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

  static void load(const T* p, __m256& a, __m256& b) {
    a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    b = _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
  }
  static void round(__m256& a, __m256& b) {
    a = _mm256_cvtph_ps(_mm256_cvtps_ph(a, kRne));
    b = _mm256_cvtph_ps(_mm256_cvtps_ph(b, kRne));
  }
  static void store(T* p, __m256 a, __m256 b) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(a, kRne));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 8),
                     _mm256_cvtps_ph(b, kRne));
  }
  static void stream(T* p, __m256 a, __m256 b) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(a, kRne));
    _mm_stream_si128(reinterpret_cast<__m128i*>(p + 8),
                     _mm256_cvtps_ph(b, kRne));
  }
  static void store_rounded(T* p, __m256& a, __m256& b) {
    const __m128i ha = _mm256_cvtps_ph(a, kRne), hb = _mm256_cvtps_ph(b, kRne);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), ha);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 8), hb);
    a = _mm256_cvtph_ps(ha);
    b = _mm256_cvtph_ps(hb);
  }

  static float to_float(T v) { return static_cast<float>(v); }
  static T from_float(float f) { return T(f); }
};

struct F32 {
  using T = float;
  static constexpr bool kPrepareWeight = false;

  static void load(const T* p, __m256& a, __m256& b) {
    a = _mm256_loadu_ps(p);
    b = _mm256_loadu_ps(p + 8);
  }
  static void round(__m256&, __m256&) {}
  static void store(T* p, __m256 a, __m256 b) {
    _mm256_storeu_ps(p, a);
    _mm256_storeu_ps(p + 8, b);
  }
  static void stream(T* p, __m256 a, __m256 b) {
    _mm256_stream_ps(p, a);
    _mm256_stream_ps(p + 8, b);
  }
  static void store_rounded(T* p, __m256& a, __m256& b) { store(p, a, b); }

  static float to_float(T v) { return v; }
  static T from_float(float f) { return f; }
};

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// ---------------------------------------------------------------------------
// One row. Pass 2's vector loop starts at `head`: the scalar head that aligns
// y for streaming stores (0 otherwise). Pass 1 always starts at 0, so a row's
// sum of squares, and with it the row's result, does not depend on where its
// output lies or on whether the call streams (which depends on the number of
// rows): the same row gives the same bits in any batch.
// ---------------------------------------------------------------------------
template <bool kFused, bool kWeight, bool kStream, bool kPrepW, int kPfLocality>
struct RowConfig {
  static constexpr bool fused = kFused;    // residual add first
  static constexpr bool weight = kWeight;  // multiply by weight
  static constexpr bool stream = kStream;  // non-temporal stores of y
  static constexpr bool prep_w = kPrepW;   // weight prepared as fp32
  static constexpr int pf = kPfLocality;   // < 0: no next-row prefetch
};

template <typename E>
struct RowArgs {
  using T = typename E::T;
  const T* x;
  T* res;           // fused: residual row, read and overwritten
  T* y;             // output row (fused: == x)
  const T* w;       // weight or nullptr
  const float* pw;  // prepared weight for chunks from `head` (prep_w)
  const char* pf0;  // next row's pass-1 inputs to prefetch, or nullptr
  const char* pf1;
  int64_t n;
  int64_t head;
  float epsilon;
};

// Pass 1: sum of squares of x (fused: of T(x + res), stored to res).
template <typename E, typename C>
inline float sum_squares(const RowArgs<E>& r) {
  const int64_t n = r.n;
  float sum_tail = 0.f;  // scalar tail
  auto scalar = [&](int64_t j) {
    float v = E::to_float(r.x[j]);
    if constexpr (C::fused) {
      const auto s = E::from_float(v + E::to_float(r.res[j]));
      r.res[j] = s;
      v = E::to_float(s);
    }
    sum_tail += v * v;
  };
  int64_t j = 0;
  // Eight accumulators: four chunks per iteration cover the FMA latency.
  // The chunks of an iteration go op by op, two at a time (see normalize).
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  auto step = [&]<int K>(int64_t off, __m256* acc_k) {
    __m256 a[K], b[K];
    for (int c = 0; c < K; ++c) E::load(r.x + off + c * kChunk, a[c], b[c]);
    if constexpr (C::fused) {
      for (int c = 0; c < K; ++c) {
        __m256 ra, rb;
        E::load(r.res + off + c * kChunk, ra, rb);
        a[c] = _mm256_add_ps(a[c], ra);
        b[c] = _mm256_add_ps(b[c], rb);
      }
      for (int c = 0; c < K; ++c)
        E::store_rounded(r.res + off + c * kChunk, a[c], b[c]);
    }
    for (int c = 0; c < K; ++c) {
      acc_k[2 * c] = _mm256_fmadd_ps(a[c], a[c], acc_k[2 * c]);
      acc_k[2 * c + 1] = _mm256_fmadd_ps(b[c], b[c], acc_k[2 * c + 1]);
    }
  };
  for (; j + 4 * kChunk <= n; j += 4 * kChunk) {
    step.template operator()<2>(j, acc);
    step.template operator()<2>(j + 2 * kChunk, acc + 4);
  }
  for (; j + kChunk <= n; j += kChunk) step.template operator()<1>(j, acc);
  for (; j < n; ++j) scalar(j);
  const __m256 t = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]),
                                               _mm256_add_ps(acc[2], acc[3])),
                                 _mm256_add_ps(_mm256_add_ps(acc[4], acc[5]),
                                               _mm256_add_ps(acc[6], acc[7])));
  return hsum(t) + sum_tail;
}

// Pass 2: y = T(T(src * scale) * w) (no weight: T(src * scale)), src being
// x (rms_norm) or the stored sum (fused). Meanwhile prefetches the next row's
// pass-1 inputs, one 64-byte line per 64 bytes of this row, so that memory
// keeps streaming while this compute-bound pass runs from L1/L2.
template <typename E, typename C>
inline void normalize(const RowArgs<E>& r, float inv_rms) {
  using T = typename E::T;
  const int64_t n = r.n;
  const T* src = C::fused ? r.res : r.x;
  auto scalar = [&](int64_t j) {
    float v = E::to_float(src[j]) * inv_rms;
    if constexpr (C::weight)
      v = E::to_float(E::from_float(v)) * E::to_float(r.w[j]);
    r.y[j] = E::from_float(v);
  };
  int64_t j = 0;
  for (; j < r.head; ++j) scalar(j);
  const __m256 scale = _mm256_set1_ps(inv_rms);
  // K chunks at a time, op by op: independent chains side by side let the
  // core overlap their latencies (2 measured ~5% faster than 1 or 4).
  auto step = [&]<int K>(int64_t off) {
    __m256 a[K], b[K];
    for (int c = 0; c < K; ++c) E::load(src + off + c * kChunk, a[c], b[c]);
    for (int c = 0; c < K; ++c) {
      a[c] = _mm256_mul_ps(a[c], scale);
      b[c] = _mm256_mul_ps(b[c], scale);
    }
    if constexpr (C::weight) {
      for (int c = 0; c < K; ++c) E::round(a[c], b[c]);
      for (int c = 0; c < K; ++c) {
        const int64_t o = off + c * kChunk;
        __m256 wa, wb;
        if constexpr (C::prep_w) {
          wa = _mm256_load_ps(r.pw + (o - r.head));
          wb = _mm256_load_ps(r.pw + (o - r.head) + 8);
        } else {
          E::load(r.w + o, wa, wb);
        }
        a[c] = _mm256_mul_ps(a[c], wa);
        b[c] = _mm256_mul_ps(b[c], wb);
      }
    }
    for (int c = 0; c < K; ++c) {
      if constexpr (C::stream) {
        E::stream(r.y + off + c * kChunk, a[c], b[c]);
      } else {
        E::store(r.y + off + c * kChunk, a[c], b[c]);
      }
    }
  };
  int64_t pf_next = 0;  // next byte of the next row to prefetch
  auto prefetch_to = [&](int64_t until) {
    if constexpr (C::pf >= 0) {
      if (r.pf0 == nullptr) return;
      for (; pf_next < until; pf_next += 64) {
        __builtin_prefetch(r.pf0 + pf_next, 0, C::pf < 0 ? 0 : C::pf);
        if (r.pf1 != nullptr)
          __builtin_prefetch(r.pf1 + pf_next, 0, C::pf < 0 ? 0 : C::pf);
      }
    }
  };
  for (; j + 2 * kChunk <= n; j += 2 * kChunk) {
    prefetch_to((j + 2 * kChunk) * int64_t(sizeof(T)));
    step.template operator()<2>(j);
  }
  for (; j + kChunk <= n; j += kChunk) step.template operator()<1>(j);
  for (; j < n; ++j) scalar(j);
  prefetch_to(n * int64_t(sizeof(T)));
}

template <typename E, typename C>
inline void row(const RowArgs<E>& r) {
  const float sum = sum_squares<E, C>(r);
  const float inv_rms =
      1.f / std::sqrt(sum / static_cast<float>(r.n) + r.epsilon);
  normalize<E, C>(r, inv_rms);
}

// Elements before the first 32-byte boundary of y (all of them when y is not
// even element-aligned, which a typed tensor never is).
template <typename T>
inline int64_t stream_head(const T* y, int64_t n) {
  const auto mis = reinterpret_cast<uintptr_t>(y) & 31;
  if (mis == 0) return 0;
  if (mis % sizeof(T) != 0) return n;
  const auto head = static_cast<int64_t>((32 - mis) / sizeof(T));
  return head < n ? head : n;
}

// The weight as fp32 in each chunk's lane order, chunks starting at element
// `head`: 16 floats per chunk, lanes a then b.
template <typename E>
inline void prepare_weight(const typename E::T* w, int64_t n, int64_t head,
                           float* pw) {
  for (int64_t j = head; j + kChunk <= n; j += kChunk) {
    __m256 a, b;
    E::load(w + j, a, b);
    _mm256_store_ps(pw + (j - head), a);
    _mm256_store_ps(pw + (j - head) + 8, b);
  }
}

// 32-byte aligned fp32 scratch of one thread, grown on demand.
struct alignas(32) Vec8 {
  float v[8];
};
inline float* scratch(std::vector<Vec8>& buf, int64_t floats) {
  const auto vecs = static_cast<size_t>((floats + 7) / 8);
  if (buf.size() < vecs) buf.resize(vecs);
  return buf.data()->v;
}

// Rows per task from which the weight is prepared in fp32 once per task
// (below that, preparing costs about what it saves), and the widest row it
// is prepared for (256 KiB of fp32 per thread: wider, it would not stay in
// L2 next to the rows, and the bf16/fp16 weight is half the bytes).
// Measured gain: ~7% for bf16 (2 of ~29 vector ops per 16 elements), none
// for fp16 (vcvtph2ps with a memory operand is as cheap as the load).
constexpr int64_t kPrepWeightMinRows = 4;
constexpr int64_t kPrepWeightMaxWidth = int64_t{1} << 16;

// Rows [begin, end). kPf as in RowConfig: without the next-row prefetch a
// cold 4096x4096 bf16 call ran ~1.5x slower (pass 1 waited on memory while
// pass 2 left it idle); into L1 (3) or L2 (2) measured alike within noise
// (rms_norm 2.15 vs 2.19 ms, fused 3.17 vs 3.45 ms, 2 threads). The weight is
// prepared when the task has enough rows, for the head of its first row
// (rows with another head, possible only for odd widths with streaming,
// widen it as they go).
template <typename E, bool kFused, bool kWeight, bool kStream,
          int kPf = kFused ? 3 : 2>
void rows_impl(const RmsNormParams& p, int64_t begin, int64_t end) {
  using T = typename E::T;
  using CPrep = RowConfig<kFused, kWeight, kStream, true, kPf>;
  using CNoPrep = RowConfig<kFused, kWeight, kStream, false, kPf>;
  constexpr bool kCanPrep = kWeight && E::kPrepareWeight;
  const int64_t n = p.width;
  const auto* in = static_cast<const T*>(p.in);
  auto* out = static_cast<T*>(p.out);
  auto* res_base = static_cast<T*>(p.residual);

  RowArgs<E> r{};
  r.w = static_cast<const T*>(p.weight);
  r.n = n;
  r.epsilon = p.epsilon;
  thread_local std::vector<Vec8> weight_buf;
  int64_t prep_head = -1;
  if (kCanPrep && end - begin >= kPrepWeightMinRows && n >= kChunk &&
      n <= kPrepWeightMaxWidth) {
    prep_head = kStream ? stream_head(out + p.out_rows.offset(begin), n) : 0;
    float* pw = scratch(weight_buf, n);
    prepare_weight<E>(r.w, n, prep_head, pw);
    r.pw = pw;
  }
  for (int64_t row_i = begin; row_i < end; ++row_i) {
    r.x = in + p.in_rows.offset(row_i);
    r.y = out + p.out_rows.offset(row_i);
    if constexpr (kFused) r.res = res_base + p.residual_rows.offset(row_i);
    r.head = kStream ? stream_head(r.y, n) : 0;
    if (kPf >= 0 && row_i + 1 < end) {
      r.pf0 = reinterpret_cast<const char*>(in + p.in_rows.offset(row_i + 1));
      if constexpr (kFused)
        r.pf1 = reinterpret_cast<const char*>(
            res_base + p.residual_rows.offset(row_i + 1));
    } else {
      r.pf0 = r.pf1 = nullptr;
    }
    if (kCanPrep && r.head == prep_head) {
      row<E, CPrep>(r);
    } else {
      row<E, CNoPrep>(r);
    }
  }
  if constexpr (kStream) _mm_sfence();
}

// Output bytes from which rms_norm bypasses the caches for its output, i.e.
// when input and output together (32 MiB) no longer fit in a typical
// last-level cache (32 MiB per Zen 3 CCX; sysconf's figure cannot be trusted:
// under KVM here it reports the whole socket's 256 MiB). Below that the
// output is left in cache for its consumer (the next GEMM); above, it would
// be evicted before being read anyway, and streaming it saves the
// read-for-ownership of every output line (3 -> 2 memory transfers).
constexpr int64_t kStreamMinBytes = int64_t{16} << 20;

template <typename E>
void rows(const RmsNormParams& p, int64_t begin, int64_t end) {
  const bool fused = p.residual != nullptr;
  const bool weight = p.weight != nullptr;
  const bool stream =
      !fused &&
      p.rows * p.width * int64_t(sizeof(typename E::T)) >= kStreamMinBytes;
  if (fused) {
    if (weight) return rows_impl<E, true, true, false>(p, begin, end);
    return rows_impl<E, true, false, false>(p, begin, end);
  }
  if (stream) {
    if (weight) return rows_impl<E, false, true, true>(p, begin, end);
    return rows_impl<E, false, false, true>(p, begin, end);
  }
  if (weight) return rows_impl<E, false, true, false>(p, begin, end);
  return rows_impl<E, false, false, false>(p, begin, end);
}

inline void rms_norm_rows(const RmsNormParams& p, int64_t begin, int64_t end) {
  switch (p.dtype) {
    case DType::kFloat32:
      return rows<F32>(p, begin, end);
    case DType::kFloat16:
      return rows<F16>(p, begin, end);
    case DType::kBFloat16:
      return rows<BF16>(p, begin, end);
  }
}

}  // namespace avx2
}  // namespace
}  // namespace vllm_myops::cpu
