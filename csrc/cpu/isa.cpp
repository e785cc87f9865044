// SPDX-License-Identifier: Apache-2.0
#include "cpu/isa.h"

#include <string>

#include <ATen/Version.h>

#include "ops.h"

namespace vllm_myops::cpu {
namespace {

CpuIsa choose_isa() {
  const std::string cap = at::get_cpu_capability();
  (void)cap;
#if defined(MYOPS_HAVE_CPU_ISA_AVX512)
  if (cap.find("AVX512") != std::string::npos) return CpuIsa::kAvx512;
#endif
#if defined(MYOPS_HAVE_CPU_ISA_AVX2)
  if (cap.find("AVX2") != std::string::npos ||
      cap.find("AVX512") != std::string::npos)
    return CpuIsa::kAvx2;
#endif
  return CpuIsa::kDefault;
}

}  // namespace

CpuIsa cpu_isa() {
  static const CpuIsa isa = choose_isa();
  return isa;
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kDefault:
      break;
  }
  return "default";
}

}  // namespace vllm_myops::cpu

std::string cpu_kernel_isa() {
  return vllm_myops::cpu::cpu_isa_name(vllm_myops::cpu::cpu_isa());
}
