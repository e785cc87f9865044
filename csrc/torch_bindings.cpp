// SPDX-License-Identifier: Apache-2.0
// Op schemas and their per-device implementations, grouped by op family.
// Kept thin: argument checking lives in each family's *_args.cpp (on
// core/checks.h), kernels in their own files.
#include "core/registration.h"
#include "ops.h"

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  // ---- Core ----
  // Which vector ISA the CPU kernels run with on this machine.
  ops.def("cpu_kernel_isa() -> str", &cpu_kernel_isa);

  // ---- RMSNorm ----
  // Root Mean Square normalisation over the last dim:
  //   result = (input / sqrt(mean(input^2) + epsilon)).to(dtype) * weight
  // weight=None means no scale.
  ops.def(
      "rms_norm(Tensor! result, Tensor input, Tensor? weight, float epsilon) "
      "-> ()");
  ops.impl("rms_norm", c10::kCPU, &rms_norm_cpu);

  // In place: residual = input + residual (rounded to the dtype), then
  // input = rms_norm(residual) * weight.
  ops.def(
      "fused_add_rms_norm(Tensor! input, Tensor! residual, Tensor? weight, "
      "float epsilon) -> ()");
  ops.impl("fused_add_rms_norm", c10::kCPU, &fused_add_rms_norm_cpu);

#ifdef VLLM_MYOPS_WITH_CUDA
  ops.impl("rms_norm", c10::kCUDA, &rms_norm_cuda);
  ops.impl("fused_add_rms_norm", c10::kCUDA, &fused_add_rms_norm_cuda);
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
