// SPDX-License-Identifier: Apache-2.0
// The AVX-512 p . V pieces of the CPU paged attention kernel: fp32
// accumulators in registers over a tile (pv_rows), bf16 V as 32-bit pairs
// (pv_rows_pairs), and vdpbf16ps on bf16 p pairs (pv_rows_dot, forced
// only). Contracts: attention_kernels_isa.cpp.
// Include only from attention_kernels_isa.cpp (compiled once per ISA,
// cpu/isa.h); everything here has internal linkage.
#pragma once

// The AVX-512 build only: attention_avx512_qk.h checks it and brings the
// includes.
#include "attention/cpu/attention_avx512_qk.h"

namespace vllm_myops::cpu {
namespace {

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

}  // namespace
}  // namespace vllm_myops::cpu
