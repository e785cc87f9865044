// SPDX-License-Identifier: Apache-2.0
// AVX2 (+FMA, F16C) element traits: 16 bf16, fp16 or fp32 elements as two
// fp32 vectors, with the loads, stores and round-to-nearest-even conversions
// a kernel needs. Include only from a per-ISA source compiled for AVX2 or
// AVX512 (cpu/isa.h); everything here has internal linkage, so the copies
// compiled with different ISA flags never meet at link time.
//
// bf16 is held as two fp32 vectors of the even and odd elements (one shift or
// mask each, and the same two ops pack them back), fp16 and fp32 as the low
// and high 8. A second operand loaded through the same type gets the same
// lane order, so elementwise work between them needs no permutation.
#pragma once

#include <immintrin.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>

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
// NaN reaching a rounding has any low bit set as long as every NaN is either
// a widened bf16 value (low 16 bits zero) propagated by x86 arithmetic, which
// only quiets NaNs (bit 22) and never sets payload bits, or the default NaN
// 0xFFC00000 created by inf-inf, 0*inf or sqrt of a negative: true of any
// kernel whose inputs are bf16. So a NaN keeps its upper 16 bits exactly
// (0x7FFF stays 0x7FFF), and Inf stays Inf. Scalar code should use
// c10::BFloat16, which gives the same bits for every non-NaN value.
struct BF16 {
  using T = c10::BFloat16;

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

}  // namespace avx2
}  // namespace
}  // namespace vllm_myops::cpu
