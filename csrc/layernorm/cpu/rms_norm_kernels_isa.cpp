// SPDX-License-Identifier: Apache-2.0
// Vectorised CPU RMSNorm rows, compiled once per ISA (cpu/isa.h).
// The AVX2 and AVX512 builds run the intrinsics kernel of rms_norm_avx2.h;
// the DEFAULT build (any other CPU, and ATEN_CPU_CAPABILITY=default) runs the
// portable at::vec kernel below.
//
// Per row: one pass (optionally adding the residual and storing the rounded
// sum) accumulates the sum of squares in fp32, a second pass scales and
// stores. A row of a typical model (<= 32 KB) stays in L1/L2 between the two
// passes, so memory traffic is one read and one write per element (two of
// each for the fused add), which is what bounds this kernel.
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "cpu/isa.h"
#include "layernorm/cpu/rms_norm_kernels_isa.h"

#if defined(CPU_CAPABILITY_AVX2) || defined(CPU_CAPABILITY_AVX512)
  // The AVX512 build runs the 256-bit kernel too: no AVX-512 machine was
  // available to test a 512-bit variant on (where AVX512-BF16's
  // vcvtne2ps2bf16 would replace most of the bf16 rounding work).
  #include "layernorm/cpu/rms_norm_avx2.h"
  #define MYOPS_USE_AVX2_KERNEL 1
#endif

namespace vllm_myops::cpu {
namespace {

using at::vec::Vectorized;
using fVec = Vectorized<float>;

// Loads n (< full vector) or a full vector of scalar_t as two fp32 vectors.
// Reduced types (bf16/fp16) widen to two fp32 vectors of Vec::size()/2 each.
template <typename scalar_t>
struct Lanes {
  using Vec = Vectorized<scalar_t>;
  static constexpr int64_t kSize = Vec::size();

  static void load(const scalar_t* p, int64_t n, fVec& lo, fVec& hi) {
    const Vec v = n == kSize ? Vec::loadu(p) : Vec::loadu(p, n);
    std::tie(lo, hi) = at::vec::convert_to_float<scalar_t>(v);
  }
  static void store(scalar_t* p, int64_t n, const fVec& lo, const fVec& hi) {
    const Vec v = at::vec::convert_from_float<scalar_t>(lo, hi);
    if (n == kSize) {
      v.store(p);
    } else {
      v.store(p, n);
    }
  }
  // Rounds to scalar_t and back, as storing and reloading would.
  static void round(fVec& lo, fVec& hi) {
    std::tie(lo, hi) = at::vec::convert_to_float<scalar_t>(
        at::vec::convert_from_float<scalar_t>(lo, hi));
  }
};

template <>
struct Lanes<float> {
  static constexpr int64_t kSize = 2 * fVec::size();

  static void load(const float* p, int64_t n, fVec& lo, fVec& hi) {
    constexpr int64_t half = fVec::size();
    if (n == kSize) {
      lo = fVec::loadu(p);
      hi = fVec::loadu(p + half);
    } else {
      lo = n >= half ? fVec::loadu(p) : fVec::loadu(p, n);
      hi = n > half ? fVec::loadu(p + half, n - half) : fVec(0.f);
    }
  }
  static void store(float* p, int64_t n, const fVec& lo, const fVec& hi) {
    constexpr int64_t half = fVec::size();
    if (n == kSize) {
      lo.store(p);
      hi.store(p + half);
    } else {
      lo.store(p, n >= half ? half : n);
      if (n > half) hi.store(p + half, n - half);
    }
  }
  static void round(fVec&, fVec&) {}
};

template <typename scalar_t>
void rms_norm_rows(const RmsNormParams& p, int64_t begin, int64_t end) {
  using L = Lanes<scalar_t>;
  constexpr int64_t kStep = L::kSize;
  const int64_t width = p.width;
  const auto* weight = static_cast<const scalar_t*>(p.weight);
  const auto* in_base = static_cast<const scalar_t*>(p.in);
  auto* out_base = static_cast<scalar_t*>(p.out);
  auto* res_base = static_cast<scalar_t*>(p.residual);

  for (int64_t row = begin; row < end; ++row) {
    const scalar_t* x = in_base + p.in_rows.offset(row);
    scalar_t* y = out_base + p.out_rows.offset(row);
    scalar_t* res = res_base ? res_base + p.residual_rows.offset(row) : nullptr;

    // Pass 1: sum of squares in fp32 (two accumulators per half hide the
    // FMA latency); the fused add stores the rounded sum first and squares
    // the rounded value, as the kernel's contract says.
    fVec acc_lo(0.f), acc_hi(0.f);
    for (int64_t j = 0; j < width; j += kStep) {
      const int64_t n = std::min(kStep, width - j);
      fVec lo, hi;
      L::load(x + j, n, lo, hi);
      if (res) {
        fVec r_lo, r_hi;
        L::load(res + j, n, r_lo, r_hi);
        lo = lo + r_lo;
        hi = hi + r_hi;
        L::store(res + j, n, lo, hi);
        L::round(lo, hi);
      }
      // Partial loads zero-fill the missing lanes, so they add nothing.
      acc_lo = at::vec::fmadd(lo, lo, acc_lo);
      acc_hi = at::vec::fmadd(hi, hi, acc_hi);
    }
    const float sum_sq = at::vec::vec_reduce_all<float>(
        [](const fVec& a, const fVec& b) { return a + b; }, acc_lo + acc_hi);
    const float inv_rms =
        1.f / std::sqrt(sum_sq / static_cast<float>(width) + p.epsilon);
    const fVec scale(inv_rms);

    // Pass 2: normalise (from the stored sum for the fused add), round to
    // the dtype, then apply the weight and round again (vLLM's contract).
    const scalar_t* src = res ? res : x;
    for (int64_t j = 0; j < width; j += kStep) {
      const int64_t n = std::min(kStep, width - j);
      fVec lo, hi;
      L::load(src + j, n, lo, hi);
      lo = lo * scale;
      hi = hi * scale;
      if (weight) {
        L::round(lo, hi);
        fVec w_lo, w_hi;
        L::load(weight + j, n, w_lo, w_hi);
        lo = lo * w_lo;
        hi = hi * w_hi;
      }
      L::store(y + j, n, lo, hi);
    }
  }
}

}  // namespace

void MYOPS_CPU_ISA_FN(rms_norm_rows)(const RmsNormParams& p, int64_t begin,
                                     int64_t end) {
#if defined(MYOPS_USE_AVX2_KERNEL)
  avx2::rms_norm_rows(p, begin, end);
#else
  switch (p.dtype) {
    case DType::kFloat32:
      return rms_norm_rows<float>(p, begin, end);
    case DType::kFloat16:
      return rms_norm_rows<c10::Half>(p, begin, end);
    case DType::kBFloat16:
      return rms_norm_rows<c10::BFloat16>(p, begin, end);
  }
#endif
}

}  // namespace vllm_myops::cpu
