// SPDX-License-Identifier: Apache-2.0
// The CPU W4A16 kernel's panel paths (bf16 activations above the row
// block's M range): a chunk of an n-tile decoded once into a bf16 panel,
// then every row of a over it with vdpbf16ps or AMX tdpbf16ps.
// Include only from w4a16_kernels_isa.cpp (compiled once per ISA,
// cpu/isa.h); everything here has internal linkage.
#pragma once

// The AVX-512 build only: w4a16_avx512_rows.h checks it and brings the
// includes.
#include "quantization/w4a16/cpu/w4a16_avx512_rows.h"

namespace vllm_myops::cpu {
namespace {

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

}  // namespace
}  // namespace vllm_myops::cpu
