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
// AVX2: the portable pieces (attention_portable.h) with 8-lane bodies for
// q . k (8 tokens, one accumulator each, a transpose-add), the softmax (exp2
// as a polynomial) and p * V (a row's 64 columns in registers across the
// tile); the portable build keeps the plain loops.
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
#include "attention/cpu/attention_tile.h"
#include "cpu/isa.h"

#if defined(CPU_CAPABILITY_AVX512)
  #include <immintrin.h>

  #include "attention/cpu/attention_avx512_pv.h"
  #include "attention/cpu/attention_avx512_qk.h"
#else
  #include "attention/cpu/attention_portable.h"
#endif

namespace vllm_myops::cpu {
namespace {

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
// The pieces run_item is built from: attention_portable.h (DEFAULT and
// AVX2 builds; AVX2 bodies where they pay), attention_avx512_qk.h and
// attention_avx512_pv.h (AVX-512), each with the same names and contracts.
//   to_float(src, dst, n)        n elements of T -> fp32
//   key_needs_float(p)           whether qk_row reads the fp32 K tile
//   qk_row(...)                  s[t] = (q . k_t) * mul, t < v; s[t] = -inf
//                                for v <= t < kTile
//   softmax_row(s, m, l, acc, d) online softmax update of one row over the
//                                tile's kTile scores (-inf ones give p = 0):
//                                s becomes p
//   pv_rows(p, valid, rows, vf, d, acc)  acc[r] += sum_t p[r][t] * v_t
// ---------------------------------------------------------------------------

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
