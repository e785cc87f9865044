// SPDX-License-Identifier: Apache-2.0
// CPU W4A16 GEMM tiles, compiled once per ISA (cpu/isa.h).
//
// CPU tile arrangement (what w4a16_repack_cpu writes): the 512 int32 words
// of tile (nt, kt) are the GPTQ words of that 64x64 block, row-major, with
// the nibbles of each word reordered:
//   word[r * 64 + c] holds the codes of rows k = kt*64 + 8r + i, i < 8, of
//   column nt*64 + c; nibble p holds row i = kNibbleRow[p] = 0 2 4 6 1 3 5 7
//   (low half-word: the even rows, high half-word: the odd ones).
// Padding (rows >= K, columns >= N) is code 0. The k-tiles of one n-tile
// are contiguous, so an n-tile is one dense [ceil(K/64) * 8, 64] word
// matrix: a vector load of 16 (AVX-512) or 8 (AVX2) consecutive words gives
// 8 K-rows of 16/8 adjacent columns, and nibble p of every lane is the same
// K-row, so a dequantized row vector is one shift plus one lookup (AVX-512
// vpermps on the low 4 bits of each lane: no mask, no int->float
// conversion) or shift, mask, convert (AVX2). The nibble order serves the
// AVX512-BF16 path: after a shift by 4p, the two half-words of a lane index
// rows 2p and 2p + 1, so one vpermw gives the bf16 pairs vdpbf16ps takes.
//
// Math: W[k, n] = (q - z) * s in fp32. With q' = q - c (c = 8 with the
// lookups, 0 with the conversion), per group and column
//   sum_k a[k] * (q - z) = sum_k a[k] * q' - (z - c) * sum_k a[k],
// so the inner loop is one FMA per weight and row; the zero and the scale
// are applied once per group (sum_k a[k] per group comes from the host).
// Symmetric weights with c = 8 need no correction at all. Accumulation is
// fp32 throughout; the output is rounded once to the dtype. The BF16 paths
// (vdpbf16ps or AMX tdpbf16ps) multiply a by q' in bf16: q' in [-8, 7] is
// exact in bf16, bf16 a already is bf16 (fp16 a is split exactly into
// hi + lo, two bf16 products), and the products are exact in fp32, so only
// the fp32 sums round, as in the other paths (both
// instructions flush bf16 denormals, |a| < 2^-126, to zero: far below the
// output's rounding). The weight is never rounded to bf16: the scale is
// applied to the fp32 partial sum of each group.
//
// Paths (the host picks one per call: W4A16CpuPath, w4a16_kernels.cpp):
// - fp32 (every ISA; fp16 activations below AMX's M): each n-tile is done for
//   blocks of up to 4 rows of a at a time, 4 x 64 (AVX-512) or 4 x 16
//   (AVX2, 16 ymm registers) fp32 accumulators, so each dequantized weight
//   vector feeds 4 rows.
// - bf16 rows (AVX512-BF16, small M): the same blocking with vdpbf16ps.
// - bf16 panel / AMX (AVX512-BF16 / AMX-BF16, larger M): a chunk of the
//   n-tile is decoded once into a bf16 panel of q - 8 and every row of a
//   runs over it (vdpbf16ps, or AMX tdpbf16ps on 16 x 32 tiles of a; fp16
//   a goes to AMX as two exact bf16 planes, hi + lo, never rounded to one
//   bf16); see "Panel paths" in w4a16_avx512_panel.h.
// At M = 1 the time is the weight stream from memory (32 bytes per 64
// weights of a K-row), hence the software prefetch.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cpu/isa.h"
#include "quantization/w4a16/cpu/w4a16_cpu_block.h"
#include "quantization/w4a16/cpu/w4a16_kernels_isa.h"

#if defined(CPU_CAPABILITY_AVX512)
  #include "quantization/w4a16/cpu/w4a16_avx512_panel.h"
  #include "quantization/w4a16/cpu/w4a16_avx512_rows.h"
#endif

namespace vllm_myops::cpu {
namespace {

template <typename T>
void tiles(const W4A16CpuParams& p, int64_t nt_begin, int64_t nt_end) {
  const Lanes lanes;
  std::vector<float> sbuf(p.groups * kTileN), zbuf(p.groups * kTileN);
  alignas(64) float tot[4 * kTileN];
  const bool correct = p.zeros != nullptr || Lanes::kOffset != 8;
  for (int64_t nt = nt_begin; nt < nt_end; ++nt) {
    const int64_t col0 = nt * kTileN;
    const int cols = int(std::min<int64_t>(kTileN, p.n - col0));
    load_group_params<T>(p, col0, cols, sbuf.data(), zbuf.data());
    if (nt + 1 < nt_end) prefetch_group_params<T>(p, col0 + kTileN);
    const int32_t* bt = p.b + nt * p.k_tiles * 512;
    for (int64_t m0 = 0; m0 < p.m; m0 += 4) {
      const int mb = int(std::min<int64_t>(4, p.m - m0));
      std::fill(tot, tot + 4 * kTileN, 0.f);
      for (int c0 = 0; c0 < kTileN; c0 += Lanes::kCols) {
        if (c0 >= cols) break;  // all-padding columns
        switch (mb) {
          case 4:
            block<4>(lanes, p, bt, sbuf.data(), zbuf.data(), correct, m0, c0,
                     tot);
            break;
          case 3:
            block<3>(lanes, p, bt, sbuf.data(), zbuf.data(), correct, m0, c0,
                     tot);
            break;
          case 2:
            block<2>(lanes, p, bt, sbuf.data(), zbuf.data(), correct, m0, c0,
                     tot);
            break;
          default:
            block<1>(lanes, p, bt, sbuf.data(), zbuf.data(), correct, m0, c0,
                     tot);
            break;
        }
      }
      store_rows<T>(p, tot, m0, mb, col0, cols);
    }
  }
}

}  // namespace

void MYOPS_CPU_ISA_FN(w4a16_gemm_tiles)(const W4A16CpuParams& p,
                                        int64_t nt_begin, int64_t nt_end) {
  if (p.dtype == DType::kBFloat16) {
#if defined(CPU_CAPABILITY_AVX512)
    // The host chose the path from the CPU's features (w4a16_kernels.cpp).
    switch (p.path) {
      case W4A16CpuPath::kBf16Rows:
        return tiles_bf16(p, nt_begin, nt_end);
      case W4A16CpuPath::kBf16Panel:
        return tiles_panel<false, c10::BFloat16>(p, nt_begin, nt_end);
      case W4A16CpuPath::kAmx:
        return tiles_panel<true, c10::BFloat16>(p, nt_begin, nt_end);
      default:
        break;
    }
#endif
    tiles<c10::BFloat16>(p, nt_begin, nt_end);
  } else {
#if defined(CPU_CAPABILITY_AVX512)
    if (p.path == W4A16CpuPath::kAmx)
      return tiles_panel<true, c10::Half>(p, nt_begin, nt_end);
#endif
    tiles<c10::Half>(p, nt_begin, nt_end);
  }
}

}  // namespace vllm_myops::cpu
