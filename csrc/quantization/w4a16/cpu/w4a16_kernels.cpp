// SPDX-License-Identifier: Apache-2.0
// Host entry points of the CPU W4A16 ops: argument checks, the repack into
// the CPU tile arrangement (documented in w4a16_kernels_isa.cpp), the fp32
// copy of the activations, ISA choice and the launch parallel over n-tiles.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "core/checks.h"
#include "cpu/isa.h"
#include "ops.h"
#include "quantization/w4a16/cpu/w4a16_kernels_isa.h"
#include "quantization/w4a16/w4a16_args.h"

namespace vllm_myops::cpu {
namespace {

W4A16TilesFn tiles_fn() {
  static const PerIsa<W4A16TilesFn> table =
      MYOPS_PER_ISA_TABLE(w4a16_gemm_tiles);
  return table.get(cpu_isa());
}

}  // namespace
}  // namespace vllm_myops::cpu

namespace {

// GPTQ nibble i (row i of the word's 8) -> the CPU arrangement's nibble p
// with kNibbleRow[p] = i: even rows in the low half-word, odd in the high.
uint32_t reorder_nibbles(uint32_t w) {
  constexpr int kNibbleRow[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  uint32_t out = 0;
  for (int p = 0; p < 8; ++p)
    out |= ((w >> (4 * kNibbleRow[p])) & 0xFu) << (4 * p);
  return out;
}

}  // namespace

using vllm_myops::w4a16::ceil_div;
using vllm_myops::w4a16::kPack;
using vllm_myops::w4a16::kTile;
using vllm_myops::w4a16::kTileWords;

at::Tensor w4a16_repack_cpu(const at::Tensor& qweight, int64_t size_k,
                            int64_t size_n) {
  vllm_myops::w4a16::check_repack_args(qweight, size_k, size_n);
  vllm_myops::checks::check_devices("w4a16_repack", {"qweight", &qweight}, {},
                                    c10::DeviceType::CPU);
  const int64_t n_tiles = ceil_div(size_n, kTile);
  const int64_t k_tiles = ceil_div(size_k, kTile);
  const int64_t k_words = ceil_div(size_k, kPack);
  at::Tensor out = at::zeros({n_tiles, k_tiles, kTileWords}, qweight.options());
  const int32_t* src = qweight.data_ptr<int32_t>();
  int32_t* dst = out.data_ptr<int32_t>();
  // Nibbles past K in the last word are padding of any value: clear them.
  const int tail = int(size_k % kPack);
  const uint32_t last_mask = tail ? (uint32_t(1) << (4 * tail)) - 1 : ~0u;
  at::parallel_for(0, n_tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t nt = begin; nt < end; ++nt) {
      const int64_t col0 = nt * kTile;
      const int64_t cols = std::min(kTile, size_n - col0);
      int32_t* tile = dst + nt * k_tiles * kTileWords;
      // The n-tile is a dense [k_tiles * 8, 64] word matrix (see the kernel).
      for (int64_t r = 0; r < k_words; ++r) {
        const int32_t* s = src + r * size_n + col0;
        int32_t* d = tile + r * kTile;
        const uint32_t mask = r == k_words - 1 ? last_mask : ~0u;
        for (int64_t c = 0; c < cols; ++c)
          d[c] = int32_t(reorder_nibbles(uint32_t(s[c]) & mask));
      }
    }
  });
  return out;
}

at::Tensor w4a16_gemm_cpu(const at::Tensor& a, const at::Tensor& b_packed,
                          const at::Tensor& scales,
                          const std::optional<at::Tensor>& zeros,
                          const std::optional<at::Tensor>& bias, int64_t size_k,
                          int64_t size_n, int64_t group_size) {
  using namespace vllm_myops;
  const w4a16::GemmShape s = w4a16::check_gemm_args(
      a, b_packed, scales, zeros, bias, size_k, size_n, group_size);
  checks::check_devices("w4a16_gemm", {"a", &a}, {}, c10::DeviceType::CPU);
  at::Tensor out = at::empty({s.m, s.n}, a.options());
  if (s.m == 0) return out;

  // fp32 activations, zero past K (padding codes then add nothing), and the
  // sum of a over each group for the zero-point term.
  const int64_t k_words = ceil_div(s.k, kPack);
  const int64_t group_rows = group_size == -1 ? s.k : group_size;
  const int64_t lda = std::max(k_words * kPack, s.groups * group_rows);
  at::Tensor af = at::zeros({s.m, lda}, a.options().dtype(at::kFloat));
  af.narrow(1, 0, s.k).copy_(a);
  // Decode rows in a's dtype too, for the bf16 dot-product path (M <= 2).
  at::Tensor ah;
  if (s.m <= 2 && a.scalar_type() == at::kBFloat16) {
    ah = at::zeros({s.m, lda}, a.options());
    ah.narrow(1, 0, s.k).copy_(a);
  }
  at::Tensor sums = af.narrow(1, 0, s.groups * group_rows)
                        .view({s.m, s.groups, group_rows})
                        .sum(-1)
                        .contiguous();
  at::Tensor bias_f;
  if (bias.has_value() && bias->defined()) bias_f = bias->to(at::kFloat);

  cpu::W4A16CpuParams p{};
  p.a = af.data_ptr<float>();
  p.a_half = ah.defined() ? ah.data_ptr() : nullptr;
  p.lda = lda;
  p.a_sums = sums.data_ptr<float>();
  p.b = b_packed.data_ptr<int32_t>();
  p.scales = scales.data_ptr();
  p.zeros = zeros.has_value() && zeros->defined() ? zeros->data_ptr() : nullptr;
  p.bias = bias_f.defined() ? bias_f.data_ptr<float>() : nullptr;
  p.out = out.data_ptr();
  p.m = s.m;
  p.n = s.n;
  p.k = s.k;
  p.k_words = k_words;
  p.k_tiles = s.k_tiles;
  p.group_rows = group_rows;
  p.groups = s.groups;
  p.dtype = checks::to_dtype(a.scalar_type());

  const cpu::W4A16TilesFn fn = cpu::tiles_fn();
  // A small product runs inline: waking threads would cost more.
  if (s.m * s.k * s.n < (int64_t{1} << 18)) {
    fn(p, 0, s.n_tiles);
  } else {
    at::parallel_for(0, s.n_tiles, 1,
                     [&](int64_t begin, int64_t end) { fn(p, begin, end); });
  }
  return out;
}
