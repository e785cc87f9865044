// SPDX-License-Identifier: Apache-2.0
// Argument checks of the W4A16 ops (w4a16_gemm, w4a16_repack,
// w4a16_permute_cols), shared by the
// CPU and CUDA entry points. Every check names the argument and what was
// expected, so a bad call fails with a RuntimeError instead of a crash or a
// silently wrong product.
//
// Formats (vllm_myops/quantization/reference.py documents them):
//   qweight   int32 [ceil(K/8), N], GPTQ packing along K, contiguous
//   b_packed  int32 [ceil(N/64), ceil(K/64), 512]: one 64x64 tile of codes
//             per (n-tile, k-tile); the order of the 512 words inside a
//             tile is the device's (see its kernel file)
//   a         fp16/bf16 [M, K], last dim contiguous (row stride >= K)
//   scales    a's dtype [G, N], zeros (optional) a's dtype [G, N],
//             bias (optional) a's dtype [N]; G = ceil(K/group), 1 for -1
#pragma once

#include <cstdint>
#include <optional>

#include <ATen/core/Tensor.h>

namespace vllm_myops::w4a16 {

constexpr int64_t kTile = 64;        // tile edge along K and N
constexpr int64_t kTileWords = 512;  // 64 * 64 nibbles / 8 per int32
constexpr int64_t kPack = 8;         // codes per int32

struct GemmShape {
  int64_t m, k, n, group_size, groups, n_tiles, k_tiles;
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// All tensors on a's device (the device of the backend being called).
GemmShape check_gemm_args(const at::Tensor& a, const at::Tensor& b_packed,
                          const at::Tensor& scales,
                          const std::optional<at::Tensor>& zeros,
                          const std::optional<at::Tensor>& bias, int64_t size_k,
                          int64_t size_n, int64_t group_size);

// a as the kernels read it, its last dim at stride 1: the one layout
// check_gemm_args lets through otherwise (a single row of more than one
// element with a column stride, e.g. x[:, ::2]) is copied.
at::Tensor unit_stride_rows(const at::Tensor& a);

void check_repack_args(const at::Tensor& qweight, int64_t size_k,
                       int64_t size_n);

// w4a16_permute_cols(a, perm): a fp16/bf16 [M, K] (any strides), perm int32
// [K] contiguous on a's device. perm's values are not read on the host (a
// device-to-host copy per call); the kernels clamp them to [0, K).
void check_permute_cols_args(const at::Tensor& a, const at::Tensor& perm);

}  // namespace vllm_myops::w4a16
