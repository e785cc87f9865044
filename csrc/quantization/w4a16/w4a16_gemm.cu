// SPDX-License-Identifier: Apache-2.0
//
// w4a16_gemm on CUDA (sm_80+): out[M, N] = a[M, K] @ dequant(W)[K, N] + bias,
// dequant W = (q - z) * s per group of K rows, fp32 accumulation.
// This file holds the launchers and the torch entry; the pieces it runs:
//   cuda/w4a16_plan.cuh           the path by M, the forced values of
//                                 VLLM_MYOPS_W4A16_CUDA_PATH, split-K choice
//   cuda/w4a16_layout.cuh         the b_packed tile layout (w4a16_repack.cu)
//   cuda/w4a16_mma_common.cuh     lop3 dequant, GemmArgs, scales / zeros
//   cuda/w4a16_decode_common.cuh  block shape, A loads, block store
//   cuda/w4a16_swap_decode.cuh    w4a16_swap_kernel ("swap", M <= 8)
//   cuda/w4a16_ring_decode.cuh    w4a16_decode_kernel ("ring4", M <= 16)
//   cuda/w4a16_tc_gemm.cuh        w4a16_tc_kernel ("tc", M < 160)
//   cuda/w4a16_dequant.cuh        w4a16_dequant_kernel (then cuBLAS)
//   cuda/w4a16_splitk_reduce.cuh  the split-K second pass
//   cuda/w4a16_wgmma.h            the Hopper kernel ("wgmma_tma"; its code is
//                                 csrc/sm90a/w4a16_wgmma_tma.cu, sm_90a only)
//
// Weight layout: b_packed tiles as arranged by w4a16_repack.cu
// (cuda/w4a16_layout.cuh): a warp's 16-byte load of k16 step s of a tile is
// exactly the 4 words holding its mma.sync m16n8k16 B fragments for the 8
// n8 blocks of that step, so B goes from global memory to registers (or
// through a per-warp cp.async ring in shared memory) with no ldmatrix for B,
// read once, coalesced.
//
// Dequant in registers (Marlin's lop3 trick): (q >> 4r) & 0x000f000f | EX
// puts two codes into the mantissas of a half2 / bfloat162 whose value is
// base + q (EX = 1024.0 for fp16, 128.0 for bf16; exact). Then
// (x - (base + z)) is the exact small integer q - z and one multiply by s
// rounds W = (q - z) * s to a's dtype before the mma (the contract allows
// it; the CPU kernel and the reference keep fp32). The dequant kernel of
// the cuBLAS path rounds the same value the same way; the swap kernel
// applies s and z per group to fp32 sums instead.
//
// Edges: A rows >= M and columns >= K load as 0 (the padded codes are 0 but
// (0 - z) * s is not, so A must be zero there); group indices are clamped to
// G - 1 for the padding rows; stores past M / N are skipped.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/launch.cuh"
#include "ops.h"
#include "quantization/w4a16/cuda/w4a16_decode_common.cuh"
#include "quantization/w4a16/cuda/w4a16_dequant.cuh"
#include "quantization/w4a16/cuda/w4a16_layout.cuh"
#include "quantization/w4a16/cuda/w4a16_mma_common.cuh"
#include "quantization/w4a16/cuda/w4a16_plan.cuh"
#include "quantization/w4a16/cuda/w4a16_ring_decode.cuh"
#include "quantization/w4a16/cuda/w4a16_splitk_reduce.cuh"
#include "quantization/w4a16/cuda/w4a16_swap_decode.cuh"
#include "quantization/w4a16/cuda/w4a16_tc_gemm.cuh"
#include "quantization/w4a16/cuda/w4a16_wgmma.h"
#include "quantization/w4a16/w4a16_args.h"

namespace vllm_myops {
namespace {

namespace layout = w4a16::cuda_layout;
using namespace w4a16::plan;  // paths, split-K choice, tc builds
using w4a16::decode::kDecodeSplitStages;
using w4a16::decode::kSwapStages;
using w4a16::decode::kThreads;
using w4a16::decode::kWarps;
using w4a16::decode::w4a16_decode_kernel;
using w4a16::decode::w4a16_swap_kernel;
using w4a16::dequant::kDequantThreads;
using w4a16::dequant::w4a16_dequant_kernel;
using w4a16::dev::GemmArgs;
using w4a16::splitk::w4a16_splitk_reduce_kernel;

// ---- The decode kernels (swap, ring4) ---------------------------------------

// One tensor-core kernel as run_gemm launches it.
struct GemmKernel {
  void (*kernel)(GemmArgs);
  int rows_per_block;  // M rows of one block
  int stages;          // k-tiles per warp in flight (sizes the K splits)
  int blocks_per_sm;   // resident blocks per SM (sizes the K splits)
};

// Resident blocks of kKernel per SM (asked once per kernel; the process
// drives one kind of GPU).
template <auto kKernel>
int blocks_per_sm() {
  static const int blocks = cuda::resident_blocks<kKernel>(kThreads, 0);
  return blocks;
}

template <auto kKernel>
GemmKernel gemm_kernel(int rows_per_block, int stages) {
  return {kKernel, rows_per_block, stages, blocks_per_sm<kKernel>()};
}

template <typename T, bool kActRing>
GemmKernel swap_gemm_kernel(bool two_groups) {
  return two_groups
             ? gemm_kernel<w4a16_swap_kernel<T, kSwapStages, true, kActRing>>(
                   8, kSwapStages)
             : gemm_kernel<w4a16_swap_kernel<T, kSwapStages, false, kActRing>>(
                   8, kSwapStages);
}

// act_ring: a's rows can go through the swap kernel's cp.async ring.
template <typename T>
GemmKernel gemm_kernel_for(CudaPath path, int group_rows, bool act_ring) {
  const bool two_groups = group_rows < layout::kTileK;
  switch (path) {
    case CudaPath::kRing4:
      return gemm_kernel<w4a16_decode_kernel<T>>(16, kDecodeSplitStages);
    case CudaPath::kSwapGlobal:
      return swap_gemm_kernel<T, false>(two_groups);
    default:  // kSwap
      return act_ring ? swap_gemm_kernel<T, true>(two_groups)
                      : swap_gemm_kernel<T, false>(two_groups);
  }
}

// Rows of `a` as 16-byte copies: every 8-element chunk of a row aligned,
// inside K or past it (k >= K must read 0, so K % 8 == 0). The swap kernel's
// activation ring and the tc kernel's cp.async path need it.
bool a_rows_copy16(const void* a, int64_t a_stride, int64_t k) {
  return reinterpret_cast<uintptr_t>(a) % 16 == 0 && a_stride % 8 == 0 &&
         k % 8 == 0;
}

// The launch description every GEMM kernel takes (out / workspace set by
// the caller). An M = 1 row's stride is K (any view of one row).
GemmArgs gemm_args(const at::Tensor& a, const at::Tensor& b_packed,
                   const at::Tensor& scales,
                   const std::optional<at::Tensor>& zeros,
                   const std::optional<at::Tensor>& bias,
                   const w4a16::GemmShape& shape, int group_rows, int k_tiles,
                   int kt_per_split, int splits) {
  GemmArgs args{};
  args.a = a.data_ptr();
  args.a_stride = shape.m > 1 ? a.stride(0) : shape.k;
  args.b = reinterpret_cast<const uint4*>(b_packed.data_ptr<int32_t>());
  args.scales = scales.data_ptr();
  args.zeros = zeros.has_value() ? zeros->data_ptr() : nullptr;
  args.bias = bias.has_value() ? bias->data_ptr() : nullptr;
  args.m = static_cast<int>(shape.m);
  args.k = static_cast<int>(shape.k);
  args.n = static_cast<int>(shape.n);
  args.group_size = group_rows;
  args.groups = static_cast<int>(shape.groups);
  args.k_tiles = k_tiles;
  args.kt_per_split = kt_per_split;
  args.splits = splits;
  args.a_aligned4 =
      reinterpret_cast<uintptr_t>(args.a) % 4 == 0 && args.a_stride % 2 == 0;
  args.a_aligned16 = a_rows_copy16(args.a, args.a_stride, shape.k);
  return args;
}

// The split-K second pass: out = T(sum of the splits' fp32 workspace slices
// in split order + bias).
template <typename T>
void reduce_splits(const GemmArgs& args, at::Tensor& out, cudaStream_t stream) {
  const int64_t mn = static_cast<int64_t>(args.m) * args.n;
  constexpr int kReduceThreads = 256;
  const int64_t blocks =
      std::min<int64_t>(w4a16::ceil_div(mn, kReduceThreads), int64_t{1} << 16);
  w4a16_splitk_reduce_kernel<T>
      <<<static_cast<unsigned>(blocks), kReduceThreads, 0, stream>>>(
          args.workspace, static_cast<const T*>(args.bias),
          static_cast<T*>(out.data_ptr()), mn, args.n, args.splits);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// A launch with `splits` K splits (as chosen; made so that none is empty):
// its description, writing to `out` itself, or with more than one split to
// a new fp32 workspace [splits, M, N] that the caller reduces (kept alive
// here until the reduce is enqueued).
struct SplitLaunch {
  GemmArgs args;
  at::Tensor workspace;
};

SplitLaunch split_launch(const at::Tensor& a, const at::Tensor& b_packed,
                         const at::Tensor& scales,
                         const std::optional<at::Tensor>& zeros,
                         const std::optional<at::Tensor>& bias,
                         const w4a16::GemmShape& shape, int group_rows,
                         int splits, at::Tensor& out) {
  const int k_tiles = static_cast<int>(shape.k_tiles);
  const int kt_per_split = (k_tiles + splits - 1) / splits;
  splits = (k_tiles + kt_per_split - 1) / kt_per_split;  // none empty
  SplitLaunch l{gemm_args(a, b_packed, scales, zeros, bias, shape, group_rows,
                          k_tiles, kt_per_split, splits),
                at::Tensor()};
  if (splits == 1) {
    l.args.out = out.data_ptr();
  } else {
    l.workspace =
        at::empty({splits, shape.m, shape.n}, a.options().dtype(at::kFloat));
    l.args.workspace = l.workspace.data_ptr<float>();
  }
  return l;
}

template <typename T>
void run_gemm(const at::Tensor& a, const at::Tensor& b_packed,
              const at::Tensor& scales, const std::optional<at::Tensor>& zeros,
              const std::optional<at::Tensor>& bias,
              const w4a16::GemmShape& shape, int group_rows, CudaPath path,
              at::Tensor& out) {
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int m = static_cast<int>(shape.m);
  const int64_t a_stride = m > 1 ? a.stride(0) : shape.k;
  const bool act_ring = a_rows_copy16(a.data_ptr(), a_stride, shape.k);
  const GemmKernel kern = gemm_kernel_for<T>(path, group_rows, act_ring);
  const int m_blocks = (m + kern.rows_per_block - 1) / kern.rows_per_block;
  const int n_tiles = static_cast<int>(shape.n_tiles);
  const int k_tiles = static_cast<int>(shape.k_tiles);
  TORCH_CHECK(n_tiles <= 65535,
              "w4a16_gemm: size_n must be <= ", 65535 * w4a16::kTile,
              " on CUDA (one grid row per 64 columns)");

  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t slots = static_cast<int64_t>(sms) * kern.blocks_per_sm;
  const int splits = choose_splits(static_cast<int64_t>(n_tiles) * m_blocks,
                                   k_tiles, slots, kWarps * kern.stages);
  const SplitLaunch l = split_launch(a, b_packed, scales, zeros, bias, shape,
                                     group_rows, splits, out);
  const dim3 grid(m_blocks, n_tiles, l.args.splits);
  kern.kernel<<<grid, kThreads, 0, stream>>>(l.args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (l.args.splits > 1) reduce_splits<T>(l.args, out, stream);
}

// ---- The tc path (cuda/w4a16_tc_gemm.cuh; builds: cuda/w4a16_plan.cuh) ---
template <typename T, class C, int kMinBlocks>
TcKernel tc_kernel() {
  constexpr auto kKernel = w4a16::tc_gemm::w4a16_tc_kernel<T, C, kMinBlocks>;
  cuda::allow_dynamic_smem<kKernel>(C::kSmemBytes);
  static const int blocks =
      cuda::resident_blocks<kKernel>(C::kThreads, C::kSmemBytes);
  return {kKernel,       C::kBM, C::kBN,    C::kThreads,
          C::kSmemBytes, blocks, C::kStages};
}

template <typename T>
void run_tc_gemm(const at::Tensor& a, const at::Tensor& b_packed,
                 const at::Tensor& scales,
                 const std::optional<at::Tensor>& zeros,
                 const std::optional<at::Tensor>& bias,
                 const w4a16::GemmShape& shape, int group_rows, TcBuild build,
                 at::Tensor& out) {
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int m = static_cast<int>(shape.m);
  const int n_tiles = static_cast<int>(shape.n_tiles);
  const int k_tiles = static_cast<int>(shape.k_tiles);
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  // All builds have 256-column blocks.
  const int n_blocks = static_cast<int>(w4a16::ceil_div(n_tiles, 4));
  static_assert(
      TcSmall::kBN == 256 && TcLarge::kBN == 256 && TcLarge8::kBN == 256,
      "256-column blocks");
  TORCH_CHECK(n_blocks <= 65535, "w4a16_gemm: size_n must be <= ", 65535 * 256,
              " on the CUDA tc path (one grid row per 256 columns)");
  const auto plan_for = [&](const TcKernel& kern) {
    const int64_t m_blocks = w4a16::ceil_div(m, kern.bm);
    return choose_tc_splits(kern, n_blocks * m_blocks, k_tiles, sms,
                            shape.m * shape.n);
  };
  TcKernel kern;
  TcPlan plan;
  if (build == TcBuild::kLarge8) {
    kern = tc_kernel<T, TcLarge8, kTcLarge8MinBlocks>();
    plan = plan_for(kern);
  } else if (build == TcBuild::kAuto && m <= kTcSmallMaxM) {
    kern = tc_kernel<T, TcSmall, kTcSmallMinBlocks>();
    plan = plan_for(kern);
  } else {
    kern = tc_kernel<T, TcLarge, kTcLargeMinBlocks>();
    plan = plan_for(kern);
    if (build == TcBuild::kAuto) {
      const TcKernel kern8 = tc_kernel<T, TcLarge8, kTcLarge8MinBlocks>();
      const TcPlan plan8 = plan_for(kern8);
      if (plan8.us < kTcLarge8Margin * plan.us) {
        kern = kern8;
        plan = plan8;
      }
    }
  }
  const int m_blocks = (m + kern.bm - 1) / kern.bm;
  const SplitLaunch l = split_launch(a, b_packed, scales, zeros, bias, shape,
                                     group_rows, plan.splits, out);
  const dim3 grid(m_blocks, n_blocks, l.args.splits);
  kern.kernel<<<grid, kern.threads, kern.smem_bytes, stream>>>(l.args);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (l.args.splits > 1) reduce_splits<T>(l.args, out, stream);
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// ---- The Hopper path (cuda/w4a16_wgmma.h) -----------------------------------
// Whether "auto" may take it: the sm_90a kernels run here and N is within
// the grid's column blocks (the limit run_wgmma_gemm checks).
bool wgmma_available(const w4a16::GemmShape& shape) {
  return cuda::sm90a_kernels_run_here() &&
         w4a16::ceil_div(shape.n_tiles, w4a16::wgmma::kWarpgroups) <= 65535;
}

// K splits by choose_wgmma_splits: only a grid under one wave is split, at
// least one pipeline of k-tiles per split, the workspace kept small. The
// activation's tensor map needs a 16-byte aligned base and a row stride of a
// multiple of 8 elements; other rows go through a copy that has them (M x K
// elements, small beside W).
template <typename T>
void run_wgmma_gemm(const at::Tensor& a, const at::Tensor& b_packed,
                    const at::Tensor& scales,
                    const std::optional<at::Tensor>& zeros,
                    const std::optional<at::Tensor>& bias,
                    const w4a16::GemmShape& shape, int group_rows,
                    at::Tensor& out) {
#if defined(VLLM_MYOPS_WITH_SM90A)
  namespace wg = w4a16::wgmma;
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  TORCH_CHECK(prop->major == 9 && prop->minor == 0,
              "w4a16_gemm: VLLM_MYOPS_W4A16_CUDA_PATH=wgmma_tma needs a GPU "
              "of compute capability 9.0 (this one is ",
              prop->major, ".", prop->minor, ")");
  constexpr bool kHalf = std::is_same_v<T, __half>;
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int64_t token_tiles = w4a16::ceil_div(shape.m, wg::token_tile(shape.m));
  const int64_t col_blocks = w4a16::ceil_div(shape.n_tiles, wg::kWarpgroups);
  TORCH_CHECK(col_blocks <= 65535,
              "w4a16_gemm: size_n must be <= ", 65535 * wg::kBlockN,
              " on the CUDA wgmma path (one grid row per ", wg::kBlockN,
              " columns)");
  at::Tensor a_in = a;
  const int64_t stride = shape.m > 1 ? a.stride(0) : shape.k;
  if (!aligned16(a.data_ptr()) || stride % 8 != 0) {
    const int64_t k8 = w4a16::ceil_div(shape.k, 8) * 8;
    a_in = at::empty({shape.m, k8}, a.options()).narrow(1, 0, shape.k);
    a_in.copy_(a);
  }
  const int k_tiles = static_cast<int>(shape.k_tiles);
  const int64_t slots = static_cast<int64_t>(prop->multiProcessorCount) *
                        wg::resident_blocks(shape.m, kHalf);
  const int splits =
      choose_wgmma_splits(token_tiles * col_blocks, k_tiles, slots,
                          wg::stages(shape.m), shape.m * shape.n);
  SplitLaunch l = split_launch(a_in, b_packed, scales, zeros, bias, shape,
                               group_rows, splits, out);
  // One row: gemm_args gives it stride K, which the map never follows but
  // must accept; K rounded up to 8 is K itself unless a_in is the copy,
  // whose stride it is.
  if (shape.m == 1) l.args.a_stride = w4a16::ceil_div(shape.k, 8) * 8;
  wg::launch(l.args, kHalf, stream);
  if (l.args.splits > 1) reduce_splits<T>(l.args, out, stream);
#else
  TORCH_CHECK(false,
              "w4a16_gemm: VLLM_MYOPS_W4A16_CUDA_PATH=wgmma_tma needs the "
              "sm_90a kernels, which this build does not have (CUDA_ARCHS "
              "must include 9.0)");
#endif
}

// ---- The dequant path (cuda/w4a16_dequant.cuh, then cuBLAS) ----------------

// Dequantizes the whole weight into w [K, N] (a's dtype) on `stream`.
template <typename T>
void launch_dequant(const at::Tensor& b_packed, const at::Tensor& scales,
                    const std::optional<at::Tensor>& zeros,
                    const w4a16::GemmShape& shape, int group_rows,
                    at::Tensor& w, cudaStream_t stream) {
  TORCH_CHECK(shape.n_tiles <= 65535,
              "w4a16_gemm: size_n must be <= ", 65535 * w4a16::kTile,
              " on CUDA (one grid row per 64 columns)");
  const dim3 grid(static_cast<unsigned>(shape.k_tiles),
                  static_cast<unsigned>(shape.n_tiles));
  w4a16_dequant_kernel<T><<<grid, kDequantThreads, 0, stream>>>(
      reinterpret_cast<const uint4*>(b_packed.data_ptr<int32_t>()),
      static_cast<const T*>(scales.data_ptr()),
      zeros.has_value() ? static_cast<const T*>(zeros->data_ptr()) : nullptr,
      static_cast<T*>(w.data_ptr()), static_cast<int>(shape.k),
      static_cast<int>(shape.n), static_cast<int>(shape.k_tiles), group_rows,
      aligned16(scales.data_ptr()) &&
          (!zeros.has_value() || aligned16(zeros->data_ptr())),
      /*nt0=*/0);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// "dequant": the whole weight, then one cuBLAS GEMM on the current stream
// (out (+ bias) = a @ w).
template <typename T>
void run_dequant(const at::Tensor& a, const at::Tensor& b_packed,
                 const at::Tensor& scales,
                 const std::optional<at::Tensor>& zeros,
                 const std::optional<at::Tensor>& bias,
                 const w4a16::GemmShape& shape, int group_rows,
                 at::Tensor& out) {
  at::Tensor w = at::empty({shape.k, shape.n}, a.options());
  launch_dequant<T>(b_packed, scales, zeros, shape, group_rows, w,
                    at::cuda::getCurrentCUDAStream());
  if (bias.has_value()) {
    at::addmm_out(out, *bias, a, w);
  } else {
    at::mm_out(out, a, w);
  }
}

}  // namespace
}  // namespace vllm_myops

using namespace vllm_myops;

at::Tensor w4a16_gemm_cuda(const at::Tensor& a, const at::Tensor& b_packed,
                           const at::Tensor& scales,
                           const std::optional<at::Tensor>& zeros,
                           const std::optional<at::Tensor>& bias,
                           int64_t size_k, int64_t size_n, int64_t group_size) {
  const w4a16::GemmShape shape = w4a16::check_gemm_args(
      a, b_packed, scales, zeros, bias, size_k, size_n, group_size);
  const c10::cuda::CUDAGuard device_guard(a.device());
  // 32-bit index math in the kernels (rows, columns, k).
  TORCH_CHECK(shape.k < (int64_t{1} << 30) && shape.n < (int64_t{1} << 30) &&
                  shape.m < (int64_t{1} << 30),
              "w4a16_gemm: size_k, size_n and M must be < 2^30");
  at::Tensor out = at::empty({shape.m, shape.n}, a.options());
  if (shape.m == 0) return out;
  const int group_rows =
      static_cast<int>(group_size == -1 ? shape.k : group_size);

  const at::Tensor a_rows = w4a16::unit_stride_rows(a);

  const bool is_half = a.scalar_type() == at::kHalf;
  const CudaPath path = cuda_path_for(shape.m, wgmma_available(shape));
  if (path == CudaPath::kDequant) {
    // cuBLAS's kernel choice depends on the operands' layout: a strided a
    // (row stride not a multiple of 8 elements) gave sums that differ in the
    // last bit from the contiguous a's. The copy (M x K, small beside the
    // K x N dequant) makes the result independent of a's layout.
    const at::Tensor a_dense = a_rows.contiguous();
    if (is_half) {
      run_dequant<__half>(a_dense, b_packed, scales, zeros, bias, shape,
                          group_rows, out);
    } else {
      run_dequant<__nv_bfloat16>(a_dense, b_packed, scales, zeros, bias, shape,
                                 group_rows, out);
    }
    return out;
  }
  if (path == CudaPath::kWgmmaTma) {
    if (is_half) {
      run_wgmma_gemm<__half>(a_rows, b_packed, scales, zeros, bias, shape,
                             group_rows, out);
    } else {
      run_wgmma_gemm<__nv_bfloat16>(a_rows, b_packed, scales, zeros, bias,
                                    shape, group_rows, out);
    }
    return out;
  }
  if (path == CudaPath::kTc || path == CudaPath::kTc4 ||
      path == CudaPath::kTc8) {
    const TcBuild build = path == CudaPath::kTc4   ? TcBuild::kLarge4
                          : path == CudaPath::kTc8 ? TcBuild::kLarge8
                                                   : TcBuild::kAuto;
    if (is_half) {
      run_tc_gemm<__half>(a_rows, b_packed, scales, zeros, bias, shape,
                          group_rows, build, out);
    } else {
      run_tc_gemm<__nv_bfloat16>(a_rows, b_packed, scales, zeros, bias, shape,
                                 group_rows, build, out);
    }
    return out;
  }
  if (is_half) {
    run_gemm<__half>(a_rows, b_packed, scales, zeros, bias, shape, group_rows,
                     path, out);
  } else {
    run_gemm<__nv_bfloat16>(a_rows, b_packed, scales, zeros, bias, shape,
                            group_rows, path, out);
  }
  return out;
}
