// SPDX-License-Identifier: Apache-2.0
// The CPU W4A16 kernel's row block, in every build: the weight prefetch,
// the lane types of the ISA (AVX-512, AVX2 or portable), block<MB> (MB
// rows of a x one pass of columns of an n-tile, decoded per K-row), the
// stores, and the group parameters (scales, zero corrections) with their
// prefetch. The arrangement of the packed words and the paths are described
// in w4a16_kernels_isa.cpp.
// Include only from w4a16_kernels_isa.cpp (compiled once per ISA,
// cpu/isa.h); everything here has internal linkage.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu/isa.h"
#include "quantization/w4a16/cpu/w4a16_kernels_isa.h"

#if defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512)
  #include <immintrin.h>
#endif

namespace vllm_myops::cpu {
namespace {

constexpr int kTileN = 64;

// The weight is read once, in order: at M = 1 the kernel is bound by that
// stream, and prefetching kPrefetchRows word-rows (8 KiB) ahead keeps more
// of it in flight than the hardware prefetcher alone
// (docs/quantization/log/). Past the n-tile it runs into the next one
// (contiguous); past the weight's end a prefetch is harmless.
constexpr int kPrefetchRows = 32;
inline void prefetch_row(const int32_t* row) {
  for (int l = 0; l < 4; ++l)  // 64 words = 4 cache lines
    __builtin_prefetch(row + kPrefetchRows * kTileN + l * 16, 0, 3);
}
// K-row (within a word's 8) of each nibble (the arrangement in
// w4a16_kernels_isa.cpp's header).
constexpr int kNibbleRow[8] = {0, 2, 4, 6, 1, 3, 5, 7};

// ---------------------------------------------------------------------------
// Lane types: L columns per vector. I holds L words (8 codes each), F L
// floats. code(w) dequantizes nibble 0 of each lane to float(q - kOffset);
// shift4(w) moves the next nibble down.
// ---------------------------------------------------------------------------
#if defined(CPU_CAPABILITY_AVX512)
struct Lanes {
  static constexpr int L = 16;
  static constexpr int kOffset = 8;
  static constexpr int kCols = 64;  // columns per pass (NV = 4 vectors)
  using I = __m512i;
  using F = __m512;
  __m512 lut = _mm512_setr_ps(-8.f, -7.f, -6.f, -5.f, -4.f, -3.f, -2.f, -1.f,
                              0.f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f);
  static I load_words(const int32_t* p) { return _mm512_loadu_si512(p); }
  // vpermps reads only the low 4 bits of each index lane.
  F code(I w) const { return _mm512_permutexvar_ps(w, lut); }
  static I shift4(I w) { return _mm512_srli_epi32(w, 4); }
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
};
#elif defined(CPU_CAPABILITY_AVX2)
struct Lanes {
  static constexpr int L = 8;
  static constexpr int kOffset = 0;
  static constexpr int kCols = 16;  // 4 x 2 accumulators fit 16 registers
  using I = __m256i;
  using F = __m256;
  __m256i mask = _mm256_set1_epi32(0xF);
  static I load_words(const int32_t* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  F code(I w) const { return _mm256_cvtepi32_ps(_mm256_and_si256(w, mask)); }
  static I shift4(I w) { return _mm256_srli_epi32(w, 4); }
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F fnmadd(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
};
#else
// Portable: 8-lane arrays the compiler vectorizes with the baseline ISA.
struct Lanes {
  static constexpr int L = 8;
  static constexpr int kOffset = 8;
  static constexpr int kCols = 32;
  struct I {
    uint32_t v[L];
  };
  struct F {
    float v[L];
  };
  static I load_words(const int32_t* p) {
    I r;
    std::memcpy(r.v, p, sizeof(r.v));
    return r;
  }
  F code(I w) const {
    F r;
    for (int i = 0; i < L; ++i) r.v[i] = float(int(w.v[i] & 0xF) - kOffset);
    return r;
  }
  static I shift4(I w) {
    for (int i = 0; i < L; ++i) w.v[i] >>= 4;
    return w;
  }
  static F zero() { return set1(0.f); }
  static F set1(float x) {
    F r;
    for (int i = 0; i < L; ++i) r.v[i] = x;
    return r;
  }
  static F fmadd(F a, F b, F c) {
    for (int i = 0; i < L; ++i) c.v[i] += a.v[i] * b.v[i];
    return c;
  }
  static F fnmadd(F a, F b, F c) {
    for (int i = 0; i < L; ++i) c.v[i] -= a.v[i] * b.v[i];
    return c;
  }
  static F load(const float* p) {
    F r;
    std::memcpy(r.v, p, sizeof(r.v));
    return r;
  }
  static void store(float* p, F v) { std::memcpy(p, v.v, sizeof(v.v)); }
};
#endif

using F = Lanes::F;
using I = Lanes::I;
constexpr int L = Lanes::L;
constexpr int NV = Lanes::kCols / L;

// Rows [m0, m0 + MB) x columns [c0, c0 + kCols) of one n-tile (words `bt`),
// over every group: tot[m * 64 + c] += s * (sum a q' - (z - c) sum a).
template <int MB>
void block(const Lanes& lanes, const W4A16CpuParams& p, const int32_t* bt,
           const float* sb, const float* zb, bool correct, int64_t m0, int c0,
           float* tot) {
  const float* arow[MB];
  const float* srow[MB];
  for (int m = 0; m < MB; ++m) {
    arow[m] = p.a + (m0 + m) * p.lda;
    srow[m] = p.a_sums + (m0 + m) * p.groups;
  }
  for (int64_t g = 0; g < p.groups; ++g) {
    const int64_t k_begin = g * p.group_rows;
    const int64_t k_end = std::min(p.k, k_begin + p.group_rows);
    const int64_t w_begin = k_begin / 8;  // groups start on a word (32 | size)
    const int64_t w_end = (k_end + 7) / 8;  // a is zero past k
    F acc[MB][NV];
    for (int m = 0; m < MB; ++m)
      for (int v = 0; v < NV; ++v) acc[m][v] = Lanes::zero();
    for (int64_t r = w_begin; r < w_end; ++r) {
      const int32_t* wp = bt + r * kTileN + c0;
      if (c0 == 0) prefetch_row(bt + r * kTileN);
      I w[NV];
      for (int v = 0; v < NV; ++v) w[v] = Lanes::load_words(wp + v * L);
      const int64_t k0 = r * 8;
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        F q[NV];
        for (int v = 0; v < NV; ++v) {
          q[v] = lanes.code(w[v]);
          w[v] = Lanes::shift4(w[v]);
        }
        for (int m = 0; m < MB; ++m) {
          const F av = Lanes::set1(arow[m][k0 + kNibbleRow[j]]);
          for (int v = 0; v < NV; ++v)
            acc[m][v] = Lanes::fmadd(q[v], av, acc[m][v]);
        }
      }
    }
    const float* sg = sb + g * kTileN + c0;
    const float* zg = zb + g * kTileN + c0;
    for (int m = 0; m < MB; ++m) {
      const F sa = Lanes::set1(srow[m][g]);
      for (int v = 0; v < NV; ++v) {
        F x = acc[m][v];
        if (correct) x = Lanes::fnmadd(Lanes::load(zg + v * L), sa, x);
        float* t = tot + m * kTileN + c0 + v * L;
        Lanes::store(t,
                     Lanes::fmadd(Lanes::load(sg + v * L), x, Lanes::load(t)));
      }
    }
  }
}

template <typename T>
void store_rows(const W4A16CpuParams& p, const float* tot, int64_t m0, int mb,
                int64_t col0, int cols) {
  T* out = static_cast<T*>(p.out);
  for (int m = 0; m < mb; ++m) {
    T* o = out + (m0 + m) * p.n + col0;
    const float* t = tot + m * kTileN;
    if (p.bias) {
      for (int c = 0; c < cols; ++c) o[c] = T(t[c] + p.bias[col0 + c]);
    } else {
      for (int c = 0; c < cols; ++c) o[c] = T(t[c]);
    }
  }
}

// Scales and zero corrections of n-tile columns [col0, col0 + cols) as fp32
// [groups, 64]; missing columns get 0 (no contribution).
template <typename T>
void load_group_params(const W4A16CpuParams& p, int64_t col0, int cols,
                       float* sb, float* zb, int offset = Lanes::kOffset) {
  const T* s = static_cast<const T*>(p.scales);
  const T* z = static_cast<const T*>(p.zeros);
  const float zsym = float(8 - offset);
  for (int64_t g = 0; g < p.groups; ++g) {
    float* sr = sb + g * kTileN;
    float* zr = zb + g * kTileN;
    const T* sg = s + g * p.n + col0;
    for (int c = 0; c < cols; ++c) sr[c] = float(sg[c]);
    if (z) {
      const T* zg = z + g * p.n + col0;
      for (int c = 0; c < cols; ++c) zr[c] = float(zg[c]) - offset;
    } else {
      for (int c = 0; c < cols; ++c) zr[c] = zsym;
    }
    for (int c = cols; c < kTileN; ++c) sr[c] = zr[c] = 0.f;
  }
}

// The scale (and zero) rows of an n-tile are short rows n apart, which the
// stream prefetcher does not follow: read cold, at M = 1 nothing hides the
// misses. The bf16 row-block path reads them per group and asks for them
// kParamsAhead groups ahead (into the next n-tile at the end of this one);
// the fp32 path converts a tile's at its start and asks for the next
// tile's (to L2: the tile's weights would evict them from L1).
constexpr int64_t kParamsAhead = 2;
template <int kLocality = 3>
inline void prefetch_params_row(const void* row) {
  // 64 16-bit columns, 128 bytes: two lines, three when not 64-aligned.
  const auto* b = static_cast<const char*>(row);
  __builtin_prefetch(b, 0, kLocality);
  __builtin_prefetch(b + 64, 0, kLocality);
  __builtin_prefetch(b + 127, 0, kLocality);
}

template <typename T>
void prefetch_group_params(const W4A16CpuParams& p, int64_t col0) {
  const T* s = static_cast<const T*>(p.scales) + col0;
  const T* z = static_cast<const T*>(p.zeros);
  for (int64_t g = 0; g < p.groups; ++g) {
    prefetch_params_row<2>(s + g * p.n);
    if (z) prefetch_params_row<2>(z + g * p.n + col0);
  }
}

}  // namespace
}  // namespace vllm_myops::cpu
