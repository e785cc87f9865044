// SPDX-License-Identifier: Apache-2.0
// AVX2 (+FMA, F16C) RMSNorm rows on the element traits of cpu/vec_avx2.h.
// Included only by rms_norm_kernels_isa.cpp in its AVX2 and AVX512 builds;
// everything here has internal linkage, so the copies compiled with different
// ISA flags never meet at link time.
//
// Per row: pass 1 reads the row (adding the residual and storing the rounded
// sum for the fused op) and accumulates the fp32 sum of squares; pass 2
// re-reads the row, now in L1/L2, scales, rounds to the dtype, multiplies by
// the weight, rounds again and stores. Rounding points and NaN/Inf behaviour
// are the contract of rms_norm_params.h / vllm_myops/layernorm/reference.py.
// The weight is loaded in the lane order of x, so every lane meets its own
// weight element whatever the permutation. Pass 2 is compute bound (two
// exact bf16 roundings per element, done with integer ops); the memory side
// is handled by prefetching the next row during pass 2 and by streaming
// stores for large rms_norm outputs.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/vec_avx2.h"
#include "layernorm/rms_norm_params.h"

namespace vllm_myops::cpu {
namespace {
namespace avx2 {

// Whether the weight is widened to fp32 once per task (bf16 only: no gain
// measured for fp16, whose vcvtph2ps with a memory operand is as cheap as a
// load; nothing to widen for fp32).
template <typename E>
constexpr bool kPrepareWeight = false;
template <>
constexpr bool kPrepareWeight<BF16> = true;

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
  // core overlap their latencies (K = 2; 1 and 4: docs/layernorm/log/).
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
// L2 next to the rows, and the bf16/fp16 weight is half the bytes). It
// saves 2 of ~29 vector ops per 16 bf16 elements (docs/layernorm/design.md,
// CPU kernel design).
constexpr int64_t kPrepWeightMinRows = 4;
constexpr int64_t kPrepWeightMaxWidth = int64_t{1} << 16;

// Rows [begin, end). kPf as in RowConfig: the next-row prefetch keeps memory
// busy while the compute-bound pass 2 runs (without it pass 1 waits on
// memory); prefetching into L1 (3) or L2 (2) measured alike. The weight is
// prepared when the task has enough rows, for the head of its first row
// (rows with another head, possible only for odd widths with streaming,
// widen it as they go).
template <typename E, bool kFused, bool kWeight, bool kStream,
          int kPf = kFused ? 3 : 2>
void rows_impl(const RmsNormParams& p, int64_t begin, int64_t end) {
  using T = typename E::T;
  using CPrep = RowConfig<kFused, kWeight, kStream, true, kPf>;
  using CNoPrep = RowConfig<kFused, kWeight, kStream, false, kPf>;
  constexpr bool kCanPrep = kWeight && kPrepareWeight<E>;
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
// last-level cache (a fixed figure: the cache size the OS reports cannot be
// trusted under virtualisation). Below that the
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
