// SPDX-License-Identifier: Apache-2.0
// The x86 vector ISA the CPU kernels run with, chosen once per process.
//
// CMake (myops_add_cpu_isa_sources) compiles every per-ISA source once per
// ISA with CPU_CAPABILITY=DEFAULT|AVX2|AVX512 and defines
// MYOPS_HAVE_CPU_ISA_<ISA> for each ISA built. A per-ISA source names its
// entry points with MYOPS_CPU_ISA_FN(name), i.e. name_DEFAULT, name_AVX2,
// name_AVX512; a family keeps a PerIsa table of them and calls
// table.get(cpu_isa()).
#pragma once

namespace vllm_myops::cpu {

enum class CpuIsa { kDefault, kAvx2, kAvx512 };

// The widest ISA both this machine and this build support, from ATen's CPU
// capability (cpuinfo, capped by env ATEN_CPU_CAPABILITY: "AVX2", "AVX512",
// "NO AVX", "DEFAULT"...), so ATen's own switch also tests our fallbacks.
CpuIsa cpu_isa();

// "default", "avx2" or "avx512".
const char* cpu_isa_name(CpuIsa isa);

// One function compiled per ISA. An ISA this build lacks is nullptr and is
// never returned by cpu_isa().
template <typename Fn>
struct PerIsa {
  Fn default_fn;
  Fn avx2_fn;
  Fn avx512_fn;

  Fn get(CpuIsa isa) const {
    switch (isa) {
      case CpuIsa::kAvx512:
        return avx512_fn;
      case CpuIsa::kAvx2:
        return avx2_fn;
      case CpuIsa::kDefault:
        break;
    }
    return default_fn;
  }
};

}  // namespace vllm_myops::cpu

#define MYOPS_CPU_ISA_CONCAT_(a, b) a##_##b
#define MYOPS_CPU_ISA_CONCAT(a, b) MYOPS_CPU_ISA_CONCAT_(a, b)

// Inside a per-ISA source: `name` suffixed with the ISA being compiled.
#define MYOPS_CPU_ISA_FN(name) MYOPS_CPU_ISA_CONCAT(name, CPU_CAPABILITY)

#if defined(MYOPS_HAVE_CPU_ISA_AVX2)
  #define MYOPS_CPU_ISA_FN_AVX2_OR_NULL(name) &name##_AVX2
#else
  #define MYOPS_CPU_ISA_FN_AVX2_OR_NULL(name) nullptr
#endif
#if defined(MYOPS_HAVE_CPU_ISA_AVX512)
  #define MYOPS_CPU_ISA_FN_AVX512_OR_NULL(name) &name##_AVX512
#else
  #define MYOPS_CPU_ISA_FN_AVX512_OR_NULL(name) nullptr
#endif

// The PerIsa table of the per-ISA functions name_DEFAULT, name_AVX2, ...
#define MYOPS_PER_ISA_TABLE(name)                        \
  {&name##_DEFAULT, MYOPS_CPU_ISA_FN_AVX2_OR_NULL(name), \
   MYOPS_CPU_ISA_FN_AVX512_OR_NULL(name)}
