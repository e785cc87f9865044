// SPDX-License-Identifier: Apache-2.0
//
// paged_kv_write on CUDA: key/value [T, H_kv, D] -> kv_cache [num_blocks,
// H_kv, block_size, 2*D] at slot_mapping[t] (K in [..., :D], V in [..., D:]).
//
// One warp per (token, kv head): the token's K and V rows land in one
// contiguous 4*D-byte run of the cache, copied as 16-byte vectors (D = 128:
// one vector per lane). Rows that are not 16-byte aligned (odd strides of a
// fused qkv view) take a 2-byte element path. A slot < 0 is padding and is
// skipped; a slot >= num_blocks * block_size is skipped too (on CPU it is an
// error, but checking it here would need a device->host copy of the slots).
// Bytes: 2 * T * H_kv * D * dtype read + the same written; nothing else.

#include <cstdint>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include "attention/attention_args.h"
#include "ops.h"

namespace vllm_myops {
namespace {

constexpr int kWriteWarps = 4;

struct KvWriteArgs {
  const uint16_t* key;
  const uint16_t* value;
  uint16_t* cache;
  const int64_t* slots;
  int64_t key_s0, key_s1, value_s0, value_s1;  // elements
  int64_t items;                               // T * H_kv
  int64_t num_slots;                           // num_blocks * block_size
  int num_kv_heads, head_dim, block_size;
};

// 16-bit elements are moved as raw bits: the copy is exact for both dtypes.
template <bool kVector>
__global__ void __launch_bounds__(kWriteWarps * 32)
    paged_kv_write_kernel(const KvWriteArgs a) {
  const int64_t item =
      int64_t(blockIdx.x) * kWriteWarps + int64_t(threadIdx.x / 32);
  if (item >= a.items) return;
  const int lane = threadIdx.x % 32;
  const int64_t t = item / a.num_kv_heads;
  const int h = int(item % a.num_kv_heads);
  const int64_t slot = a.slots[t];
  if (slot < 0 || slot >= a.num_slots) return;  // padding / out of range
  const int64_t blk = slot / a.block_size, off = slot % a.block_size;
  const int d = a.head_dim;
  uint16_t* dst =
      a.cache + ((blk * a.num_kv_heads + h) * a.block_size + off) * (2 * d);
  const uint16_t* k = a.key + t * a.key_s0 + h * a.key_s1;
  const uint16_t* v = a.value + t * a.value_s0 + h * a.value_s1;
  if constexpr (kVector) {
    const int vecs = d / 8;  // per row
    for (int c = lane; c < 2 * vecs; c += 32) {
      const uint4* src = c < vecs
                             ? reinterpret_cast<const uint4*>(k) + c
                             : reinterpret_cast<const uint4*>(v) + c - vecs;
      reinterpret_cast<uint4*>(dst)[c] = __ldg(src);
    }
  } else {
    for (int e = lane; e < 2 * d; e += 32) {
      dst[e] = e < d ? k[e] : v[e - d];
    }
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace
}  // namespace vllm_myops

using namespace vllm_myops;

void paged_kv_write_cuda(const at::Tensor& key, const at::Tensor& value,
                         at::Tensor& kv_cache, const at::Tensor& slot_mapping) {
  const attention::KvWriteShape s =
      attention::check_kv_write_args(key, value, kv_cache, slot_mapping);
  if (s.num_tokens == 0 || s.num_kv_heads == 0 || s.head_dim == 0) return;
  const c10::cuda::CUDAGuard device_guard(key.device());

  KvWriteArgs a{};
  a.key = static_cast<const uint16_t*>(key.data_ptr());
  a.value = static_cast<const uint16_t*>(value.data_ptr());
  a.cache = static_cast<uint16_t*>(kv_cache.data_ptr());
  a.slots = slot_mapping.data_ptr<int64_t>();
  a.key_s0 = key.stride(0);
  a.key_s1 = key.stride(1);
  a.value_s0 = value.stride(0);
  a.value_s1 = value.stride(1);
  a.items = s.num_tokens * s.num_kv_heads;
  a.num_slots = s.num_blocks * s.block_size;
  a.num_kv_heads = static_cast<int>(s.num_kv_heads);
  a.head_dim = static_cast<int>(s.head_dim);
  a.block_size = static_cast<int>(s.block_size);

  // Every row start 16-byte aligned: base pointers and strides (in elements)
  // multiples of 8, D a multiple of 8 (the cache row is then aligned too).
  const bool vector = s.head_dim % 8 == 0 && aligned16(a.key) &&
                      aligned16(a.value) && aligned16(a.cache) &&
                      a.key_s0 % 8 == 0 && a.key_s1 % 8 == 0 &&
                      a.value_s0 % 8 == 0 && a.value_s1 % 8 == 0;
  const int64_t blocks = (a.items + kWriteWarps - 1) / kWriteWarps;
  TORCH_CHECK(blocks < (int64_t{1} << 31),
              "paged_kv_write: num_tokens * num_kv_heads is too large for "
              "one CUDA grid, got ",
              a.items);
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (vector) {
    paged_kv_write_kernel<true>
        <<<unsigned(blocks), kWriteWarps * 32, 0, stream>>>(a);
  } else {
    paged_kv_write_kernel<false>
        <<<unsigned(blocks), kWriteWarps * 32, 0, stream>>>(a);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
