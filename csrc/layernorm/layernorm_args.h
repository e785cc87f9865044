// SPDX-License-Identifier: Apache-2.0
// Argument checking for the RMSNorm ops, shared by the CPU and CUDA wrappers.
//
// Every check names the argument and what was expected, so a bad call fails
// with a RuntimeError instead of a crash or a silently wrong result. The
// output is a RmsNormParams the kernels can run without looking at ATen.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>

#include "layernorm/rms_norm_params.h"

namespace vllm_myops {

// Validated launch description plus what must outlive the launch.
class PreparedRmsNorm {
 public:
  RmsNormParams params;

  // True when there is nothing to compute (0 rows or 0 width).
  bool empty() const { return params.rows == 0 || params.width == 0; }

  // Copies results of in-place ops back into their original tensors when the
  // kernel had to run on a dense temporary (last-dim stride != 1, or leading
  // dims that do not collapse to two strided levels). Call after the launch.
  void finish();

  // Tensors the kernel reads or writes that must stay alive until launch.
  std::vector<at::Tensor> keep_alive;
  // (original, temporary) pairs written back by finish().
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_back;
};

// result <- rms_norm(input) * weight. `device` is the backend being called
// (kCPU or kCUDA); every tensor must live there, on one device.
PreparedRmsNorm prepare_rms_norm(at::Tensor& result, const at::Tensor& input,
                                 const std::optional<at::Tensor>& weight,
                                 double epsilon, c10::DeviceType device);

// residual <- input + residual; input <- rms_norm(residual) * weight.
PreparedRmsNorm prepare_fused_add_rms_norm(
    at::Tensor& input, at::Tensor& residual,
    const std::optional<at::Tensor>& weight, double epsilon,
    c10::DeviceType device);

}  // namespace vllm_myops
