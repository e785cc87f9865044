// SPDX-License-Identifier: Apache-2.0
// The W4A16 argument rules; the generic checks come from core/checks.h.
#include "quantization/w4a16/w4a16_args.h"

#include <ATen/core/TensorBody.h>
#include <c10/util/Exception.h>

#include "core/checks.h"

namespace vllm_myops::w4a16 {
namespace {

void check_sizes(const char* op, int64_t size_k, int64_t size_n) {
  TORCH_CHECK(size_k > 0, op, ": size_k must be > 0, got ", size_k);
  TORCH_CHECK(size_n > 0, op, ": size_n must be > 0, got ", size_n);
}

// The activation dtypes of the W4A16 ops (the kernels' T).
void check_activation_dtype(const char* op, const at::Tensor& a) {
  const auto dt = a.scalar_type();
  TORCH_CHECK(dt == at::kHalf || dt == at::kBFloat16, op,
              ": a must be float16 or bfloat16, got ", dt);
}

// [groups, size_n], a's dtype and device, contiguous.
void check_group_tensor(const char* op, const char* name, const at::Tensor& t,
                        const at::Tensor& a, int64_t groups, int64_t size_n,
                        int64_t group_size) {
  checks::check_same_device_and_dtype(op, name, t, "a", a);
  TORCH_CHECK(t.dim() == 2 && t.size(0) == groups && t.size(1) == size_n, op,
              ": ", name, " must have shape [groups=", groups,
              ", size_n=", size_n, "] (groups = ceil(size_k / group_size) for ",
              "group_size ", group_size, "), got ", t.sizes());
  checks::check_contiguous(op, name, t);
}

}  // namespace

GemmShape check_gemm_args(const at::Tensor& a, const at::Tensor& b_packed,
                          const at::Tensor& scales,
                          const std::optional<at::Tensor>& zeros,
                          const std::optional<at::Tensor>& bias, int64_t size_k,
                          int64_t size_n, int64_t group_size) {
  constexpr const char* op = "w4a16_gemm";
  const at::Tensor* z =
      zeros.has_value() && zeros->defined() ? &*zeros : nullptr;
  const at::Tensor* b = bias.has_value() && bias->defined() ? &*bias : nullptr;
  checks::check_devices(
      op, {"a", &a},
      {{"b_packed", &b_packed}, {"scales", &scales}, {"zeros", z}, {"bias", b}},
      a.device().type());
  check_sizes(op, size_k, size_n);
  TORCH_CHECK(group_size == -1 || group_size == 32 || group_size == 64 ||
                  group_size == 128,
              op, ": group_size must be -1 (per channel), 32, 64 or 128, got ",
              group_size);

  check_activation_dtype(op, a);
  TORCH_CHECK(a.dim() == 2, op, ": a must be 2-D [M, size_k], got a ", a.dim(),
              "-D tensor of shape ", a.sizes());
  TORCH_CHECK(a.size(1) == size_k, op, ": a must have size_k=", size_k,
              " columns, got shape ", a.sizes());
  TORCH_CHECK(a.size(0) <= 1 || a.size(1) <= 1 || a.stride(1) == 1, op,
              ": a's last dim must be contiguous (stride 1), got strides ",
              a.strides());
  TORCH_CHECK(a.size(0) <= 1 || a.stride(0) >= size_k, op,
              ": a's row stride must be >= size_k=", size_k, ", got ",
              a.stride(0));

  GemmShape s{};
  s.m = a.size(0);
  s.k = size_k;
  s.n = size_n;
  s.group_size = group_size;
  s.groups = group_size == -1 ? 1 : ceil_div(size_k, group_size);
  s.n_tiles = ceil_div(size_n, kTile);
  s.k_tiles = ceil_div(size_k, kTile);

  TORCH_CHECK(b_packed.scalar_type() == at::kInt, op,
              ": b_packed must be int32 (w4a16_repack's output), got ",
              b_packed.scalar_type());
  TORCH_CHECK(b_packed.dim() == 3 && b_packed.size(0) == s.n_tiles &&
                  b_packed.size(1) == s.k_tiles &&
                  b_packed.size(2) == kTileWords,
              op, ": b_packed must have shape [ceil(size_n/64)=", s.n_tiles,
              ", ceil(size_k/64)=", s.k_tiles, ", 512] for size_k=", size_k,
              ", size_n=", size_n, ", got ", b_packed.sizes());
  checks::check_contiguous(op, "b_packed", b_packed);

  check_group_tensor(op, "scales", scales, a, s.groups, size_n, group_size);
  if (z != nullptr) {
    check_group_tensor(op, "zeros", *z, a, s.groups, size_n, group_size);
  }
  if (b != nullptr) {
    checks::check_same_device_and_dtype(op, "bias", *b, "a", a);
    TORCH_CHECK(b->dim() == 1 && b->size(0) == size_n, op,
                ": bias must have shape [size_n=", size_n, "], got ",
                b->sizes());
    checks::check_contiguous(op, "bias", *b);
  }
  return s;
}

at::Tensor unit_stride_rows(const at::Tensor& a) {
  return a.size(1) > 1 && a.stride(1) != 1 ? a.contiguous() : a;
}

void check_repack_args(const at::Tensor& qweight, int64_t size_k,
                       int64_t size_n) {
  constexpr const char* op = "w4a16_repack";
  TORCH_CHECK(qweight.defined(), op, ": qweight must be a defined tensor");
  check_sizes(op, size_k, size_n);
  TORCH_CHECK(qweight.scalar_type() == at::kInt, op,
              ": qweight must be int32 (GPTQ packing), got ",
              qweight.scalar_type());
  const int64_t rows = ceil_div(size_k, kPack);
  TORCH_CHECK(qweight.dim() == 2 && qweight.size(0) == rows &&
                  qweight.size(1) == size_n,
              op, ": qweight must have shape [ceil(size_k/8)=", rows,
              ", size_n=", size_n, "] for size_k=", size_k, ", got ",
              qweight.sizes());
  checks::check_contiguous(op, "qweight", qweight);
}

void check_permute_cols_args(const at::Tensor& a, const at::Tensor& perm) {
  constexpr const char* op = "w4a16_permute_cols";
  TORCH_CHECK(a.defined() && perm.defined(), op,
              ": a and perm must be defined tensors");
  checks::check_devices(op, {"a", &a}, {{"perm", &perm}}, a.device().type());
  check_activation_dtype(op, a);
  TORCH_CHECK(a.dim() == 2, op, ": a must be 2-D [M, K], got a ", a.dim(),
              "-D tensor of shape ", a.sizes());
  TORCH_CHECK(perm.scalar_type() == at::kInt, op, ": perm must be int32, got ",
              perm.scalar_type());
  TORCH_CHECK(perm.dim() == 1 && perm.size(0) == a.size(1), op,
              ": perm must have shape [K=", a.size(1), "] (a's columns), got ",
              perm.sizes());
  checks::check_contiguous(op, "perm", perm);
}

}  // namespace vllm_myops::w4a16
