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
//
// Code: the kernels and their device code are in layernorm/cuda/:
// rms_norm_row.cuh (kernel arguments, the op variants, row geometry),
// rms_norm_math.cuh (per-vector math), rms_norm_register_row.cuh (rows held
// in registers: the warp-rows and block-row kernels) and
// rms_norm_looped_row.cuh (rows too wide for registers). This file is the
// host side: the kernel arguments from RmsNormParams, the choice of kernel
// for a width, the launch, and the torch entry points.

#include <cstdint>
#include <optional>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include "cuda/dispatch_utils.cuh"
#include "cuda/launch.cuh"
#include "cuda/reduction_utils.cuh"
#include "cuda/vectorized_access.cuh"
#include "layernorm/cuda/rms_norm_looped_row.cuh"
#include "layernorm/cuda/rms_norm_register_row.cuh"
#include "layernorm/cuda/rms_norm_row.cuh"
#include "layernorm/layernorm_args.h"
#include "layernorm/rms_norm_params.h"
#include "ops.h"

namespace vllm_myops {
namespace {

using namespace layernorm_cuda;
using cuda::ceil_div;
using cuda::kWarpSize;
using cuda::Vec16;

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
  using vllm_myops::layernorm_cuda::Variant;
  if (p.rows == 0 || p.width == 0) return;
  const vllm_myops::layernorm_cuda::RmsNormKernelArgs args =
      vllm_myops::make_kernel_args(p);
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
