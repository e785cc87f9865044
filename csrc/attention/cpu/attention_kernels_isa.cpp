// SPDX-License-Identifier: Apache-2.0
// CPU paged attention, one work item at a time, compiled once per ISA
// (cpu/isa.h). attention_kernels.cpp splits a call into items and merges
// the partial results of a context split.
//
// A work item is (sequence, kv head, query rows [q_begin, q_end), context
// [kv_begin, kv_end)). Its R = rows x G query rows (G = H_q / H_kv, every
// query head of the kv head's group) share each K/V tile: the tile is
// gathered once through the block table (kTile tokens, from one or more
// blocks, never past kv_end so never past seq_len), converted to fp32 once
// (K only where the dot product needs fp32: not for bf16 with AVX512-BF16,
// where vdpbf16ps multiplies bf16 pairs exactly into fp32), and used by all
// R rows: GQA reuse is what makes decode cheaper than H_q passes over the
// cache.
//
// Per row and tile: scores s = (q . k) * scale * log2(e) (fp32), causal
// limit = the row's position (only tiles that reach past the first row's
// position mask anything), online softmax in the log2 domain (running max
// m, sum l; acc *= 2^(m_old - m_new) when the max grows), acc += p * v in
// fp32. The output is acc / l rounded once to the dtype.
//
// Vectorised (AVX-512): the dot products as 16 tokens x D (FMA or
// vdpbf16ps into 16 accumulators, then one transpose-add reduction gives
// the 16 scores in one vector), exp2 as a polynomial with vscalefps (exact
// underflow to 0), p * V as 4 rows x 64 columns of fp32 accumulators in
// registers per pass over the tile. AVX2 and the portable build use the
// plain loops below (the compiler vectorises the conversions and p * V).
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attention/cpu/attention_kernels_isa.h"
#include "cpu/isa.h"

#if defined(CPU_CAPABILITY_AVX512)
  #include <immintrin.h>
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
  }
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// ---------------------------------------------------------------------------
// Portable pieces (DEFAULT and AVX2 builds; the AVX-512 build replaces the
// hot ones below).
// ---------------------------------------------------------------------------
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

#if 1  // portable path (AVX-512 specialisation below)
// scores[t] = (q . k_t) * mul for t < n; K tile in fp32 (kf [n][d]).
void qk_row(const float* q, const uint16_t* /*q_half*/, const float* kf,
            const void* const* /*kp*/, int n, int64_t d, float mul,
            float* scores) {
  for (int t = 0; t < n; ++t) scores[t] = dot(q, kf + t * d, d) * mul;
}

// In place: scores -> 2^(scores - m_new) for t < n; returns m_new and adds
// the probabilities to `sum`.
float exp2_row(float* s, int n, float m_new, float& sum) {
  float total = 0.f;
  for (int t = 0; t < n; ++t) {
    s[t] = std::exp2(s[t] - m_new);
    total += s[t];
  }
  sum = total;
  return m_new;
}

float max_row(const float* s, int n) {
  float mx = kNegInf;
  for (int t = 0; t < n; ++t) mx = std::max(mx, s[t]);
  return mx;
}

// acc[r][:] += sum_t p[r][t] * vf[t][:] for t < valid[r], rows [0, R).
void pv_rows(const float* p, const int* valid, int rows, const float* vf,
             int64_t d, float* acc) {
  for (int r = 0; r < rows; ++r) {
    float* a = acc + r * d;
    const float* pr = p + r * kTile;
    for (int t = 0; t < valid[r]; ++t) {
      const float w = pr[t];
      const float* v = vf + t * d;
      for (int64_t i = 0; i < d; ++i) a[i] += w * v[i];
    }
  }
}

void scale_row(float* a, int64_t d, float c) {
  for (int64_t i = 0; i < d; ++i) a[i] *= c;
}

constexpr bool kKeyNeedsFloat = true;
#endif

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
    const int64_t i = r / g;
    const int64_t hq = w.kv_head * g + r % g;
    qr[r] = static_cast<const T*>(p.query) + (tok0 + i) * p.q_stride_t +
            hq * p.q_stride_h;
    to_float(qr[r], qf + r * d, d);
    m[r] = kNegInf;
    l[r] = 0.f;
  }
  std::fill(acc, acc + rows * d, 0.f);

  const void* kp[kTile];
  const int64_t first_pos = ctx0 + w.q_begin;  // row 0's position
  for (int64_t t0 = w.kv_begin; t0 < w.kv_end; t0 += kTile) {
    const int n = int(std::min<int64_t>(kTile, w.kv_end - t0));
    for (int t = 0; t < n; ++t) {
      const int64_t pos = t0 + t;
      kp[t] = cache + table[pos / bs] * block_stride + w.kv_head * head_stride +
              (pos % bs) * 2 * d;
    }
    if (kKeyNeedsFloat || p.dtype != DType::kBFloat16) {
      for (int t = 0; t < n; ++t)
        to_float(static_cast<const T*>(kp[t]), sc.kf.data() + t * d, d);
    }
    // Causal limit: row r sees positions <= first_pos + r / g.
    const bool masked = t0 + n - 1 > first_pos;
    bool any = false;
    for (int r = 0; r < rows; ++r) {
      int v = n;
      if (masked) {
        const int64_t lim = first_pos + r / g - t0 + 1;
        v = int(std::clamp<int64_t>(lim, 0, n));
      }
      valid[r] = v;
      if (v == 0) continue;
      any = true;
      float* sr = s + r * kTile;
      qk_row(qf + r * d, reinterpret_cast<const uint16_t*>(qr[r]), sc.kf.data(),
             kp, v, d, mul, sr);
      const float m_new = std::max(m[r], max_row(sr, v));
      float tile_sum;
      exp2_row(sr, v, m_new, tile_sum);
      if (m_new != m[r]) {
        const float corr = std::exp2(m[r] - m_new);  // 0 for the first tile
        scale_row(acc + r * d, d, corr);
        l[r] *= corr;
        m[r] = m_new;
      }
      l[r] += tile_sum;
    }
    if (!any) continue;
    for (int t = 0; t < n; ++t)
      to_float(static_cast<const T*>(kp[t]) + d, sc.vf.data() + t * d, d);
    pv_rows(s, valid, rows, sc.vf.data(), d, acc);
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
