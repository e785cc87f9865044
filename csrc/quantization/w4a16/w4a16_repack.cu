// SPDX-License-Identifier: Apache-2.0
//
// w4a16_repack on CUDA: GPTQ qweight int32 [ceil(K/8), N] (code q[k][n] in
// nibble k % 8 of qweight[k / 8][n]) -> b_packed int32 [ceil(N/64),
// ceil(K/64), 512], one 64x64 tile per (n-tile, k-tile), K and N padded to
// 64 with code 0.
//
// Arrangement of the 512 words of a tile (cuda/w4a16_layout.cuh has the
// maps and their compile-time checks): word w = s * 128 + lane * 4 + p holds
// the mma.sync m16n8k16 B-fragment codes of lane `lane` (g = lane / 4,
// t = lane % 4) for k16 step s and n8 blocks 2p, 2p + 1; nibble i of it is
//   k = 16 s + 2 t + (i / 4) + 8 ((i % 4) & 1),
//   n = 16 p + 8 ((i % 4) >> 1) + g.
// A lane's 4 words of a step are contiguous (one 16-byte load) and a warp's
// loads of a step cover 512 contiguous bytes.
//
// Runs once per weight at load time: one thread per output word, gathering
// its 8 codes from qweight (reads are scattered but stay inside a 64-row x
// 64-column block of qweight; simplicity over speed here).

#include <algorithm>
#include <cstdint>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include "ops.h"
#include "quantization/w4a16/cuda/w4a16_layout.cuh"
#include "quantization/w4a16/w4a16_args.h"

namespace vllm_myops {
namespace {

namespace layout = w4a16::cuda_layout;

__global__ void w4a16_repack_kernel(const uint32_t* __restrict__ qweight,
                                    uint32_t* __restrict__ out, int64_t size_k,
                                    int64_t size_n, int64_t k_tiles,
                                    int64_t total_words) {
  for (int64_t idx =
           blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       idx < total_words; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t tile = idx / layout::kTileWords;
    const int w = static_cast<int>(idx % layout::kTileWords);
    const int64_t nt = tile / k_tiles;
    const int64_t kt = tile % k_tiles;
    uint32_t word = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const layout::TileCoord c = layout::nibble_coord(w, i);
      const int64_t k = kt * layout::kTileK + c.k;
      const int64_t n = nt * layout::kTileN + c.n;
      if (k < size_k && n < size_n) {
        const uint32_t packed = qweight[(k / 8) * size_n + n];
        word |= ((packed >> (4 * (k % 8))) & 0xFu) << (4 * i);
      }
    }
    out[idx] = word;
  }
}

}  // namespace
}  // namespace vllm_myops

using namespace vllm_myops;

at::Tensor w4a16_repack_cuda(const at::Tensor& qweight, int64_t size_k,
                             int64_t size_n) {
  w4a16::check_repack_args(qweight, size_k, size_n);
  const c10::cuda::CUDAGuard device_guard(qweight.device());
  const int64_t n_tiles = w4a16::ceil_div(size_n, w4a16::kTile);
  const int64_t k_tiles = w4a16::ceil_div(size_k, w4a16::kTile);
  at::Tensor out =
      at::empty({n_tiles, k_tiles, w4a16::kTileWords}, qweight.options());
  const int64_t total = out.numel();
  if (total == 0) return out;
  constexpr int kThreads = 256;
  const int64_t blocks =
      std::min<int64_t>(w4a16::ceil_div(total, kThreads), int64_t{1} << 20);
  w4a16_repack_kernel<<<static_cast<unsigned>(blocks), kThreads, 0,
                        at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const uint32_t*>(qweight.data_ptr<int32_t>()),
      reinterpret_cast<uint32_t*>(out.data_ptr<int32_t>()), size_k, size_n,
      k_tiles, total);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
