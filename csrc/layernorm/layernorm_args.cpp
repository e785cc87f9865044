// SPDX-License-Identifier: Apache-2.0
// The RMSNorm-specific argument rules (weight, row layouts, in-place
// aliasing); the generic checks come from core/checks.h.
#include "layernorm/layernorm_args.h"

#include <ATen/core/TensorBody.h>
#include <c10/util/Exception.h>

#include "core/checks.h"

namespace vllm_myops {
namespace {

void check_input(const char* op, const at::Tensor& input) {
  checks::check_floating_dtype(op, "input", input);
  checks::check_min_dim(op, "input", input, 1, "the normalised one");
}

// Returns a dense [width] weight or nullptr for "no scale".
const void* check_weight(const char* op,
                         const std::optional<at::Tensor>& weight,
                         const at::Tensor& input, PreparedRmsNorm& prepared) {
  if (!weight.has_value() || !weight->defined()) return nullptr;
  const at::Tensor& w = *weight;
  checks::check_same_device_and_dtype(op, "weight", w, "input", input);
  TORCH_CHECK(w.dim() == 1, op,
              ": weight must be 1-D [hidden_size=", input.size(-1), "], got ",
              w.dim(), "-D shape ", w.sizes());
  TORCH_CHECK(w.size(0) == input.size(-1), op,
              ": weight must have hidden_size=", input.size(-1),
              " elements (the last dim of input), got ", w.size(0));
  // A strided weight is rare and tiny: one dense copy is cheaper than a
  // strided path in every kernel.
  at::Tensor dense = w.contiguous();
  prepared.keep_alive.push_back(dense);
  return dense.data_ptr();
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
  prepared.params.dtype = checks::to_dtype(input.scalar_type());
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
  checks::check_devices(
      op, {"input", &input},
      {{"result", &result}, {"weight", weight ? &*weight : nullptr}}, device);
  check_input(op, input);
  checks::check_like(op, "result", result, "input", input);
  checks::check_contiguous(op, "result", result);
  checks::check_finite_non_negative(op, "epsilon", epsilon);
  // Writing result in place of input is fine (each element is read before it
  // is written); a partial overlap would read already-normalised values.
  checks::check_no_partial_overlap(op, "result", result, "input", input);
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
  checks::check_devices(
      op, {"input", &input},
      {{"residual", &residual}, {"weight", weight ? &*weight : nullptr}},
      device);
  check_input(op, input);
  checks::check_like(op, "residual", residual, "input", input);
  checks::check_finite_non_negative(op, "epsilon", epsilon);
  checks::check_disjoint(op, "input", input, "residual", residual,
                         "both are written");
  checks::check_no_internal_overlap(op, "input", input);
  checks::check_no_internal_overlap(op, "residual", residual);
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
