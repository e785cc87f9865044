// SPDX-License-Identifier: Apache-2.0
//
// Asynchronous global -> shared copies (cp.async, sm_80+). The data lands in
// shared memory without passing through registers, so a kernel can have it
// in flight while its registers hold other data.
#pragma once

#include <cuda_runtime.h>

namespace vllm_myops::cuda {

// Copies 16 bytes from src (global, 16-byte aligned) to dst (shared,
// 16-byte aligned). .ca: also cached in L1, for data every block of an SM
// reads (a norm's weight).
__device__ __forceinline__ void cp_async_16B(void* dst, const void* src) {
  const unsigned dst_shared =
      static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(dst_shared),
               "l"(src)
               : "memory");
}

// Closes the group of copies issued so far by this thread.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits for all of this thread's copies. Other threads see them only after a
// barrier that follows this wait.
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

}  // namespace vllm_myops::cuda
