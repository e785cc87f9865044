// SPDX-License-Identifier: Apache-2.0
#include "core/checks.h"

#include <cmath>
#include <cstdint>

#include <ATen/MemoryOverlap.h>
#include <ATen/core/TensorBody.h>
#include <c10/util/Exception.h>

namespace vllm_myops::checks {
namespace {

const char* device_name(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA ? "cuda" : "cpu";
}

// Byte span [first, last] a tensor's elements occupy (numel > 0).
std::pair<uintptr_t, uintptr_t> byte_span(const at::Tensor& t) {
  int64_t last = 0;
  for (int64_t i = 0; i < t.dim(); ++i) last += (t.size(i) - 1) * t.stride(i);
  const auto first = reinterpret_cast<uintptr_t>(t.data_ptr());
  return {first,
          first + static_cast<uintptr_t>((last + 1) * t.element_size()) - 1};
}

}  // namespace

void check_devices(const char* op, NamedTensor primary,
                   std::initializer_list<NamedTensor> others,
                   c10::DeviceType device) {
  const auto& [primary_name, p] = primary;
  TORCH_CHECK(p->defined(), op, ": ", primary_name,
              " must be a defined tensor");
  for (const auto& [name, t] : others) {
    TORCH_CHECK(t == nullptr || !t->defined() || t->device() == p->device(), op,
                ": all tensors must be on one device: ", primary_name,
                " is on ", p->device(), " but ", name, " is on ", t->device());
  }
  TORCH_CHECK(p->device().type() == device, op, ": ", primary_name,
              " must be a ", device_name(device), " tensor, got a tensor on ",
              p->device());
}

void check_floating_dtype(const char* op, const char* name,
                          const at::Tensor& t) {
  const auto s = t.scalar_type();
  TORCH_CHECK(s == at::kFloat || s == at::kHalf || s == at::kBFloat16, op, ": ",
              name, " must be float32, float16 or bfloat16, got ", s);
}

DType to_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
      return DType::kFloat32;
    case c10::ScalarType::Half:
      return DType::kFloat16;
    case c10::ScalarType::BFloat16:
      return DType::kBFloat16;
    default:
      TORCH_CHECK(false, "unreachable dtype ", t);
  }
}

void check_min_dim(const char* op, const char* name, const at::Tensor& t,
                   int64_t min_dim, const char* why) {
  TORCH_CHECK(t.dim() >= min_dim, op, ": ", name, " must have at least ",
              min_dim, min_dim == 1 ? " dimension" : " dimensions", " (", why,
              "), got a ", t.dim(), "-dim tensor");
}

void check_same_device_and_dtype(const char* op, const char* name,
                                 const at::Tensor& t, const char* ref_name,
                                 const at::Tensor& ref) {
  TORCH_CHECK(t.defined(), op, ": ", name, " must be a defined tensor");
  TORCH_CHECK(t.device() == ref.device(), op, ": ", name,
              " must be on the same device as ", ref_name, " (", ref.device(),
              "), got ", t.device());
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), op, ": ", name,
              " must have the dtype of ", ref_name, " (", ref.scalar_type(),
              "), got ", t.scalar_type());
}

void check_like(const char* op, const char* name, const at::Tensor& t,
                const char* ref_name, const at::Tensor& ref) {
  check_same_device_and_dtype(op, name, t, ref_name, ref);
  TORCH_CHECK(t.sizes() == ref.sizes(), op, ": ", name,
              " must have the shape of ", ref_name, " ", ref.sizes(), ", got ",
              t.sizes());
}

void check_contiguous(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK(t.is_contiguous(), op, ": ", name,
              " must be contiguous, got strides ", t.strides(), " for shape ",
              t.sizes());
}

void check_finite_non_negative(const char* op, const char* name, double value) {
  TORCH_CHECK(std::isfinite(value) && value >= 0.0, op, ": ", name,
              " must be finite and >= 0, got ", value);
}

void check_no_internal_overlap(const char* op, const char* name,
                               const at::Tensor& t) {
  TORCH_CHECK(at::has_internal_overlap(t) != at::MemOverlap::Yes, op, ": ",
              name,
              " must not have internally overlapping elements "
              "(e.g. an expanded tensor); it is written in place");
}

bool may_overlap(const at::Tensor& a, const at::Tensor& b) {
  switch (at::get_overlap_status(a, b)) {
    case at::MemOverlapStatus::No:
      return false;
    case at::MemOverlapStatus::Full:
    case at::MemOverlapStatus::Partial:
      return true;
    default:
      break;
  }
  if (!a.storage().is_alias_of(b.storage())) return false;
  const auto [a_first, a_last] = byte_span(a);
  const auto [b_first, b_last] = byte_span(b);
  return a_first <= b_last && b_first <= a_last;
}

void check_disjoint(const char* op, const char* a_name, const at::Tensor& a,
                    const char* b_name, const at::Tensor& b, const char* why) {
  TORCH_CHECK(!may_overlap(a, b), op, ": ", a_name, " and ", b_name,
              " must not overlap (", why, ")");
}

void check_no_partial_overlap(const char* op, const char* out_name,
                              const at::Tensor& out, const char* in_name,
                              const at::Tensor& in) {
  TORCH_CHECK(at::get_overlap_status(out, in) == at::MemOverlapStatus::Full ||
                  !may_overlap(out, in),
              op, ": ", out_name, " must not partially overlap ", in_name);
}

}  // namespace vllm_myops::checks
