// SPDX-License-Identifier: Apache-2.0
// Host entry points of the CPU RMSNorm ops: argument checks, ISA choice and
// row-parallel launch. The vectorised rows live in layernorm_kernels_isa.cpp.
#include <ATen/Parallel.h>
#include <ATen/Version.h>

#include <string>

#include "cpu/layernorm_kernels_isa.h"
#include "layernorm/layernorm_args.h"
#include "ops.h"

namespace vllm_myops::cpu {
namespace {

struct IsaChoice {
  RmsNormRowsFn fn;
  const char* name;
};

// ATen's CPU capability (cpuinfo, capped by env ATEN_CPU_CAPABILITY: e.g.
// "AVX2", "AVX512", "NO AVX", "DEFAULT") picks the widest ISA both the
// machine and this build support, so ATen's own switch also tests our
// fallbacks.
IsaChoice choose_isa() {
  const std::string cap = at::get_cpu_capability();
  (void)cap;
#if defined(MYOPS_HAVE_CPU_ISA_AVX512)
  if (cap.find("AVX512") != std::string::npos)
    return {&rms_norm_rows_AVX512, "avx512"};
#endif
#if defined(MYOPS_HAVE_CPU_ISA_AVX2)
  if (cap.find("AVX2") != std::string::npos ||
      cap.find("AVX512") != std::string::npos)
    return {&rms_norm_rows_AVX2, "avx2"};
#endif
  return {&rms_norm_rows_DEFAULT, "default"};
}

const IsaChoice& isa() {
  static const IsaChoice choice = choose_isa();
  return choice;
}

void run(PreparedRmsNorm& prepared) {
  if (!prepared.empty()) {
    const RmsNormParams& p = prepared.params;
    const RmsNormRowsFn rows_fn = isa().fn;
    // Enough rows per task that a task moves >= ~64 KB: below that, waking a
    // second thread costs more than it saves (and a single decode row runs
    // inline with no threading at all).
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / p.width);
    if (p.rows <= grain) {
      rows_fn(p, 0, p.rows);
    } else {
      at::parallel_for(0, p.rows, grain, [&](int64_t begin, int64_t end) {
        rows_fn(p, begin, end);
      });
    }
  }
  prepared.finish();
}

}  // namespace
}  // namespace vllm_myops::cpu

void rms_norm_cpu(at::Tensor& result, const at::Tensor& input,
                  const std::optional<at::Tensor>& weight, double epsilon) {
  auto prepared = vllm_myops::prepare_rms_norm(result, input, weight, epsilon,
                                               c10::DeviceType::CPU);
  vllm_myops::cpu::run(prepared);
}

void fused_add_rms_norm_cpu(at::Tensor& input, at::Tensor& residual,
                            const std::optional<at::Tensor>& weight,
                            double epsilon) {
  auto prepared = vllm_myops::prepare_fused_add_rms_norm(
      input, residual, weight, epsilon, c10::DeviceType::CPU);
  vllm_myops::cpu::run(prepared);
}

std::string cpu_kernel_isa() { return vllm_myops::cpu::isa().name; }
