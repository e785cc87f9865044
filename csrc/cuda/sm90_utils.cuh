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

// ---- Descriptors for the attention kernels ----------------------------------
// The descriptor fields as a constexpr function of (start, leading offset,
// stride offset), so that a kernel can check its descriptors at compile time;
// layout 1 = the 128-byte swizzle. Bits: start address >> 4 in [0, 14),
// leading byte offset >> 4 in [16, 30), stride byte offset >> 4 in [32, 46),
// base offset 0 (tiles 1024-byte aligned), layout in [62, 64).
__host__ __device__ constexpr uint64_t sw128_desc_fields(uint32_t smem_addr,
                                                         uint32_t lbo_bytes,
                                                         uint32_t sbo_bytes) {
  return static_cast<uint64_t>((smem_addr & 0x3ffffu) >> 4) |
         static_cast<uint64_t>((lbo_bytes >> 4) & 0x3fffu) << 16 |
         static_cast<uint64_t>((sbo_bytes >> 4) & 0x3fffu) << 32 |
         static_cast<uint64_t>(1) << 62;
}

// An MN-major (transposed) operand in the 128-byte swizzle: each 128-byte
// row holds 64 consecutive 16-bit MN elements of one k, rows k = 0, 1, ...
// follow each other (8 rows = one 1024-byte atom, so the stride offset
// between 8-k groups is 1024), and MN elements 64 j.. 64 j + 63 live in a
// separate panel `panel_bytes` further on (the leading offset; unused when
// N <= 64). CUTLASS's canonical Layout_MN_SW128 for 16-bit types:
// ((64, n), (8, k)) : ((1 elem, LBO), (128 B, SBO)), XOR-swizzled on the
// address bits as the K-major form. Element (mn, k) of the slice starting
// at smem_addr (1024-byte aligned) is at sw128_mn_offset below.
__device__ __forceinline__ uint64_t sw128_mnmajor_desc(uint32_t smem_addr,
                                                       uint32_t panel_bytes) {
  return sw128_desc_fields(smem_addr, panel_bytes, kSwizzleAtomBytes);
}

// The byte the hardware reads for element (mn, k) of a 16-bit MN-major
// 128-byte-swizzle operand starting at start (1024-byte aligned, so the
// swizzle's XOR of address bits [4, 7) by bits [7, 10) acts on the offset),
// leading offset lbo: the model the attention kernel's loader is checked
// against.
__host__ __device__ constexpr uint32_t sw128_mn_offset(int mn, int k,
                                                       uint32_t lbo) {
  const uint32_t lin =
      static_cast<uint32_t>((mn / 64) * lbo + (k / 8) * kSwizzleAtomBytes +
                            (k % 8) * kSwizzleRowBytes + (mn % 64) * 2);
  return lin ^ (((lin >> 7) & 7u) << 4);
}

// The same for a K-major operand (rows mn of 64 16-bit k elements, 8-row
// groups 1024 bytes apart), element (mn, k) of the k16 slice starting k0
// elements into the rows (descriptor start = tile + 2 k0).
__host__ __device__ constexpr uint32_t sw128_k_offset(int mn, int k, int k0) {
  const uint32_t lin =
      static_cast<uint32_t>((mn / 8) * kSwizzleAtomBytes +
                            (mn % 8) * kSwizzleRowBytes + (k0 + k) * 2);
  return lin ^ (((lin >> 7) & 7u) << 4);
}

// ---- wgmma operand lists ----------------------------------------------------
// The accumulator operands of the wrappers below, generated rather than
// spelled out: VLLM_MYOPS_WG_ACC<N>(c) lists "c"(d[0]) .. "c"(d[N - 1]),
// VLLM_MYOPS_WG_REGS<N> the matching "{%0, .., %N-1}" text.
#define VLLM_MYOPS_WG_ACC8(c, i)                                   \
  c(d[i + 0]), c(d[i + 1]), c(d[i + 2]), c(d[i + 3]), c(d[i + 4]), \
      c(d[i + 5]), c(d[i + 6]), c(d[i + 7])
#define VLLM_MYOPS_WG_ACC32(c)                        \
  VLLM_MYOPS_WG_ACC8(c, 0), VLLM_MYOPS_WG_ACC8(c, 8), \
      VLLM_MYOPS_WG_ACC8(c, 16), VLLM_MYOPS_WG_ACC8(c, 24)
#define VLLM_MYOPS_WG_ACC64(c)                              \
  VLLM_MYOPS_WG_ACC32(c), VLLM_MYOPS_WG_ACC8(c, 32),        \
      VLLM_MYOPS_WG_ACC8(c, 40), VLLM_MYOPS_WG_ACC8(c, 48), \
      VLLM_MYOPS_WG_ACC8(c, 56)
#define VLLM_MYOPS_WG_R8(a, b, c, d, e, f, g, h) \
  "%" #a ", %" #b ", %" #c ", %" #d ", %" #e ", %" #f ", %" #g ", %" #h
#define VLLM_MYOPS_WG_REGS32                                                  \
  "{" VLLM_MYOPS_WG_R8(0, 1, 2, 3, 4, 5, 6, 7) ", " VLLM_MYOPS_WG_R8(         \
      8, 9, 10, 11, 12, 13, 14,                                               \
      15) ", " VLLM_MYOPS_WG_R8(16, 17, 18, 19, 20, 21, 22,                   \
                                23) ", " VLLM_MYOPS_WG_R8(24, 25, 26, 27, 28, \
                                                          29, 30, 31) "}"
#define VLLM_MYOPS_WG_REGS64 \
  "{" VLLM_MYOPS_WG_R8(0, 1, 2, 3, 4, 5, 6, 7) ", " VLLM_MYOPS_WG_R8(         \
      8, 9, 10, 11, 12, 13, 14, 15) ", " VLLM_MYOPS_WG_R8(16, 17, 18, 19,     \
                                                          20, 21, 22,         \
                                                          23) ", "            \
      VLLM_MYOPS_WG_R8(24, 25, 26, 27, 28, 29, 30, 31) ", " VLLM_MYOPS_WG_R8( \
          32, 33, 34, 35, 36, 37, 38, 39) ", " VLLM_MYOPS_WG_R8(40, 41, 42,   \
                                                                43, 44, 45,   \
                                                                46, 47) ", "  \
      VLLM_MYOPS_WG_R8(48, 49, 50, 51, 52, 53, 54, 55) ", " VLLM_MYOPS_WG_R8( \
          56, 57, 58, 59, 60, 61, 62, 63) "}"
#define VLLM_MYOPS_WG_RW(x) "+f"(x)
#define VLLM_MYOPS_WG_WO(x) "=f"(x)
// The asm of the wrappers, emitted only for sm_90a (see the file comment).
#if defined(VLLM_MYOPS_SM90A_DEVICE)
  #define VLLM_MYOPS_WG_ASM(...) asm volatile(__VA_ARGS__)
#else
  #define VLLM_MYOPS_WG_ASM(...) \
    do {                         \
    } while (0)
#endif

// ---- wgmma.mma_async, both operands in shared memory (SS) ------------------
// D[64 x N] = A[64 x 16] * B[16 x N] (kAccumulate false: scale-d 0, D is
// overwritten and its old registers are not read) or D += A * B
// (kAccumulate true); A and B K-major in shared memory (descriptors), no
// transposes. Accumulator layout as the RS form above: d[4 j + r] = row
// g + 8 (r / 2) of warp w's 16, column 8 j + 2 t + (r % 2).
// Operands: NACC = N / 2 accumulators %0.., then desc_a %IA, desc_b %IB,
// scale-d %IS.
#define VLLM_MYOPS_DEFINE_WGMMA_SS(NAME, N, TY, NACC, REGS, ACC, IA, IB, IS) \
  template <bool kAccumulate>                                                \
  __device__ __forceinline__ void NAME(float (&d)[NACC], uint64_t desc_a,    \
                                       uint64_t desc_b) {                    \
    if constexpr (kAccumulate) {                                             \
      VLLM_MYOPS_WG_ASM(                                                     \
          "{\n.reg .pred p;\nsetp.ne.b32 p, %" #IS                           \
          ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY  \
          " " REGS ", %" #IA ", %" #IB                                       \
          ", p, 1, 1, 0, 0;\n}\n" : ACC(VLLM_MYOPS_WG_RW) : "l"(desc_a),     \
          "l"(desc_b), "r"(1));                                              \
    } else {                                                                 \
      VLLM_MYOPS_WG_ASM(                                                     \
          "{\n.reg .pred p;\nsetp.ne.b32 p, %" #IS                           \
          ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY  \
          " " REGS ", %" #IA ", %" #IB                                       \
          ", p, 1, 1, 0, 0;\n}\n" : ACC(VLLM_MYOPS_WG_WO) : "l"(desc_a),     \
          "l"(desc_b), "r"(0));                                              \
    }                                                                        \
  }

VLLM_MYOPS_DEFINE_WGMMA_SS(wgmma_ss_m64n64k16_bf16, 64, "bf16", 32,
                           VLLM_MYOPS_WG_REGS32, VLLM_MYOPS_WG_ACC32, 32, 33,
                           34)
VLLM_MYOPS_DEFINE_WGMMA_SS(wgmma_ss_m64n64k16_f16, 64, "f16", 32,
                           VLLM_MYOPS_WG_REGS32, VLLM_MYOPS_WG_ACC32, 32, 33,
                           34)
VLLM_MYOPS_DEFINE_WGMMA_SS(wgmma_ss_m64n128k16_bf16, 128, "bf16", 64,
                           VLLM_MYOPS_WG_REGS64, VLLM_MYOPS_WG_ACC64, 64, 65,
                           66)
VLLM_MYOPS_DEFINE_WGMMA_SS(wgmma_ss_m64n128k16_f16, 128, "f16", 64,
                           VLLM_MYOPS_WG_REGS64, VLLM_MYOPS_WG_ACC64, 64, 65,
                           66)

// wgmma_ss<T, kN, kAccumulate>: the SS instruction for element type T and
// N = kN (64 or 128).
template <typename T, int kN, bool kAccumulate>
__device__ __forceinline__ void wgmma_ss(float (&d)[kN / 2], uint64_t desc_a,
                                         uint64_t desc_b) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  static_assert(kBf16 || std::is_same_v<T, __half>, "fp16 or bf16");
  if constexpr (kN == 64) {
    if constexpr (kBf16)
      wgmma_ss_m64n64k16_bf16<kAccumulate>(d, desc_a, desc_b);
    else
      wgmma_ss_m64n64k16_f16<kAccumulate>(d, desc_a, desc_b);
  } else {
    static_assert(kN == 128, "N of 64 or 128");
    if constexpr (kBf16)
      wgmma_ss_m64n128k16_bf16<kAccumulate>(d, desc_a, desc_b);
    else
      wgmma_ss_m64n128k16_f16<kAccumulate>(d, desc_a, desc_b);
  }
}

// ---- wgmma.mma_async, A from registers, B MN-major (transposed) -----------
// D[64 x N] += A[64 x 16] (registers, the RS A fragment above) * B[16 x N]
// with B given MN-major (imm-trans-b = 1, sw128_mnmajor_desc): B's rows k
// are contiguous along N, as a V tile stored token by token is.
// Operands: NACC accumulators %0.., A %A0..%A3, desc_b %IB, scale-d %IS.
#define VLLM_MYOPS_DEFINE_WGMMA_RS_TB(NAME, N, TY, NACC, REGS, ACC, A0, A1, \
                                      A2, A3, IB, IS)                       \
  __device__ __forceinline__ void NAME(                                     \
      float (&d)[NACC], const uint32_t (&a)[4], uint64_t desc_b) {          \
    VLLM_MYOPS_WG_ASM(                                                      \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %" #IS                            \
        ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY   \
        " " REGS ", {%" #A0 ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #IB        \
        ", p, 1, 1, 1;\n}\n" : ACC(VLLM_MYOPS_WG_RW) : "r"(a[0]),           \
        "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));              \
  }

VLLM_MYOPS_DEFINE_WGMMA_RS_TB(wgmma_rs_tb_m64n64k16_bf16, 64, "bf16", 32,
                              VLLM_MYOPS_WG_REGS32, VLLM_MYOPS_WG_ACC32, 32, 33,
                              34, 35, 36, 37)
VLLM_MYOPS_DEFINE_WGMMA_RS_TB(wgmma_rs_tb_m64n64k16_f16, 64, "f16", 32,
                              VLLM_MYOPS_WG_REGS32, VLLM_MYOPS_WG_ACC32, 32, 33,
                              34, 35, 36, 37)
VLLM_MYOPS_DEFINE_WGMMA_RS_TB(wgmma_rs_tb_m64n128k16_bf16, 128, "bf16", 64,
                              VLLM_MYOPS_WG_REGS64, VLLM_MYOPS_WG_ACC64, 64, 65,
                              66, 67, 68, 69)
VLLM_MYOPS_DEFINE_WGMMA_RS_TB(wgmma_rs_tb_m64n128k16_f16, 128, "f16", 64,
                              VLLM_MYOPS_WG_REGS64, VLLM_MYOPS_WG_ACC64, 64, 65,
                              66, 67, 68, 69)

// wgmma_rs_tb<T, kN>: the RS instruction with MN-major B for element type T
// and N = kN (64 or 128).
template <typename T, int kN>
__device__ __forceinline__ void wgmma_rs_tb(float (&d)[kN / 2],
                                            const uint32_t (&a)[4],
                                            uint64_t desc_b) {
  constexpr bool kBf16 = std::is_same_v<T, __nv_bfloat16>;
  static_assert(kBf16 || std::is_same_v<T, __half>, "fp16 or bf16");
  if constexpr (kN == 64) {
    if constexpr (kBf16)
      wgmma_rs_tb_m64n64k16_bf16(d, a, desc_b);
    else
      wgmma_rs_tb_m64n64k16_f16(d, a, desc_b);
  } else {
    static_assert(kN == 128, "N of 64 or 128");
    if constexpr (kBf16)
      wgmma_rs_tb_m64n128k16_bf16(d, a, desc_b);
    else
      wgmma_rs_tb_m64n128k16_f16(d, a, desc_b);
  }
}

}  // namespace vllm_myops::sm90
