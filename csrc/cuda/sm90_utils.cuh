// SPDX-License-Identifier: Apache-2.0
//
// Hopper (sm_90a) primitives shared by the kernels under csrc/sm90a/: the
// wgmma shared-memory matrix descriptor, the warpgroup fences, the async-proxy
// fence, and wgmma.mma_async with A from registers (the RS form, fp32
// accumulators). Only code compiled for sm_90a emits the instructions
// (VLLM_MYOPS_SM90A_DEVICE); elsewhere the bodies are empty, so a header that
// includes this one still compiles in other passes. PTX: the
// "Asynchronous Warpgroup Level Matrix Multiply-Accumulate" chapter.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && \
    defined(__CUDA_ARCH_FEAT_SM90_ALL)
  #define VLLM_MYOPS_SM90A_DEVICE 1
#endif

namespace vllm_myops::sm90 {

// ---- Shared-memory operand descriptors ------------------------------------
// A K-major operand tile whose rows are 128 bytes (64 16-bit elements) in the
// 128-byte swizzle: 16-byte chunk c of row r lives at byte
// r * 128 + ((c ^ (r % 8)) * 16) of a 1024-byte aligned tile, 8 rows (1024
// bytes) per swizzle atom. The descriptor of the k16 slice starting at
// element k of every row is the tile's address + 2 k bytes: the hardware
// applies the XOR to the address bits, so the slice needs no re-layout.
constexpr int kSwizzleRowBytes = 128;
constexpr int kSwizzleAtomBytes = 8 * kSwizzleRowBytes;

__device__ __forceinline__ uint64_t sw128_kmajor_desc(uint32_t smem_addr) {
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((smem_addr & 0x3ffffu) >> 4);  // start
  desc |= static_cast<uint64_t>(1) << 16;  // leading offset: unused, 1
  desc |= static_cast<uint64_t>(kSwizzleAtomBytes >> 4) << 32;  // 8-row step
  desc |= static_cast<uint64_t>(1) << 62;  // layout: 128-byte swizzle
  return desc;
}

// Byte offset of 16-byte chunk c of row r inside such a tile.
__host__ __device__ constexpr int sw128_chunk_offset(int r, int c) {
  return r * kSwizzleRowBytes + ((c ^ (r % 8)) * 16);
}

// ---- Ordering
// ---------------------------------------------------------------- Before a
// wgmma reads registers (A, accumulators) written by other instructions.
__device__ __forceinline__ void wgmma_fence() {
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wgmma_commit() {
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

// Waits until at most kPending committed groups are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending)
               : "memory");
#endif
}

// Shared-memory writes by the generic proxy (st.shared, cp.async) made
// visible to the async proxy that wgmma reads through. Each writing thread
// issues it after its writes complete, before the barrier the readers wait on.
__device__ __forceinline__ void fence_proxy_async_smem() {
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Keeps the compiler from moving accesses of accumulator registers across
// the asynchronous wgmma (CUTLASS's warpgroup_fence_operand).
template <int kN>
__device__ __forceinline__ void fence_operands(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The same for register A fragments: keeps them live (their registers not
// reused) until this point, which must follow the wait of the wgmma reading
// them.
template <int kN>
__device__ __forceinline__ void fence_operands(uint32_t (&a)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

// ---- wgmma.mma_async, A from registers
// --------------------------------------- A fragment of warp w of the
// warpgroup: rows 16 w .. 16 w + 15 of the 64, in the register order of
// mma.sync m16n8k16's A (lane g = l / 4, t = l % 4): a[0] = (row g, k 2t,
// 2t+1), a[1] = (row g + 8, k 2t, 2t+1), a[2] = (row g, k 2t+8, 2t+9), a[3] =
// (row g + 8, k 2t+8, 2t+9). Accumulator d[4 j + r] of n8 block j: row g + 8 (r
// / 2), column 8 j + 2 t + (r % 2). The bodies differ only in N and the element
// type.

// D[64 x 16] (+)= A[64 x 16] (registers) * B[16 x 16] (shared memory, K-major).
__device__ __forceinline__ void wgmma_rs_m64n16k16_bf16(float (&d)[8],
                                                        const uint32_t (&a)[4],
                                                        uint64_t desc_b) {
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7},"
      "{%8, %9, %10, %11}, %12, p, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
#endif
}

// D[64 x 16] (+)= A[64 x 16] (registers) * B[16 x 16] (shared memory, K-major).
__device__ __forceinline__ void wgmma_rs_m64n16k16_f16(float (&d)[8],
                                                       const uint32_t (&a)[4],
                                                       uint64_t desc_b) {
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7},"
      "{%8, %9, %10, %11}, %12, p, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
#endif
}

// D[64 x 32] (+)= A[64 x 16] (registers) * B[16 x 32] (shared memory, K-major).
__device__ __forceinline__ void wgmma_rs_m64n32k16_bf16(float (&d)[16],
                                                        const uint32_t (&a)[4],
                                                        uint64_t desc_b) {
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7,"
      "%8, %9, %10, %11, %12, %13, %14, %15},"
      "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]),
        "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
#endif
}

// D[64 x 32] (+)= A[64 x 16] (registers) * B[16 x 32] (shared memory, K-major).
__device__ __forceinline__ void wgmma_rs_m64n32k16_f16(float (&d)[16],
                                                       const uint32_t (&a)[4],
                                                       uint64_t desc_b) {
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7,"
      "%8, %9, %10, %11, %12, %13, %14, %15},"
      "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]),
        "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
#endif
}

// D[64 x 64] (+)= A[64 x 16] (registers) * B[16 x 64] (shared memory, K-major).
__device__ __forceinline__ void wgmma_rs_m64n64k16_bf16(float (&d)[32],
                                                        const uint32_t (&a)[4],
                                                        uint64_t desc_b) {
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7,"
      "%8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23,"
      "%24, %25, %26, %27, %28, %29, %30, %31},"
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]),
        "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
        "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
        "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
#endif
}

// D[64 x 64] (+)= A[64 x 16] (registers) * B[16 x 64] (shared memory, K-major).
__device__ __forceinline__ void wgmma_rs_m64n64k16_f16(float (&d)[32],
                                                       const uint32_t (&a)[4],
                                                       uint64_t desc_b) {
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7,"
      "%8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23,"
      "%24, %25, %26, %27, %28, %29, %30, %31},"
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]),
        "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
        "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
        "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
#endif
}

// wgmma_rs<T, kN>: the instruction for element type T (__half or
// __nv_bfloat16) and N = kN.
template <typename T, int kN>
__device__ __forceinline__ void wgmma_rs(float (&d)[kN / 2],
                                         const uint32_t (&a)[4],
                                         uint64_t desc_b) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  static_assert(kBf16 || std::is_same_v<T, __half>, "fp16 or bf16");
  if constexpr (kN == 16) {
    if constexpr (kBf16)
      wgmma_rs_m64n16k16_bf16(d, a, desc_b);
    else
      wgmma_rs_m64n16k16_f16(d, a, desc_b);
  } else if constexpr (kN == 32) {
    if constexpr (kBf16)
      wgmma_rs_m64n32k16_bf16(d, a, desc_b);
    else
      wgmma_rs_m64n32k16_f16(d, a, desc_b);
  } else {
    static_assert(kN == 64, "N of 16, 32 or 64");
    if constexpr (kBf16)
      wgmma_rs_m64n64k16_bf16(d, a, desc_b);
    else
      wgmma_rs_m64n64k16_f16(d, a, desc_b);
  }
}

}  // namespace vllm_myops::sm90
