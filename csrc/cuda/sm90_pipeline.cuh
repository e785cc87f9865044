// SPDX-License-Identifier: Apache-2.0
//
// Hopper (sm_90a) pipeline primitives shared by the warp-specialized kernels
// under csrc/sm90a/: shared-memory mbarriers (init, arrive, expect-tx,
// parity wait), the bulk async copy global -> shared that completes on an
// mbarrier (cp.async.bulk, no tensor map), cp.async completion counted on an
// mbarrier, and the register reallocation of producer / consumer warpgroups
// (setmaxnreg). As sm90_utils.cuh: the instructions are emitted only when
// compiling for sm_90a (VLLM_MYOPS_SM90A_DEVICE), elsewhere the bodies are
// empty. PTX: "Parallel Synchronization and Communication Instructions:
// mbarrier", "cp.async.bulk", "setmaxnreg".
//
// The protocol a pipeline of kStages stages uses (each stage has a `full`
// and an `empty` barrier; phase parity flips every time the stage wraps):
//   producer: wait(empty[s], phase ^ 1)   (the first pass waits on the
//             initial phase's predecessor and returns at once)
//             arrive_expect_tx(full[s], bytes); bulk copies -> full[s]
//   consumer: wait(full[s], phase); ... read the stage ...; arrive(empty[s])
// `full` is initialized with the producer's arrival count (one per
// arrive_expect_tx, plus one per thread whose cp.async completion it
// tracks), `empty` with the consumers' arrival count.
#pragma once

#include <cstdint>

#include <cuda.h>  // CUtensorMap

#include "cuda/sm90_utils.cuh"

namespace vllm_myops::sm90 {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- mbarrier -----------------------------------------------------------
// An mbarrier is one 8-byte aligned uint64_t in shared memory.

// Initializes the barrier for `count` arrivals per phase. One thread; make it
// visible (fence_barrier_init + a block barrier) before any other thread
// uses it.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)),
               "r"(count)
               : "memory");
#endif
}

// Orders the initializations above before their use by the async proxy
// (bulk copies completing on them).
__device__ __forceinline__ void fence_barrier_init() {
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// One arrival (release semantics: this thread's earlier shared-memory
// accesses happen before the phase completes).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile(
      "{\n"
      ".reg .b64 state;\n"
      "mbarrier.arrive.shared::cta.b64 state, [%0];\n"
      "}\n" ::"r"(smem_u32(bar))
      : "memory");
#endif
}

// One arrival that also raises the phase's expected transaction count by
// `bytes` (the bytes the bulk copies completing on this barrier will bring).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar,
                                                      uint32_t bytes) {
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile(
      "{\n"
      ".reg .b64 state;\n"
      "mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(bytes)
      : "memory");
#endif
}

// Blocks until the phase with parity `parity` has completed (acquire
// semantics: the completed phase's writes, bulk copies included, are visible
// after it). A phase completes when all arrivals and all expected bytes are
// in.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
#endif
}

// ---- Copies completing on an mbarrier -------------------------------------

// Bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned)
// from global to shared memory; its bytes count against `bar`'s expected
// transactions (arrive_expect_tx them first, in the same phase).
__device__ __forceinline__ void bulk_copy_g2s(void* smem_dst,
                                              const void* gmem_src,
                                              uint32_t bytes, uint64_t* bar) {
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
      "[%0], [%1], %2, [%3];\n" ::"r"(smem_u32(smem_dst)),
      "l"(gmem_src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
#endif
}

// One arrival on `bar` when all of this thread's earlier cp.async copies have
// landed (.noinc: the arrival is one of the count the barrier was initialized
// with). The copies are then visible to threads that wait on the phase; for
// wgmma reads, the waiting thread still issues fence_proxy_async_smem.
__device__ __forceinline__ void cp_async_arrive(uint64_t* bar) {
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(
                   smem_u32(bar))
               : "memory");
#endif
}

// A 2-D tile of the tensor map `map` (a __grid_constant__ kernel parameter
// or other global / constant memory) at coordinates (c0 innermost, c1) into
// shared memory (aligned as the map's swizzle requires: 1024 bytes for the
// 128-byte swizzle); elements outside the tensor are filled as the map says
// (zeros for CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE). The whole box's bytes count
// against `bar`'s expected transactions, in bounds or not.
__device__ __forceinline__ void tma_load_2d(void* smem_dst,
                                            const CUtensorMap* map, int c0,
                                            int c1, uint64_t* bar) {
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_"
      "tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(smem_u32(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar))
      : "memory");
#endif
}

// Fetches the tensor map's descriptor ahead of its first use.
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile(
      "prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map))
      : "memory");
#endif
}

// ---- Register reallocation --------------------------------------------------
// Every warp of a warpgroup executes the same setmaxnreg; kRegs is a multiple
// of 8 in [24, 256]. The producer warpgroup gives registers back (dec), the
// consumers take them (inc); the kernel's launch bound must leave the pool
// the incs ask for.
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg");
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg");
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// ---- Named barriers
// ----------------------------------------------------------- A barrier among
// `threads` threads (a multiple of 32) on hardware barrier `id` (1..15; 0 is
// __syncthreads): lets the consumer warpgroups sync among themselves without
// the producer.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace vllm_myops::sm90
