// SPDX-License-Identifier: Apache-2.0
//
// RMSNorm and fused-add RMSNorm on CUDA.
//
// The op reads and writes each element once (twice each for the fused add)
// and does almost no math, so the kernels are built around memory traffic:
//
// * A row is read from global memory once. It stays in registers between the
//   sum of squares and the output pass (every thread owns up to 8 16-byte
//   vectors of it); only rows too wide for that re-read it (from L2).
// * Every streaming access is a 16-byte vector, also for widths that are not
//   a multiple of the vector size: each row is split into a scalar head up to
//   the first 16-byte boundary of x, a body of aligned vectors, and a scalar
//   tail. out and residual, walked in step with x, use the widest access
//   their address phase relative to x allows (decided once per row); the
//   read-only weight is read as aligned 16-byte granules and funnel-shifted
//   into x's phase.
// * Narrow rows (<= 128 vectors) are reduced by 8, 16 or 32 lanes of a warp
//   with shuffles only; wider rows get a block per row and a block reduction
//   with a single __syncthreads.
// * Small batches are launch-latency bound. On sm_90+ the kernels use
//   programmatic dependent launch so back-to-back kernels overlap their
//   launch with the previous kernel's tail; VLLM_MYOPS_DISABLE_PDL=1 turns it
//   off (for A/B timing or debugging).
//
// Rounding follows vLLM (and the CPU kernels / vllm_myops.layernorm.reference):
//   out = T(T(x * rsqrt(mean(x^2) + eps)) * w), sums in fp32;
//   fused add normalises s = T(x + residual), the value stored to residual.

#include <cstdint>
#include <optional>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include "cuda/dispatch_utils.cuh"
#include "cuda/launch.cuh"
#include "cuda/reduction_utils.cuh"
#include "cuda/vectorized_access.cuh"
#include "layernorm/layernorm_args.h"
#include "layernorm/rms_norm_params.h"
#include "ops.h"

namespace vllm_myops {
namespace {

using cuda::allow_dependent_grids_to_launch;
using cuda::ceil_div;
using cuda::kWarpSize;
using cuda::LoadPath;
using cuda::Vec16;
using cuda::wait_for_prior_grids;

// ---- Kernel arguments -------------------------------------------------------

// RowLayout::offset with the division by inner_rows done by FastDivmod,
// exact for row < 2^31 (checked at launch): a 64-bit division per row would
// cost as much as all the other work of a narrow row (q/k norm over the heads
// of a fused qkv buffer).
struct RowAddressing {
  int64_t outer_stride = 0;
  int64_t inner_stride = 0;
  cuda::FastDivmod inner_rows;  // divisor 1: a single strided level

  __device__ __forceinline__ int64_t offset(int64_t row) const {
    if (inner_rows.divisor == 1) return row * outer_stride;
    const uint32_t r = static_cast<uint32_t>(row);
    const uint32_t outer = inner_rows.divide(r);
    return outer * outer_stride +
           static_cast<int64_t>(r - outer * inner_rows.divisor) * inner_stride;
  }
};

// RmsNormParams as the kernels read it.
struct RmsNormKernelArgs {
  void* out;
  RowAddressing out_rows;
  const void* in;
  RowAddressing in_rows;
  void* residual;  // nullptr unless fused add
  RowAddressing residual_rows;
  const void* weight;  // nullptr: no scale
  int64_t rows;
  int64_t width;
  float epsilon;
};

// ---- Row geometry -----------------------------------------------------------

enum class Variant {
  kOutOfPlace,  // rms_norm, result != input: x may use the read-only path
  kInPlace,     // rms_norm, result == input
  kFusedAdd,    // fused_add_rms_norm: in == out, residual read and written
};

template <Variant kVariant>
constexpr LoadPath kInputPath =
    kVariant == Variant::kOutOfPlace ? LoadPath::kReadOnly
                                     : LoadPath::kCoherent;

// A row of x as [head scalars | body_vecs 16-byte aligned vectors | tail
// scalars]. head and tail are each < 16 / sizeof(T) elements; together they
// are the row's "edge" elements, numbered head first.
template <typename Index>
struct RowSplit {
  int head = 0;
  Index body_vecs = 0;
  int tail = 0;

  __device__ __forceinline__ int num_edges() const { return head + tail; }

  template <int kVecElems>
  __device__ __forceinline__ int64_t edge_column(int e) const {
    return e < head ? e
                    : head + static_cast<int64_t>(body_vecs) * kVecElems +
                          (e - head);
  }
};

template <typename T, typename Index>
__device__ __forceinline__ RowSplit<Index> split_row(const T* x,
                                                     int64_t width) {
  constexpr int kVecElems = Vec16<T>::kElems;
  // Elements past the last 16-byte boundary (tensors are element aligned).
  const int phase = static_cast<int>(reinterpret_cast<uintptr_t>(x) & 15u) /
                    static_cast<int>(sizeof(T));
  int64_t head = phase == 0 ? 0 : kVecElems - phase;
  if (head > width) head = width;
  const int64_t rest = width - head;
  RowSplit<Index> s;
  s.head = static_cast<int>(head);
  s.body_vecs = static_cast<Index>(rest / kVecElems);
  s.tail = static_cast<int>(rest % kVecElems);
  return s;
}

// Edge elements a thread holds when a row is shared by at least
// min_threads_per_row threads: a row has at most 2 * (kVecElems - 1).
template <typename T>
constexpr int edge_slots(int min_threads_per_row) {
  return (2 * (Vec16<T>::kElems - 1) + min_threads_per_row - 1) /
         min_threads_per_row;
}

template <typename T>
struct RowPointers {
  const T* x;
  T* out;
  T* residual;      // nullptr unless fused add
  const T* weight;  // nullptr: no scale
};

template <typename T, Variant kVariant>
__device__ __forceinline__ RowPointers<T> row_pointers(
    const RmsNormKernelArgs& p, int64_t row) {
  RowPointers<T> r;
  r.x = static_cast<const T*>(p.in) + p.in_rows.offset(row);
  r.out = static_cast<T*>(p.out) + p.out_rows.offset(row);
  r.residual = kVariant == Variant::kFusedAdd
                   ? static_cast<T*>(p.residual) + p.residual_rows.offset(row)
                   : nullptr;
  r.weight = static_cast<const T*>(p.weight);
  return r;
}

// ---- Per-vector math --------------------------------------------------------

template <typename T>
__device__ __forceinline__ Vec16<T> zero_vec16() {
  return cuda::vec16_from_bits<T>(make_uint4(0, 0, 0, 0));
}

// T(a + b), the value fused add stores to residual and normalises.
template <typename T>
__device__ __forceinline__ Vec16<T> rounded_sum(const Vec16<T>& a,
                                                const Vec16<T>& b) {
  float fa[Vec16<T>::kElems], fb[Vec16<T>::kElems];
  cuda::vec16_to_floats(a, fa);
  cuda::vec16_to_floats(b, fb);
#pragma unroll
  for (int j = 0; j < Vec16<T>::kElems; ++j) fa[j] += fb[j];
  return cuda::vec16_from_floats<T>(fa);
}

template <typename T>
__device__ __forceinline__ float sum_of_squares(const Vec16<T>& v) {
  float f[Vec16<T>::kElems];
  cuda::vec16_to_floats(v, f);
  // Two chains halve the dependent-FMA latency on the small-batch path.
  float even = 0.f, odd = 0.f;
#pragma unroll
  for (int j = 0; j < Vec16<T>::kElems; j += 2) {
    even = fmaf(f[j], f[j], even);
    odd = fmaf(f[j + 1], f[j + 1], odd);
  }
  return even + odd;
}

// T(x * inv_rms), then T(that * w) when there is a weight: the normalised
// value is rounded to T before the weight multiply (vLLM / HF semantics).
template <typename T>
__device__ __forceinline__ Vec16<T> normalize(const Vec16<T>& x,
                                              float inv_rms) {
  float f[Vec16<T>::kElems];
  cuda::vec16_to_floats(x, f);
#pragma unroll
  for (int j = 0; j < Vec16<T>::kElems; ++j) f[j] *= inv_rms;
  return cuda::vec16_from_floats<T>(f);
}

template <typename T>
__device__ __forceinline__ Vec16<T> scale(const Vec16<T>& y,
                                          const Vec16<T>& w) {
  float fy[Vec16<T>::kElems], fw[Vec16<T>::kElems];
  cuda::vec16_to_floats(y, fy);
  cuda::vec16_to_floats(w, fw);
#pragma unroll
  for (int j = 0; j < Vec16<T>::kElems; ++j) fy[j] *= fw[j];
  return cuda::vec16_from_floats<T>(fy);
}

template <typename T>
__device__ __forceinline__ T normalize_element(T x, float inv_rms,
                                               bool has_weight, T w) {
  T y = cuda::from_float<T>(cuda::to_float(x) * inv_rms);
  if (has_weight)
    y = cuda::from_float<T>(cuda::to_float(y) * cuda::to_float(w));
  return y;
}

__device__ __forceinline__ float inverse_rms(float sumsq, int64_t width,
                                             float epsilon) {
  return rsqrtf(sumsq / static_cast<float>(width) + epsilon);
}

// ---- Row held in registers --------------------------------------------------
// One row is normalised by a group of `group_size` threads (part of a warp,
// or the whole block); thread `rank` owns body vectors rank + k * group_size
// and edge elements rank + s * group_size. Everything a thread will write is
// loaded first, so a row is fully read before any of it is written (in-place
// ops), and all loads of a thread are in flight together.
// group_sum(v) must return the sum of v over the group.

template <typename T, int kVecsPerThread, int kEdgeSlots, Variant kVariant,
          typename GroupSum>
__device__ __forceinline__ void rms_norm_row_in_registers(
    const RmsNormKernelArgs& p, int64_t row, bool row_active, int rank,
    int group_size, GroupSum&& group_sum) {
  using Vec = Vec16<T>;
  constexpr int kVecElems = Vec::kElems;
  constexpr int kMinAlign = sizeof(T);
  constexpr LoadPath kXPath = kInputPath<kVariant>;
  constexpr bool kFused = kVariant == Variant::kFusedAdd;

  const RowPointers<T> ptr = row_pointers<T, kVariant>(p, row);
  const RowSplit<int> split =
      row_active ? split_row<T, int>(ptr.x, p.width) : RowSplit<int>{};
  const int num_edges = split.num_edges();
  const T* x_body = ptr.x + split.head;  // 16-byte aligned

  auto body_index = [&](int k) { return rank + k * group_size; };
  auto edge_index = [&](int s) { return rank + s * group_size; };
  auto edge_column = [&](int e) {
    return split.template edge_column<kVecElems>(e);
  };

  // Everything above is arithmetic on kernel arguments, which may overlap
  // the previous kernel; memory is touched only after this.
  wait_for_prior_grids();

  // -- loads: x, residual, weight; all before the first use --
  Vec v[kVecsPerThread];
  T edge[kEdgeSlots];
#pragma unroll
  for (int k = 0; k < kVecsPerThread; ++k) {
    const int i = body_index(k);
    v[k] = i < split.body_vecs
               ? cuda::load_vec16<kXPath, 16>(x_body + i * kVecElems)
               : zero_vec16<T>();
  }
#pragma unroll
  for (int s = 0; s < kEdgeSlots; ++s) {
    const int e = edge_index(s);
    edge[s] = e < num_edges ? cuda::load_element<kXPath>(ptr.x + edge_column(e))
                            : cuda::from_float<T>(0.f);
  }

  Vec res[kFused ? kVecsPerThread : 1];
  T res_edge[kFused ? kEdgeSlots : 1];
  int res_align = 16;
  if constexpr (kFused) {
    res_align = cuda::relative_alignment(ptr.residual, ptr.x);
    const T* res_body = ptr.residual + split.head;
    cuda::with_alignment<kMinAlign>(res_align, [&](auto align) {
#pragma unroll
      for (int k = 0; k < kVecsPerThread; ++k) {
        const int i = body_index(k);
        res[k] = i < split.body_vecs
                     ? cuda::load_vec16<LoadPath::kCoherent, align.value>(
                           res_body + i * kVecElems)
                     : zero_vec16<T>();
      }
    });
#pragma unroll
    for (int s = 0; s < kEdgeSlots; ++s) {
      const int e = edge_index(s);
      res_edge[s] = e < num_edges ? cuda::load_element<LoadPath::kCoherent>(
                                        ptr.residual + edge_column(e))
                                  : cuda::from_float<T>(0.f);
    }
  }

  // Weight column c pairs with x column c, so the weight's 16-byte phase
  // relative to x is fixed per row; when it differs, each vector comes from
  // two aligned granule loads and a funnel shift (the weight is read-only and
  // L1-resident). Without a weight nothing is loaded (zeros).
  const bool has_weight = ptr.weight != nullptr;
  Vec w[kVecsPerThread];
  T w_edge[kEdgeSlots];
  auto load_weight = [&] {
    const int weight_vecs = has_weight ? split.body_vecs : 0;
    const int weight_edges = has_weight ? num_edges : 0;
    const cuda::GranuleCursor<T> w_body(ptr.weight + split.head);
    const T* weight_end = ptr.weight + p.width;
    cuda::with_granule_offset(w_body.byte_offset, [&](auto offset) {
#pragma unroll
      for (int k = 0; k < kVecsPerThread; ++k) {
        const int i = body_index(k);
        w[k] = i < weight_vecs
                   ? w_body.template load_bounded<LoadPath::kReadOnly>(
                         i, offset, weight_end)
                   : zero_vec16<T>();
      }
    });
#pragma unroll
    for (int s = 0; s < kEdgeSlots; ++s) {
      const int e = edge_index(s);
      w_edge[s] = e < weight_edges ? cuda::load_element<LoadPath::kReadOnly>(
                                         ptr.weight + edge_column(e))
                                   : cuda::from_float<T>(0.f);
    }
  };
  // x, residual and weight of 8 vectors per thread would need more than the
  // 128 registers a 512-thread block allows; the weight then waits for the
  // add and its latency overlaps the reduction instead.
  constexpr bool kLoadWeightWithInputs = !(kFused && kVecsPerThread >= 8);
  if constexpr (kLoadWeightWithInputs) load_weight();
  allow_dependent_grids_to_launch();

  // -- fused add: s = T(x + residual) replaces x and is stored to residual --
  if constexpr (kFused) {
#pragma unroll
    for (int k = 0; k < kVecsPerThread; ++k) v[k] = rounded_sum(v[k], res[k]);
#pragma unroll
    for (int s = 0; s < kEdgeSlots; ++s) {
      edge[s] = cuda::from_float<T>(cuda::to_float(edge[s]) +
                                    cuda::to_float(res_edge[s]));
    }
    T* res_body = ptr.residual + split.head;
    cuda::with_alignment<kMinAlign>(res_align, [&](auto align) {
#pragma unroll
      for (int k = 0; k < kVecsPerThread; ++k) {
        const int i = body_index(k);
        if (i < split.body_vecs) {
          cuda::store_vec16<align.value>(res_body + i * kVecElems, v[k]);
        }
      }
    });
#pragma unroll
    for (int s = 0; s < kEdgeSlots; ++s) {
      const int e = edge_index(s);
      if (e < num_edges) ptr.residual[edge_column(e)] = edge[s];
    }
  }

  if constexpr (!kLoadWeightWithInputs) load_weight();

  // -- reduction (slots that hold no data are zero) --
  float partial[kVecsPerThread];
#pragma unroll
  for (int k = 0; k < kVecsPerThread; ++k) partial[k] = sum_of_squares(v[k]);
#pragma unroll
  for (int stride = 1; stride < kVecsPerThread; stride *= 2) {
#pragma unroll
    for (int k = 0; k + stride < kVecsPerThread; k += 2 * stride) {
      partial[k] += partial[k + stride];
    }
  }
  float sumsq = partial[0];
#pragma unroll
  for (int s = 0; s < kEdgeSlots; ++s) {
    const float f = cuda::to_float(edge[s]);
    sumsq = fmaf(f, f, sumsq);
  }
  const float inv_rms = inverse_rms(group_sum(sumsq), p.width, p.epsilon);

  // -- output --
#pragma unroll
  for (int k = 0; k < kVecsPerThread; ++k) {
    v[k] = normalize(v[k], inv_rms);
    if (has_weight) v[k] = scale(v[k], w[k]);
  }
  T* out_body = ptr.out + split.head;
  cuda::with_alignment<kMinAlign>(
      cuda::relative_alignment(ptr.out, ptr.x), [&](auto align) {
#pragma unroll
        for (int k = 0; k < kVecsPerThread; ++k) {
          const int i = body_index(k);
          if (i < split.body_vecs) {
            cuda::store_vec16<align.value>(out_body + i * kVecElems, v[k]);
          }
        }
      });
#pragma unroll
  for (int s = 0; s < kEdgeSlots; ++s) {
    const int e = edge_index(s);
    if (e < num_edges) {
      const int64_t c = edge_column(e);
      ptr.out[c] = normalize_element(edge[s], inv_rms, has_weight, w_edge[s]);
    }
  }
}

// Rows of up to kLanesPerRow * kVecsPerThread vectors: kLanesPerRow (8, 16 or
// 32) lanes per row, 32 / kLanesPerRow rows per warp, blockDim.x / 32 warps
// per block; shuffle reduction only.
constexpr int kWarpRowsMaxThreads = 128;

template <typename T, int kLanesPerRow, int kVecsPerThread, Variant kVariant>
__global__ void __launch_bounds__(kWarpRowsMaxThreads)
    rms_norm_warp_rows_kernel(const RmsNormKernelArgs p) {
  const int rows_per_block = blockDim.x / kLanesPerRow;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * rows_per_block +
                      threadIdx.x / kLanesPerRow;
  // Lanes of rows past the end still join the shuffles (full-mask), with no
  // memory access.
  rms_norm_row_in_registers<T, kVecsPerThread, edge_slots<T>(kLanesPerRow),
                            kVariant>(
      p, row, row < p.rows, threadIdx.x % kLanesPerRow, kLanesPerRow,
      [](float v) { return cuda::warp_group_sum<kLanesPerRow>(v); });
}

// One row per block of blockDim.x <= kMaxThreads threads, each holding up to
// kVecsPerThread vectors.
template <typename T, int kVecsPerThread, int kMaxThreads, Variant kVariant>
__global__ void __launch_bounds__(kMaxThreads)
    rms_norm_block_row_kernel(const RmsNormKernelArgs p) {
  __shared__ cuda::BlockSumStorage<kMaxThreads> reduce_storage;
  rms_norm_row_in_registers<T, kVecsPerThread, edge_slots<T>(kWarpSize),
                            kVariant>(
      p, blockIdx.x, true, threadIdx.x, blockDim.x,
      [&](float v) { return cuda::block_sum(v, reduce_storage); });
}

// ---- Rows too wide for registers --------------------------------------------
// One row per block; a first pass accumulates the sum of squares (and stores
// the fused-add residual), a second pass re-reads the row (x, or the residual
// just written) from L2 and writes the output. Each thread revisits exactly
// the elements it handled in the first pass, so the second pass reads only
// this thread's own writes (ordinary coherent loads, no extra barrier).
constexpr int kLoopedRowThreads = 256;
// At least two blocks per SM, so one block's reduction barrier overlaps
// another block's loads.
constexpr int kLoopedRowMinBlocks = 2;
constexpr int kLoopedRowUnroll = 4;  // vectors per thread in flight per step

template <typename T, Variant kVariant>
__global__ void __launch_bounds__(kLoopedRowThreads, kLoopedRowMinBlocks)
    rms_norm_looped_row_kernel(const RmsNormKernelArgs p) {
  using Vec = Vec16<T>;
  constexpr int kVecElems = Vec::kElems;
  constexpr int kMinAlign = sizeof(T);
  constexpr int kUnroll = kLoopedRowUnroll;
  constexpr LoadPath kXPath = kInputPath<kVariant>;
  constexpr bool kFused = kVariant == Variant::kFusedAdd;
  static_assert(edge_slots<T>(kWarpSize) == 1);
  __shared__ cuda::BlockSumStorage<kLoopedRowThreads> reduce_storage;

  const RowPointers<T> ptr = row_pointers<T, kVariant>(p, blockIdx.x);
  const RowSplit<int64_t> split = split_row<T, int64_t>(ptr.x, p.width);
  const int64_t step = static_cast<int64_t>(kUnroll) * blockDim.x;
  const T* x_body = ptr.x + split.head;
  T* res_body = kFused ? ptr.residual + split.head : nullptr;
  const int res_align =
      kFused ? cuda::relative_alignment(ptr.residual, ptr.x) : 16;
  const int edge = threadIdx.x;  // edge element of this thread, if any
  const bool has_edge = edge < split.num_edges();
  const int64_t edge_col = split.template edge_column<kVecElems>(edge);

  wait_for_prior_grids();

  // -- pass 1: sum of squares (fused add: also residual = T(x + residual)) --
  float sumsq = 0.f;
  for (int64_t base = threadIdx.x; base < split.body_vecs; base += step) {
    Vec v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
      v[u] = i < split.body_vecs
                 ? cuda::load_vec16<kXPath, 16>(x_body + i * kVecElems)
                 : zero_vec16<T>();
    }
    if constexpr (kFused) {
      Vec r[kUnroll];
      cuda::with_alignment<kMinAlign>(res_align, [&](auto align) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
          r[u] = i < split.body_vecs
                     ? cuda::load_vec16<LoadPath::kCoherent, align.value>(
                           res_body + i * kVecElems)
                     : zero_vec16<T>();
        }
      });
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = rounded_sum(v[u], r[u]);
      cuda::with_alignment<kMinAlign>(res_align, [&](auto align) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
          if (i < split.body_vecs) {
            cuda::store_vec16<align.value>(res_body + i * kVecElems, v[u]);
          }
        }
      });
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) sumsq += sum_of_squares(v[u]);
  }
  if (has_edge) {
    T e = cuda::load_element<kXPath>(ptr.x + edge_col);
    if constexpr (kFused) {
      e = cuda::from_float<T>(
          cuda::to_float(e) +
          cuda::to_float(cuda::load_element<LoadPath::kCoherent>(ptr.residual +
                                                                 edge_col)));
      ptr.residual[edge_col] = e;
    }
    const float f = cuda::to_float(e);
    sumsq = fmaf(f, f, sumsq);
  }
  allow_dependent_grids_to_launch();
  const float inv_rms =
      inverse_rms(cuda::block_sum(sumsq, reduce_storage), p.width, p.epsilon);

  // -- pass 2: normalise what pass 1 read (fused add: the new residual, which
  // kXPath reads coherently) --
  const T* src = kFused ? ptr.residual : ptr.x;
  const T* src_body = src + split.head;
  const int src_align = kFused ? res_align : 16;
  const bool has_weight = ptr.weight != nullptr;
  const int64_t weight_vecs = has_weight ? split.body_vecs : 0;
  const int out_align = cuda::relative_alignment(ptr.out, ptr.x);
  T* out_body = ptr.out + split.head;
  const cuda::GranuleCursor<T> w_body(ptr.weight + split.head);
  for (int64_t base = threadIdx.x; base < split.body_vecs; base += step) {
    Vec v[kUnroll];
    Vec w[kUnroll];
    cuda::with_alignment<kMinAlign>(src_align, [&](auto align) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
        v[u] = i < split.body_vecs ? cuda::load_vec16<kXPath, align.value>(
                                         src_body + i * kVecElems)
                                   : zero_vec16<T>();
      }
    });
    cuda::with_granule_offset(w_body.byte_offset, [&](auto offset) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
        w[u] = i < weight_vecs
                   ? w_body.template load<LoadPath::kReadOnly>(i, offset)
                   : zero_vec16<T>();
      }
    });
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      v[u] = normalize(v[u], inv_rms);
      if (has_weight) v[u] = scale(v[u], w[u]);
    }
    cuda::with_alignment<kMinAlign>(out_align, [&](auto align) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
        if (i < split.body_vecs) {
          cuda::store_vec16<align.value>(out_body + i * kVecElems, v[u]);
        }
      }
    });
  }
  if (has_edge) {
    const T e = cuda::load_element<kXPath>(src + edge_col);
    const T w =
        has_weight
            ? cuda::load_element<LoadPath::kReadOnly>(ptr.weight + edge_col)
            : cuda::from_float<T>(0.f);
    ptr.out[edge_col] = normalize_element(e, inv_rms, has_weight, w);
  }
}

// ---- Host side --------------------------------------------------------------

RowAddressing make_row_addressing(const RowLayout& layout, int64_t rows) {
  RowAddressing a;
  a.outer_stride = layout.outer_stride;
  a.inner_stride = layout.inner_stride;
  if (layout.inner_rows > 1) {
    // The multiply-high division is exact for dividends below 2^31.
    TORCH_CHECK(rows <= INT32_MAX, "rms_norm: ", rows,
                " rows in a two-level strided layout are more than the CUDA "
                "kernels address (2^31 - 1); make the tensor contiguous");
    a.inner_rows =
        cuda::FastDivmod::make(static_cast<uint32_t>(layout.inner_rows));
  }
  return a;
}

RmsNormKernelArgs make_kernel_args(const RmsNormParams& p) {
  RmsNormKernelArgs args;
  args.out = p.out;
  args.out_rows = make_row_addressing(p.out_rows, p.rows);
  args.in = p.in;
  args.in_rows = make_row_addressing(p.in_rows, p.rows);
  args.residual = p.residual;
  args.residual_rows = p.residual != nullptr
                           ? make_row_addressing(p.residual_rows, p.rows)
                           : RowAddressing{};
  args.weight = p.weight;
  args.rows = p.rows;
  args.width = p.width;
  args.epsilon = p.epsilon;
  return args;
}

template <auto kKernel>
void launch_kernel(int64_t blocks, int threads, cudaStream_t stream,
                   const RmsNormKernelArgs& args) {
  TORCH_CHECK(blocks > 0 && blocks <= INT32_MAX, "rms_norm: ", args.rows,
              " rows of width ", args.width, " need ", blocks,
              " thread blocks, more than a CUDA grid holds");
  cuda::launch_with_pdl<kKernel>(static_cast<unsigned>(blocks), threads, stream,
                                 args);
}

template <typename T, int kLanesPerRow, int kVecsPerThread, Variant kVariant>
void launch_warp_rows(const RmsNormKernelArgs& args, cudaStream_t stream) {
  constexpr int kRowsPerWarp = kWarpSize / kLanesPerRow;
  const int64_t warps = ceil_div(args.rows, kRowsPerWarp);
  // Large batches get 4-warp blocks. Small ones get narrower blocks while
  // that spreads them over more SMs: their time is latency, and an SM's
  // load bandwidth is shared by the rows it holds.
  const int64_t min_blocks =
      2 * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  int warps_per_block = kWarpRowsMaxThreads / kWarpSize;
  while (warps_per_block > 1 && ceil_div(warps, warps_per_block) < min_blocks) {
    warps_per_block /= 2;
  }
  launch_kernel<
      rms_norm_warp_rows_kernel<T, kLanesPerRow, kVecsPerThread, kVariant>>(
      ceil_div(warps, warps_per_block), warps_per_block * kWarpSize, stream,
      args);
}

template <typename T, int kVecsPerThread, int kMaxThreads, Variant kVariant>
void launch_block_row(const RmsNormKernelArgs& args, int64_t row_vecs,
                      cudaStream_t stream) {
  const int64_t threads =
      ceil_div(ceil_div(row_vecs, kVecsPerThread), kWarpSize) * kWarpSize;
  TORCH_INTERNAL_ASSERT(threads > 0 && threads <= kMaxThreads);
  launch_kernel<
      rms_norm_block_row_kernel<T, kVecsPerThread, kMaxThreads, kVariant>>(
      args.rows, static_cast<int>(threads), stream, args);
}

// Picks the kernel by how many 16-byte vectors a row spans.
template <typename T, Variant kVariant>
void launch_typed(const RmsNormKernelArgs& args, cudaStream_t stream) {
  // Body vectors of a row, at most: the scalar edges take the rest.
  const int64_t row_vecs = args.width / Vec16<T>::kElems;
  if (row_vecs <= 8) return launch_warp_rows<T, 8, 1, kVariant>(args, stream);
  if (row_vecs <= 16) return launch_warp_rows<T, 16, 1, kVariant>(args, stream);
  if (row_vecs <= 32) return launch_warp_rows<T, 32, 1, kVariant>(args, stream);
  if (row_vecs <= 64) return launch_warp_rows<T, 32, 2, kVariant>(args, stream);
  if (row_vecs <= 128)
    return launch_warp_rows<T, 32, 4, kVariant>(args, stream);
  // Block per row: the fewest vectors per thread that fit in 128 threads,
  // then up to 512 threads of 8 vectors, except where a layout keeps more
  // rows resident per SM (docs/layernorm/design.md: v2, v4, v4b, v4c): an
  // SM holds 64K registers, so registers x threads per row sets how many
  // rows load at once.
  // * Fused add (three row-sized register arrays), 513-1024 vectors: 4
  //   vectors over up to 256 threads. Its 640-thread launch bound is
  //   deliberate: it caps the kernel's registers lower than a 256-thread
  //   bound would. Wider rows keep 8 vectors: 4 vectors would leave 1 row
  //   per SM.
  // * rms_norm in 16-bit types, 513-1024 vectors (e.g. widths 5120, 8192):
  //   up to 640 vectors as 5 per thread over 128 threads, wider rows as 4
  //   over up to 256 threads; both hold more rows per SM than 8 vectors.
  // The layout depends on the width alone, never on the number of rows, so a
  // row's result does not depend on the batch it is in.
  if (row_vecs <= 256)
    return launch_block_row<T, 2, 128, kVariant>(args, row_vecs, stream);
  if (row_vecs <= 512)
    return launch_block_row<T, 4, 128, kVariant>(args, row_vecs, stream);
  if constexpr (kVariant == Variant::kFusedAdd) {
    if (row_vecs <= 4 * 256)
      return launch_block_row<T, 4, 640, kVariant>(args, row_vecs, stream);
  } else if constexpr (sizeof(T) == 2) {
    if (row_vecs <= 5 * 128)
      return launch_block_row<T, 5, 128, kVariant>(args, row_vecs, stream);
    if (row_vecs <= 4 * 256)
      return launch_block_row<T, 4, 256, kVariant>(args, row_vecs, stream);
  }
  if (row_vecs <= 8 * 512) {
    return launch_block_row<T, 8, 512, kVariant>(args, row_vecs, stream);
  }
  launch_kernel<rms_norm_looped_row_kernel<T, kVariant>>(
      args.rows, kLoopedRowThreads, stream, args);
}

}  // namespace
}  // namespace vllm_myops

// Runs the launch described by `p` (filled by prepare_rms_norm /
// prepare_fused_add_rms_norm) on `stream`, which must belong to the current
// device. No allocation, no synchronisation: safe under CUDA graph capture.
void launch_rms_norm_cuda(const vllm_myops::RmsNormParams& p,
                          cudaStream_t stream) {
  using vllm_myops::Variant;
  if (p.rows == 0 || p.width == 0) return;
  const vllm_myops::RmsNormKernelArgs args = vllm_myops::make_kernel_args(p);
  const bool known_dtype =
      vllm_myops::cuda::dispatch_floating_dtype(p.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if (p.residual != nullptr) {
          vllm_myops::launch_typed<T, Variant::kFusedAdd>(args, stream);
        } else if (p.in == p.out) {
          vllm_myops::launch_typed<T, Variant::kInPlace>(args, stream);
        } else {
          vllm_myops::launch_typed<T, Variant::kOutOfPlace>(args, stream);
        }
      });
  TORCH_CHECK(known_dtype, "rms_norm: unsupported dtype id ",
              static_cast<int>(p.dtype));
}

// Arguments are checked first (a failing check leaves the current device
// untouched); the guard then makes input's device current for the launch and
// for finish()'s copy-backs.
void rms_norm_cuda(at::Tensor& result, const at::Tensor& input,
                   const std::optional<at::Tensor>& weight, double epsilon) {
  auto prepared = vllm_myops::prepare_rms_norm(result, input, weight, epsilon,
                                               c10::DeviceType::CUDA);
  const at::cuda::CUDAGuard device_guard(input.device());
  if (!prepared.empty()) {
    launch_rms_norm_cuda(prepared.params, at::cuda::getCurrentCUDAStream());
  }
  prepared.finish();
}

void fused_add_rms_norm_cuda(at::Tensor& input, at::Tensor& residual,
                             const std::optional<at::Tensor>& weight,
                             double epsilon) {
  auto prepared = vllm_myops::prepare_fused_add_rms_norm(
      input, residual, weight, epsilon, c10::DeviceType::CUDA);
  const at::cuda::CUDAGuard device_guard(input.device());
  if (!prepared.empty()) {
    launch_rms_norm_cuda(prepared.params, at::cuda::getCurrentCUDAStream());
  }
  prepared.finish();
}
