// SPDX-License-Identifier: Apache-2.0
//
// Launching kernels: grid arithmetic, whether the sm_90a kernels can run,
// division by a run-time constant, and programmatic dependent launch (PDL)
// with the launch error check.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

namespace vllm_myops::cuda {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- The sm_90a kernels -----------------------------------------------------
// Whether the kernels under csrc/sm90a/ can run on the current device: a
// build that has them (VLLM_MYOPS_WITH_SM90A) and a device of compute
// capability 9.0 exactly (sm_90a code runs nowhere else). The device's
// properties are cached by torch, so this costs no driver call per use.
inline bool sm90a_kernels_run_here() {
#if defined(VLLM_MYOPS_WITH_SM90A)
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  return prop->major == 9 && prop->minor == 0;
#else
  return false;
#endif
}

// ---- Division by a run-time constant ----------------------------------------
// n / divisor as a multiply-high and shift precomputed on the host
// (Granlund-Montgomery, as CUTLASS's FastDivmod), exact for n < 2^31. A 64-bit
// division is a subroutine call of ~70 instructions, as much as all the other
// work a kernel may do per row or element.
struct FastDivmod {
  uint32_t divisor = 1;
  uint32_t multiplier = 0;
  uint32_t shift = 0;

  // divisor >= 2 (a divisor of 1 needs no division; callers test for it).
  static FastDivmod make(uint32_t d) {
    const int ceil_log2 = 32 - __builtin_clz(d - 1);
    const int power = 31 + ceil_log2;
    FastDivmod f;
    f.divisor = d;
    f.multiplier = static_cast<uint32_t>(((uint64_t{1} << power) + d - 1) / d);
    f.shift = static_cast<uint32_t>(power - 32);
    return f;
  }

  __device__ __forceinline__ uint32_t divide(uint32_t n) const {
    return __umulhi(n, multiplier) >> shift;
  }
};

// ---- Programmatic dependent launch (sm_90+) ---------------------------------
// A kernel launched with programmatic stream serialization may be scheduled
// while the previous kernel of the stream is still running. It must not touch
// global memory before wait_for_prior_grids(), which returns once the previous
// grid has completed and its writes are visible.
// allow_dependent_grids_to_launch() lets the next kernel get scheduled the
// same way; it only affects when that kernel starts, never what it sees. Both
// are no-ops without the launch attribute and compile to nothing below sm_90.

__device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependent_grids_to_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// PDL needs an sm_90+ device, and the kernel binary that runs there must
// contain wait_for_prior_grids() (a build for older archs only would run its
// sm_8x code, which has none). Off with VLLM_MYOPS_DISABLE_PDL=1, for A/B
// timing or to rule it out when debugging.
inline bool pdl_allowed_on_current_device() {
  static const bool disabled_by_env = [] {
    const char* v = std::getenv("VLLM_MYOPS_DISABLE_PDL");
    return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
  }();
  return !disabled_by_env && at::cuda::getCurrentDeviceProperties()->major >= 9;
}

// Lets kKernel launch with `bytes` of dynamic shared memory: above the
// default 48 KB a kernel must opt in (a per-device attribute; cheap, no
// stream work, allowed during graph capture).
template <auto kKernel>
void allow_dynamic_smem(int bytes) {
  if (bytes > 48 * 1024) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(
        kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  }
}

// Resident blocks of kKernel per SM (at least 1) at `threads` threads and
// `smem_bytes` of dynamic shared memory, which it is first allowed. Callers
// keep the answer in a static: the process drives one kind of GPU.
template <auto kKernel>
int resident_blocks(int threads, int smem_bytes) {
  allow_dynamic_smem<kKernel>(smem_bytes);
  int b = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &b, kKernel, threads, smem_bytes));
  return std::max(b, 1);
}

template <auto kKernel>
bool kernel_binary_has_pdl_wait() {
  // Asked once per kernel, on the first device that launches it.
  static const bool has_wait = [] {
    cudaFuncAttributes attributes{};
    C10_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kKernel));
    return attributes.binaryVersion >= 90;
  }();
  return has_wait;
}

// Launches kKernel<<<blocks, threads, 0, stream>>>(args...), with PDL where
// the device and the kernel binary allow it, and checks the launch. blocks
// must fit a 1-D grid (the caller reports its own limit first).
template <auto kKernel, typename... Args>
void launch_with_pdl(unsigned blocks, int threads, cudaStream_t stream,
                     const Args&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute pdl;
  if (pdl_allowed_on_current_device() &&
      kernel_binary_has_pdl_wait<kKernel>()) {
    pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &pdl;
    config.numAttrs = 1;
  }
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kKernel, args...));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace vllm_myops::cuda
