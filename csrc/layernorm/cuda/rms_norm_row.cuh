// SPDX-License-Identifier: Apache-2.0
//
// RMSNorm CUDA kernels: what every kernel takes and how it finds its row.
// RmsNormKernelArgs is RmsNormParams with each row layout's division by
// inner_rows turned into a FastDivmod (set up on the host,
// rms_norm_kernels.cu). Variant names the three ops the kernels are
// instantiated for. A row of x is split into a scalar head up to its first
// 16-byte boundary, a body of aligned 16-byte vectors and a scalar tail, so
// every body access of x is an aligned vector whatever the width.
#pragma once

#include <cstdint>

#include "cuda/launch.cuh"
#include "cuda/vectorized_access.cuh"

namespace vllm_myops::layernorm_cuda {

using cuda::LoadPath;
using cuda::Vec16;

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

}  // namespace vllm_myops::layernorm_cuda
