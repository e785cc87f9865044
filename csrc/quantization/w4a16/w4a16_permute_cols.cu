// SPDX-License-Identifier: Apache-2.0
//
// w4a16_permute_cols on CUDA: out[m, j] = a[m, perm[j]], a new contiguous
// [M, K] tensor. The act-order (GPTQ desc_act) column gather: the weight's
// rows were permuted at load so that its groups are contiguous
// (reference.act_order_perm), and each call gathers the activation's columns
// with the same permutation before w4a16_gemm. It is a 2-byte copy, so one
// kernel serves fp16 and bf16.
//
// A thread gathers 8 consecutive output columns: their 8 perm entries are
// read once and reused for every row the thread's block walks, and the 8
// gathered elements leave as one 16-byte store where out's rows allow it
// (K % 8 == 0). The reads of a are scattered inside a row (the permutation
// has no structure to exploit), a row at a time, so they hit L1 / L2.
// perm's values are clamped to [0, K): an invalid permutation gives
// unspecified values, never an out-of-bounds read (checking them would need
// a device-to-host copy per call).
// Launched with programmatic dependent launch (cuda/launch.cuh) where the
// device allows it: the kernel waits for the previous grid before reading a.

#include <algorithm>
#include <cstdint>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "cuda/launch.cuh"
#include "ops.h"
#include "quantization/w4a16/w4a16_args.h"

namespace vllm_myops {
namespace {

constexpr int kThreads = 256;
constexpr int kCols = 8;  // output columns per thread (one 16-byte store)

// Grid: col_blocks x row_groups blocks in one dimension (column block
// fastest); block (c, g) covers columns [c, c + 1) * kThreads * kCols of the
// rows g, g + row_groups, ...
__global__ void __launch_bounds__(kThreads)
    permute_cols_kernel(const uint16_t* __restrict__ a, int64_t s0, int64_t s1,
                        const int32_t* __restrict__ perm,
                        uint16_t* __restrict__ out, int64_t m, int k,
                        int col_blocks, int row_groups) {
  cuda::wait_for_prior_grids();
  cuda::allow_dependent_grids_to_launch();
  const int c = blockIdx.x % col_blocks;
  const int g = blockIdx.x / col_blocks;
  const int j0 = (c * kThreads + threadIdx.x) * kCols;
  if (j0 >= k) return;
  const int cols = min(kCols, k - j0);
  int64_t src[kCols];
#pragma unroll
  for (int i = 0; i < kCols; ++i) {
    const int col = i < cols ? __ldg(perm + j0 + i) : 0;
    src[i] = static_cast<int64_t>(min(max(col, 0), k - 1)) * s1;
  }
  const bool vec = cols == kCols && k % kCols == 0;
  for (int64_t r = g; r < m; r += row_groups) {
    const uint16_t* row = a + r * s0;
    uint16_t v[kCols];
#pragma unroll
    for (int i = 0; i < kCols; ++i) v[i] = i < cols ? __ldg(row + src[i]) : 0;
    uint16_t* dst = out + r * k + j0;
    if (vec) {
      uint4 w;
      w.x = v[0] | (uint32_t{v[1]} << 16);
      w.y = v[2] | (uint32_t{v[3]} << 16);
      w.z = v[4] | (uint32_t{v[5]} << 16);
      w.w = v[6] | (uint32_t{v[7]} << 16);
      *reinterpret_cast<uint4*>(dst) = w;
    } else {
      for (int i = 0; i < cols; ++i) dst[i] = v[i];
    }
  }
}

}  // namespace
}  // namespace vllm_myops

using namespace vllm_myops;

at::Tensor w4a16_permute_cols_cuda(const at::Tensor& a,
                                   const at::Tensor& perm) {
  w4a16::check_permute_cols_args(a, perm);
  const c10::cuda::CUDAGuard device_guard(a.device());
  const int64_t m = a.size(0), k = a.size(1);
  TORCH_CHECK(k < (int64_t{1} << 30), "w4a16_permute_cols: K must be < 2^30");
  at::Tensor out = at::empty({m, k}, a.options());
  if (m == 0 || k == 0) return out;
  // Enough blocks for ~4 per SM; rows beyond that are walked in a loop, so
  // each thread's perm entries serve several rows.
  const int col_blocks =
      static_cast<int>(w4a16::ceil_div(k, int64_t{kThreads} * kCols));
  const int64_t sms =
      at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int row_groups = static_cast<int>(std::clamp<int64_t>(
      w4a16::ceil_div(4 * sms, col_blocks), 1, std::min<int64_t>(m, 65535)));
  // a's strides as they are (any view); out is new and contiguous, so its
  // rows are 16-byte aligned when K % 8 == 0.
  vllm_myops::cuda::launch_with_pdl<permute_cols_kernel>(
      static_cast<unsigned>(col_blocks) * row_groups, kThreads,
      at::cuda::getCurrentCUDAStream(),
      reinterpret_cast<const uint16_t*>(a.data_ptr()), a.stride(0), a.stride(1),
      perm.data_ptr<int32_t>(), reinterpret_cast<uint16_t*>(out.data_ptr()), m,
      static_cast<int>(k), col_blocks, row_groups);
  return out;
}
