// SPDX-License-Identifier: Apache-2.0
#include "layernorm/layernorm_args.h"

#include <cmath>
#include <initializer_list>
#include <string>
#include <limits>

#include <ATen/MemoryOverlap.h>
#include <ATen/core/TensorBody.h>
#include <c10/util/Exception.h>

namespace vllm_myops {
namespace {

// Numbers in messages are formatted here (std::to_string, i.e. the C
// library) rather than by streaming integers/doubles into c10::str: the H200
// test run crashed inside the op exactly when a failing check's message
// streamed a number from this library, and never when it streamed only text
// (benchmarks/NOTES.md, "CUDA error-path crash").
std::string num(int64_t v) { return std::to_string(v); }

std::string num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = std::to_string(v);
  // "0.000010" -> "0.00001", "-1.000000" -> "-1"
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

std::string shape(c10::IntArrayRef dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) out += ", ";
    out += num(dims[i]);
  }
  return out + "]";
}

const char* device_name(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA ? "cuda" : "cpu";
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
      TORCH_CHECK(false, "unreachable dtype");
  }
}

// The backend is chosen from all tensor arguments (CUDA wins over CPU), so a
// mixed call arrives here with input on another device: name the tensor that
// differs from input, which is the argument the caller got wrong as often.
void check_devices(
    const char* op, const at::Tensor& input,
    std::initializer_list<std::pair<const char*, const at::Tensor*>> others,
    c10::DeviceType device) {
  TORCH_CHECK(input.defined(), op, ": input must be a defined tensor");
  for (const auto& [name, t] : others) {
    TORCH_CHECK(t == nullptr || !t->defined() || t->device() == input.device(),
                op, ": all tensors must be on one device: input is on ",
                input.device(), " but ", name, " is on ", t->device());
  }
  TORCH_CHECK(input.device().type() == device, op, ": input must be a ",
              device_name(device), " tensor, got a tensor on ", input.device());
}

void check_input(const char* op, const at::Tensor& input) {
  const auto t = input.scalar_type();
  TORCH_CHECK(t == at::kFloat || t == at::kHalf || t == at::kBFloat16, op,
              ": input must be float32, float16 or bfloat16, got ", t);
  TORCH_CHECK(input.dim() >= 1, op,
              ": input must have at least 1 dimension (the normalised one), "
              "got a 0-dim tensor");
}

// A tensor that must match `input` in device, dtype and shape.
void check_like_input(const char* op, const char* name, const at::Tensor& t,
                      const at::Tensor& input) {
  TORCH_CHECK(t.defined(), op, ": ", name, " must be a defined tensor");
  TORCH_CHECK(t.device() == input.device(), op, ": ", name,
              " must be on the same device as input (", input.device(),
              "), got ", t.device());
  TORCH_CHECK(t.scalar_type() == input.scalar_type(), op, ": ", name,
              " must have the dtype of input (", input.scalar_type(), "), got ",
              t.scalar_type());
  TORCH_CHECK(t.sizes() == input.sizes(), op, ": ", name,
              " must have the shape of input ", shape(input.sizes()), ", got ",
              shape(t.sizes()));
}

// Returns a dense [width] weight or nullptr for "no scale".
const void* check_weight(const char* op,
                         const std::optional<at::Tensor>& weight,
                         const at::Tensor& input, PreparedRmsNorm& prepared) {
  if (!weight.has_value() || !weight->defined()) return nullptr;
  const at::Tensor& w = *weight;
  TORCH_CHECK(w.device() == input.device(), op,
              ": weight must be on the same device as input (", input.device(),
              "), got ", w.device());
  TORCH_CHECK(w.scalar_type() == input.scalar_type(), op,
              ": weight must have the dtype of input (", input.scalar_type(),
              "), got ", w.scalar_type());
  TORCH_CHECK(w.dim() == 1, op,
              ": weight must be 1-D [hidden_size=", num(input.size(-1)),
              "], got ", num(w.dim()), "-D shape ", shape(w.sizes()));
  TORCH_CHECK(w.size(0) == input.size(-1), op,
              ": weight must have hidden_size=", num(input.size(-1)),
              " elements (the last dim of input), got ", num(w.size(0)));
  // A strided weight is rare and tiny: one dense copy is cheaper than a
  // strided path in every kernel.
  at::Tensor dense = w.contiguous();
  prepared.keep_alive.push_back(dense);
  return dense.data_ptr();
}

// Byte span [first, last] a tensor's elements occupy (numel > 0).
std::pair<uintptr_t, uintptr_t> byte_span(const at::Tensor& t) {
  int64_t last = 0;
  for (int64_t i = 0; i < t.dim(); ++i) last += (t.size(i) - 1) * t.stride(i);
  const auto first = reinterpret_cast<uintptr_t>(t.data_ptr());
  return {first,
          first + static_cast<uintptr_t>((last + 1) * t.element_size()) - 1};
}

// True unless a and b provably share no element. ATen answers "too hard"
// for any non-dense pair; then different storages cannot overlap, and views
// of one storage are taken as overlapping when their byte spans intersect
// (interleaved views of one buffer are refused rather than risked).
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

void check_epsilon(const char* op, double epsilon) {
  TORCH_CHECK(std::isfinite(epsilon) && epsilon >= 0.0, op,
              ": epsilon must be finite and >= 0, got ", num(epsilon));
}

// Collapses the leading dims of `t` into at most two strided row levels.
// Returns false when the rows cannot be addressed that way or the last dim is
// not unit-stride; the caller then works on a dense copy.
bool row_layout(const at::Tensor& t, RowLayout& layout) {
  const int64_t d = t.dim();
  const int64_t width = t.size(d - 1);
  if (width > 1 && t.stride(d - 1) != 1) return false;
  // Groups of leading dims, innermost first: (rows in group, stride of group).
  int64_t sizes[2] = {1, 1};
  int64_t strides[2] = {width, width};
  int groups = 0;
  for (int64_t i = d - 2; i >= 0; --i) {
    const int64_t size = t.size(i);
    const int64_t stride = t.stride(i);
    if (size == 1) continue;  // a size-1 dim has no effect on addressing
    if (groups > 0 && stride == strides[groups - 1] * sizes[groups - 1]) {
      sizes[groups - 1] *= size;  // merges with the group inside it
      continue;
    }
    if (groups == 2) return false;
    sizes[groups] = size;
    strides[groups] = stride;
    ++groups;
  }
  if (groups <= 1) {
    layout = RowLayout{1, groups == 1 ? strides[0] : width, 0};
  } else {
    layout = RowLayout{sizes[0], strides[1], strides[0]};
  }
  return true;
}

// Row layout of a read-only input, through a dense copy if needed.
const void* readable_rows(const at::Tensor& t, RowLayout& layout,
                          PreparedRmsNorm& prepared) {
  if (row_layout(t, layout)) return t.data_ptr();
  at::Tensor dense = t.contiguous();
  prepared.keep_alive.push_back(dense);
  TORCH_CHECK(row_layout(dense, layout), "dense tensor must have a row layout");
  return dense.data_ptr();
}

// Row layout of a tensor written in place; a dense temporary is written back
// by finish() when the original layout cannot be addressed directly.
void* writable_rows(at::Tensor& t, RowLayout& layout,
                    PreparedRmsNorm& prepared) {
  if (row_layout(t, layout)) return t.data_ptr();
  at::Tensor dense = t.contiguous();
  prepared.copy_back.emplace_back(t, dense);
  TORCH_CHECK(row_layout(dense, layout), "dense tensor must have a row layout");
  return dense.data_ptr();
}

void fill_shape(PreparedRmsNorm& prepared, const at::Tensor& input,
                double epsilon) {
  const int64_t width = input.size(-1);
  prepared.params.width = width;
  prepared.params.rows = width == 0 ? 0 : input.numel() / width;
  prepared.params.epsilon = static_cast<float>(epsilon);
  prepared.params.dtype = to_dtype(input.scalar_type());
}

}  // namespace

void PreparedRmsNorm::finish() {
  for (auto& [original, temporary] : copy_back) original.copy_(temporary);
  copy_back.clear();
}

PreparedRmsNorm prepare_rms_norm(at::Tensor& result, const at::Tensor& input,
                                 const std::optional<at::Tensor>& weight,
                                 double epsilon, c10::DeviceType device) {
  constexpr const char* op = "rms_norm";
  PreparedRmsNorm prepared;
  check_devices(op, input,
                {{"result", &result}, {"weight", weight ? &*weight : nullptr}},
                device);
  check_input(op, input);
  check_like_input(op, "result", result, input);
  TORCH_CHECK(result.is_contiguous(), op,
              ": result must be contiguous, got strides ",
              shape(result.strides()), " for shape ", shape(result.sizes()));
  check_epsilon(op, epsilon);
  // Writing result in place of input is fine (each element is read before it
  // is written); a partial overlap would read already-normalised values.
  TORCH_CHECK(
      at::get_overlap_status(result, input) == at::MemOverlapStatus::Full ||
          !may_overlap(result, input),
      op, ": result must not partially overlap input");
  fill_shape(prepared, input, epsilon);
  prepared.params.weight = check_weight(op, weight, input, prepared);
  if (prepared.empty()) return prepared;

  RmsNormParams& p = prepared.params;
  p.in = readable_rows(input, p.in_rows, prepared);
  TORCH_CHECK(row_layout(result, p.out_rows), "contiguous result has rows");
  p.out = result.data_ptr();
  return prepared;
}

PreparedRmsNorm prepare_fused_add_rms_norm(
    at::Tensor& input, at::Tensor& residual,
    const std::optional<at::Tensor>& weight, double epsilon,
    c10::DeviceType device) {
  constexpr const char* op = "fused_add_rms_norm";
  PreparedRmsNorm prepared;
  check_devices(
      op, input,
      {{"residual", &residual}, {"weight", weight ? &*weight : nullptr}},
      device);
  check_input(op, input);
  check_like_input(op, "residual", residual, input);
  check_epsilon(op, epsilon);
  TORCH_CHECK(!may_overlap(input, residual), op,
              ": input and residual must not overlap (both are written)");
  TORCH_CHECK(at::has_internal_overlap(input) != at::MemOverlap::Yes, op,
              ": input must not have internally overlapping elements "
              "(e.g. an expanded tensor); it is written in place");
  TORCH_CHECK(at::has_internal_overlap(residual) != at::MemOverlap::Yes, op,
              ": residual must not have internally overlapping elements "
              "(e.g. an expanded tensor); it is written in place");
  fill_shape(prepared, input, epsilon);
  prepared.params.weight = check_weight(op, weight, input, prepared);
  if (prepared.empty()) return prepared;

  RmsNormParams& p = prepared.params;
  p.out = writable_rows(input, p.out_rows, prepared);
  p.in = p.out;
  p.in_rows = p.out_rows;
  p.residual = writable_rows(residual, p.residual_rows, prepared);
  return prepared;
}

}  // namespace vllm_myops
