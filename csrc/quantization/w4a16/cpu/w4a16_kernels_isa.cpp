// SPDX-License-Identifier: Apache-2.0
// CPU W4A16 GEMM tiles, compiled once per ISA (cpu/isa.h).
//
// CPU tile arrangement (what w4a16_repack_cpu writes): the 512 int32 words
// of tile (nt, kt) are the GPTQ words of that 64x64 block, row-major, with
// the nibbles of each word reordered:
//   word[r * 64 + c] holds the codes of rows k = kt*64 + 8r + i, i < 8, of
//   column nt*64 + c; nibble p holds row i = kNibbleRow[p] = 0 2 4 6 1 3 5 7
//   (low half-word: the even rows, high half-word: the odd ones).
// Padding (rows >= K, columns >= N) is code 0. The k-tiles of one n-tile
// are contiguous, so an n-tile is one dense [ceil(K/64) * 8, 64] word
// matrix: a vector load of 16 (AVX-512) or 8 (AVX2) consecutive words gives
// 8 K-rows of 16/8 adjacent columns, and nibble p of every lane is the same
// K-row, so a dequantized row vector is one shift plus one lookup (AVX-512
// vpermps on the low 4 bits of each lane: no mask, no int->float
// conversion) or shift, mask, convert (AVX2). The nibble order serves the
// AVX512-BF16 path: after a shift by 4p, the two half-words of a lane index
// rows 2p and 2p + 1, so one vpermw gives the bf16 pairs vdpbf16ps takes.
//
// Math: W[k, n] = (q - z) * s in fp32. With q' = q - c (c = 8 with the
// lookups, 0 with the conversion), per group and column
//   sum_k a[k] * (q - z) = sum_k a[k] * q' - (z - c) * sum_k a[k],
// so the inner loop is one FMA per weight and row; the zero and the scale
// are applied once per group (sum_k a[k] per group comes from the host).
// Symmetric weights with c = 8 need no correction at all. Accumulation is
// fp32 throughout; the output is rounded once to the dtype. The BF16 paths
// (vdpbf16ps or AMX tdpbf16ps) multiply a by q' in bf16: q' in [-8, 7] is
// exact in bf16, bf16 a already is bf16 (fp16 a is split exactly into
// hi + lo, two bf16 products), and the products are exact in fp32, so only
// the fp32 sums round, as in the other paths (both
// instructions flush bf16 denormals, |a| < 2^-126, to zero: far below the
// output's rounding). The weight is never rounded to bf16: the scale is
// applied to the fp32 partial sum of each group.
//
// Paths (the host picks one per call: W4A16CpuPath, w4a16_kernels.cpp):
// - fp32 (every ISA; fp16 activations below AMX's M): each n-tile is done for
//   blocks of up to 4 rows of a at a time, 4 x 64 (AVX-512) or 4 x 16
//   (AVX2, 16 ymm registers) fp32 accumulators, so each dequantized weight
//   vector feeds 4 rows.
// - bf16 rows (AVX512-BF16, small M): the same blocking with vdpbf16ps.
// - bf16 panel / AMX (AVX512-BF16 / AMX-BF16, larger M): a chunk of the
//   n-tile is decoded once into a bf16 panel of q - 8 and every row of a
//   runs over it (vdpbf16ps, or AMX tdpbf16ps on 16 x 32 tiles of a; fp16
//   a goes to AMX as two exact bf16 planes, hi + lo, never rounded to one
//   bf16); see "Panel paths" below.
// At M = 1 the time is the weight stream from memory (32 bytes per 64
// weights of a K-row), hence the software prefetch.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
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
// K-row (within a word's 8) of each nibble (see the arrangement above).
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

#if defined(CPU_CAPABILITY_AVX512)
// ---------------------------------------------------------------------------
// AVX512-BF16 (bf16 activations): vdpbf16ps does two K-rows per instruction.
// Built with a target attribute (the AVX512 build's flags do not include
// BF16) and chosen at run time from cpuid.
// ---------------------------------------------------------------------------
  #define MYOPS_BF16_TARGET \
    __attribute__((target("avx512f,avx512bw,avx512bf16")))

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

// ---------------------------------------------------------------------------
// Panel paths (bf16 activations, M above the row-block path's range): each
// chunk of up to kChunk K-rows x 64 columns of an n-tile is decoded once
// into a bf16 panel of q - 8 (exact) and reused by every row of a, so the
// decode is paid once per weight instead of once per 4 rows. Panel layout:
// [K/32 steps][4 column vectors of 16][16 K-pairs][16 columns][2], i.e. one
// AMX B tile (VNNI pairs, 64-byte rows) per (step, vector), which is also
// the operand vdpbf16ps takes (one 64-byte row = one K-pair of 16 columns).
// The scale and the zero stay in fp32, per group on the fp32 partial sums,
// as in the other paths: W is never rounded to bf16.
// ---------------------------------------------------------------------------
constexpr int kChunk = 128;  // K-rows per panel: 16 KiB, L1-resident
constexpr int kPanelWords = kChunk / 32 * 4 * 16 * 16;  // int32 (bf16 pairs)

MYOPS_BF16_TARGET inline __m512i bf16_code_lut() {
  alignas(64) uint16_t table[32];
  for (int i = 0; i < 32; ++i) table[i] = c10::BFloat16(float(i % 16 - 8)).x;
  return _mm512_loadu_si512(table);
}

// Decodes `steps` 32-row steps starting at word-row w0 of n-tile `bt`.
MYOPS_BF16_TARGET inline void decode_panel(const __m512i lut, const int32_t* bt,
                                           int64_t w0, int steps,
                                           int32_t* panel) {
  for (int s = 0; s < steps; ++s) {
    for (int rr = 0; rr < 4; ++rr) {
      const int32_t* wp = bt + (w0 + 4 * s + rr) * kTileN;
      prefetch_row(wp);
      __m512i w[4];
      for (int v = 0; v < 4; ++v) w[v] = _mm512_loadu_si512(wp + v * 16);
      for (int j = 0; j < 4; ++j) {
        for (int v = 0; v < 4; ++v) {
          // Row rr * 4 + j of B tile (s, v): K-pair 4 * (4s + rr) + j.
          _mm512_store_si512(panel + ((s * 4 + v) * 16 + rr * 4 + j) * 16,
                             _mm512_permutexvar_epi16(w[v], lut));
          w[v] = _mm512_srli_epi32(w[v], 4);
        }
      }
    }
  }
}

// tot[m, 0:64] += s * (part[m, 0:64] - (z - 8) * sum_a[m, g]) for rows
// [0, rows) of a block starting at row m0; `correct` once per group.
MYOPS_BF16_TARGET inline void rescale_rows(const W4A16CpuParams& p,
                                           const float* part, int64_t ldp,
                                           const float* sg, const float* zg,
                                           bool correct, int64_t g, int64_t m0,
                                           int rows, float* tot) {
  __m512 s[4], z[4];
  for (int v = 0; v < 4; ++v) {
    s[v] = _mm512_loadu_ps(sg + v * 16);
    z[v] = _mm512_loadu_ps(zg + v * 16);
  }
  for (int m = 0; m < rows; ++m) {
    const __m512 sa = _mm512_set1_ps(p.a_sums[(m0 + m) * p.groups + g]);
    float* t = tot + (m0 + m) * kTileN;
    for (int v = 0; v < 4; ++v) {
      __m512 x = _mm512_loadu_ps(part + m * ldp + v * 16);
      if (correct) x = _mm512_fnmadd_ps(z[v], sa, x);
      _mm512_storeu_ps(t + v * 16,
                       _mm512_fmadd_ps(s[v], x, _mm512_loadu_ps(t + v * 16)));
    }
  }
}

// vdpbf16ps over the panel for MB rows x 64 columns.
template <int MB>
MYOPS_BF16_TARGET void panel_rows_bf16(const W4A16CpuParams& p,
                                       const int32_t* panel, int steps,
                                       int64_t kc0, int64_t m0, const float* sg,
                                       const float* zg, bool correct, int64_t g,
                                       float* tot) {
  const uint16_t* arow[MB];
  for (int m = 0; m < MB; ++m)
    arow[m] = static_cast<const uint16_t*>(p.a_half) + (m0 + m) * p.lda + kc0;
  __m512 acc[MB][4];
  for (int m = 0; m < MB; ++m)
    for (int v = 0; v < 4; ++v) acc[m][v] = _mm512_setzero_ps();
  for (int s = 0; s < steps; ++s) {
    const int32_t* ps = panel + s * 4 * 16 * 16;
  #pragma GCC unroll 4
    for (int kk = 0; kk < 16; ++kk) {
      __m512i b[4];
      for (int v = 0; v < 4; ++v)
        b[v] = _mm512_load_si512(ps + (v * 16 + kk) * 16);
      for (int m = 0; m < MB; ++m) {
        int32_t pair;
        std::memcpy(&pair, arow[m] + 32 * s + 2 * kk, sizeof(pair));
        const __m512i av = _mm512_set1_epi32(pair);
        for (int v = 0; v < 4; ++v)
          acc[m][v] = _mm512_dpbf16_ps(acc[m][v], (__m512bh)b[v], (__m512bh)av);
      }
    }
  }
  alignas(64) float part[MB * kTileN];
  for (int m = 0; m < MB; ++m)
    for (int v = 0; v < 4; ++v)
      _mm512_store_ps(part + m * kTileN + v * 16, acc[m][v]);
  rescale_rows(p, part, kTileN, sg, zg, correct, g, m0, MB, tot);
}

constexpr int kPanelRows = 6;  // 24 accumulators + 4 panel rows + 1 of a

MYOPS_BF16_TARGET void panel_block_bf16(const W4A16CpuParams& p,
                                        const int32_t* panel, int steps,
                                        int64_t kc0, const float* sg,
                                        const float* zg, bool correct,
                                        int64_t g, float* tot) {
  for (int64_t m0 = 0; m0 < p.m; m0 += kPanelRows) {
    const int mb = int(std::min<int64_t>(kPanelRows, p.m - m0));
    switch (mb) {
  #define MYOPS_PANEL_CASE(R)                                                \
    case R:                                                                  \
      panel_rows_bf16<R>(p, panel, steps, kc0, m0, sg, zg, correct, g, tot); \
      break;
      MYOPS_PANEL_CASE(6)
      MYOPS_PANEL_CASE(5)
      MYOPS_PANEL_CASE(4)
      MYOPS_PANEL_CASE(3)
      MYOPS_PANEL_CASE(2)
      default:
        panel_rows_bf16<1>(p, panel, steps, kc0, m0, sg, zg, correct, g, tot);
        break;
  #undef MYOPS_PANEL_CASE
    }
  }
}

// ---------------------------------------------------------------------------
// AMX: tiles 0-3 accumulate fp32 C (16 x 16 each), 4-5 hold a (16 rows x 32
// K), 6-7 the panel's B tiles (16 K-pairs x 16 columns). A block of 32 rows
// runs as two 32-column halves (C 2 x 2); a block of <= 16 rows as one A
// tile against all 4 column vectors. The host granted the tile state
// (w4a16_kernels.cpp) and padded a's rows to 16 with zeros.
// ---------------------------------------------------------------------------
  #define MYOPS_AMX_TARGET \
    __attribute__((target("avx512f,avx512bw,avx512bf16,amx-tile,amx-bf16")))

struct alignas(64) AmxTileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

// kPlanes = 2 (fp16 a): a = hi + lo, both bf16 (hi = bf16(a), lo = a - hi
// exactly: fp16's 11 significant bits fit in two bf16), one plane of
// lda / 32 * 16 rows after the other; each step multiplies both planes by
// the same B tiles, so the products stay exact.
template <int kPlanes>
MYOPS_AMX_TARGET void amx_block(const W4A16CpuParams& p, const int32_t* panel,
                                int steps, int64_t kc0, const float* sg,
                                const float* zg, bool correct, int64_t g,
                                float* tot) {
  alignas(64) float part[32 * kTileN];
  // a in tile order: tile (16-row block, 32-column step) is 512 contiguous
  // bf16, 64 bytes a row; a 16-row block holds lda / 32 of them.
  constexpr int64_t stride = 64;
  constexpr int kATile = 16 * 32;  // bf16 per A tile
  constexpr int kBTile = 16 * 16;  // int32 per B tile
  for (int64_t m0 = 0; m0 < p.m; m0 += 32) {
    const int rows = int(std::min<int64_t>(32, p.m - m0));
    const uint16_t* a0 = static_cast<const uint16_t*>(p.a_half) +
                         (m0 / 16 * (p.lda / 32) + kc0 / 32) * kATile;
    const int64_t plane = p.a_rows / 16 * (p.lda / 32) * kATile;
    if (rows > 16) {
      const uint16_t* a1 = a0 + p.lda / 32 * kATile;
      for (int h = 0; h < 2; ++h) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int s = 0; s < steps; ++s) {
          const int32_t* b = panel + (s * 4 + 2 * h) * kBTile;
          _tile_loadd(6, b, 64);
          _tile_loadd(7, b + kBTile, 64);
          for (int pl = 0; pl < kPlanes; ++pl) {
            _tile_loadd(4, a0 + pl * plane + s * kATile, stride);
            _tile_loadd(5, a1 + pl * plane + s * kATile, stride);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
          }
        }
        float* c = part + 32 * h;
        _tile_stored(0, c, kTileN * 4);
        _tile_stored(1, c + 16, kTileN * 4);
        _tile_stored(2, c + 16 * kTileN, kTileN * 4);
        _tile_stored(3, c + 16 * kTileN + 16, kTileN * 4);
      }
    } else {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int s = 0; s < steps; ++s) {
        const int32_t* b = panel + s * 4 * kBTile;
        _tile_loadd(4, a0 + s * kATile, stride);
        if (kPlanes == 2) _tile_loadd(5, a0 + plane + s * kATile, stride);
        _tile_loadd(6, b, 64);
        _tile_loadd(7, b + kBTile, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        if (kPlanes == 2) {
          _tile_dpbf16ps(0, 5, 6);
          _tile_dpbf16ps(1, 5, 7);
        }
        _tile_loadd(6, b + 2 * kBTile, 64);
        _tile_loadd(7, b + 3 * kBTile, 64);
        _tile_dpbf16ps(2, 4, 6);
        _tile_dpbf16ps(3, 4, 7);
        if (kPlanes == 2) {
          _tile_dpbf16ps(2, 5, 6);
          _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, part, kTileN * 4);
      _tile_stored(1, part + 16, kTileN * 4);
      _tile_stored(2, part + 32, kTileN * 4);
      _tile_stored(3, part + 48, kTileN * 4);
    }
    rescale_rows(p, part, kTileN, sg, zg, correct, g, m0, rows, tot);
  }
}

// T: a's dtype (scales, zeros, output); fp16 runs AMX only (two planes).
template <bool kAmx, typename T>
MYOPS_AMX_TARGET void tiles_panel(const W4A16CpuParams& p, int64_t nt_begin,
                                  int64_t nt_end) {
  constexpr int kPlanes = std::is_same_v<T, c10::Half> ? 2 : 1;
  static_assert(kAmx || kPlanes == 1, "the vdpbf16ps panel is bf16 only");
  if (kAmx) {
    AmxTileConfig cfg{};
    cfg.palette_id = 1;
    for (int t = 0; t < 8; ++t) {
      cfg.rows[t] = 16;
      cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
  }
  const __m512i lut = bf16_code_lut();
  std::vector<float> sbuf(p.groups * kTileN), zbuf(p.groups * kTileN);
  std::vector<float> tot(p.m * kTileN);
  alignas(64) int32_t panel[kPanelWords];
  const bool correct = p.zeros != nullptr;  // q - 8: symmetric needs none
  for (int64_t nt = nt_begin; nt < nt_end; ++nt) {
    const int64_t col0 = nt * kTileN;
    const int cols = int(std::min<int64_t>(kTileN, p.n - col0));
    load_group_params<T>(p, col0, cols, sbuf.data(), zbuf.data(), 8);
    const int32_t* bt = p.b + nt * p.k_tiles * 512;
    std::fill(tot.begin(), tot.end(), 0.f);
    for (int64_t g = 0; g < p.groups; ++g) {
      const int64_t k_begin = g * p.group_rows;  // a multiple of 32
      const int64_t k_end = std::min(p.k, k_begin + p.group_rows);
      const float* sg = sbuf.data() + g * kTileN;
      const float* zg = zbuf.data() + g * kTileN;
      for (int64_t kc0 = k_begin; kc0 < k_end; kc0 += kChunk) {
        // Past k: a is zero and the tile holds padding codes.
        const int steps =
            int((std::min<int64_t>(k_end, kc0 + kChunk) - kc0 + 31) / 32);
        decode_panel(lut, bt, kc0 / 8, steps, panel);
        const bool corr = correct && kc0 == k_begin;
        if (kAmx) {
          amx_block<kPlanes>(p, panel, steps, kc0, sg, zg, corr, g, tot.data());
        } else {
          panel_block_bf16(p, panel, steps, kc0, sg, zg, corr, g, tot.data());
        }
      }
    }
    store_rows<T>(p, tot.data(), 0, int(p.m), col0, cols);
  }
  if (kAmx) _tile_release();
}
#endif

template <typename T>
void tiles(const W4A16CpuParams& p, int64_t nt_begin, int64_t nt_end) {
  const Lanes lanes;
  std::vector<float> sbuf(p.groups * kTileN), zbuf(p.groups * kTileN);
  alignas(64) float tot[4 * kTileN];
  const bool correct = p.zeros != nullptr || Lanes::kOffset != 8;
  for (int64_t nt = nt_begin; nt < nt_end; ++nt) {
    const int64_t col0 = nt * kTileN;
    const int cols = int(std::min<int64_t>(kTileN, p.n - col0));
    load_group_params<T>(p, col0, cols, sbuf.data(), zbuf.data());
    if (nt + 1 < nt_end) prefetch_group_params<T>(p, col0 + kTileN);
    const int32_t* bt = p.b + nt * p.k_tiles * 512;
    for (int64_t m0 = 0; m0 < p.m; m0 += 4) {
      const int mb = int(std::min<int64_t>(4, p.m - m0));
      std::fill(tot, tot + 4 * kTileN, 0.f);
      for (int c0 = 0; c0 < kTileN; c0 += Lanes::kCols) {
        if (c0 >= cols) break;  // all-padding columns
        switch (mb) {
          case 4:
            block<4>(lanes, p, bt, sbuf.data(), zbuf.data(), correct, m0, c0,
                     tot);
            break;
          case 3:
            block<3>(lanes, p, bt, sbuf.data(), zbuf.data(), correct, m0, c0,
                     tot);
            break;
          case 2:
            block<2>(lanes, p, bt, sbuf.data(), zbuf.data(), correct, m0, c0,
                     tot);
            break;
          default:
            block<1>(lanes, p, bt, sbuf.data(), zbuf.data(), correct, m0, c0,
                     tot);
            break;
        }
      }
      store_rows<T>(p, tot, m0, mb, col0, cols);
    }
  }
}

}  // namespace

void MYOPS_CPU_ISA_FN(w4a16_gemm_tiles)(const W4A16CpuParams& p,
                                        int64_t nt_begin, int64_t nt_end) {
  if (p.dtype == DType::kBFloat16) {
#if defined(CPU_CAPABILITY_AVX512)
    // The host chose the path from the CPU's features (w4a16_kernels.cpp).
    switch (p.path) {
      case W4A16CpuPath::kBf16Rows:
        return tiles_bf16(p, nt_begin, nt_end);
      case W4A16CpuPath::kBf16Panel:
        return tiles_panel<false, c10::BFloat16>(p, nt_begin, nt_end);
      case W4A16CpuPath::kAmx:
        return tiles_panel<true, c10::BFloat16>(p, nt_begin, nt_end);
      default:
        break;
    }
#endif
    tiles<c10::BFloat16>(p, nt_begin, nt_end);
  } else {
#if defined(CPU_CAPABILITY_AVX512)
    if (p.path == W4A16CpuPath::kAmx)
      return tiles_panel<true, c10::Half>(p, nt_begin, nt_end);
#endif
    tiles<c10::Half>(p, nt_begin, nt_end);
  }
}

}  // namespace vllm_myops::cpu
