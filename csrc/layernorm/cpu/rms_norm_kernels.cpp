// SPDX-License-Identifier: Apache-2.0
// Host entry points of the CPU RMSNorm ops: argument checks, ISA choice and
// row-parallel launch. The vectorised rows live in rms_norm_kernels_isa.cpp.
#include <ATen/Parallel.h>

#include <algorithm>

#include "cpu/isa.h"
#include "layernorm/cpu/rms_norm_kernels_isa.h"
#include "layernorm/layernorm_args.h"
#include "ops.h"

namespace vllm_myops::cpu {
namespace {

RmsNormRowsFn rows_fn() {
  static const PerIsa<RmsNormRowsFn> table = MYOPS_PER_ISA_TABLE(rms_norm_rows);
  return table.get(cpu_isa());
}

void run(PreparedRmsNorm& prepared) {
  if (!prepared.empty()) {
    const RmsNormParams& p = prepared.params;
    const RmsNormRowsFn rows = rows_fn();
    // Enough rows per task that a task moves >= ~64 KB: below that, waking a
    // second thread costs more than it saves (and a single decode row runs
    // inline with no threading at all).
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / p.width);
    if (p.rows <= grain) {
      rows(p, 0, p.rows);
    } else {
      at::parallel_for(0, p.rows, grain, [&](int64_t begin, int64_t end) {
        rows(p, begin, end);
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
