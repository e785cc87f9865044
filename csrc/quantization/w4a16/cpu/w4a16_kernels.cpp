// SPDX-License-Identifier: Apache-2.0
// Host entry points of the CPU W4A16 ops: argument checks, the repack into
// the CPU tile arrangement (documented in w4a16_kernels_isa.cpp), the fp32
// copy of the activations, ISA and inner-path choice and the launch
// parallel over n-tiles.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
  #include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
  #include <sys/syscall.h>
  #include <unistd.h>
#endif

#include "core/checks.h"
#include "core/env_choice.h"
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

// Row thresholds, from the W4A16 benchmark on an AMX machine
// (docs/quantization/design.md): the bf16 row-block path is the fastest at
// M = 1 and ties AMX at M = 2 (AMX wins the small shapes there); without
// AMX the row-block path is taken at M <= 2 and the AVX512-BF16 panel from
// M = 3, where it is no slower than fp32 FMA (docs/quantization/log/).
constexpr int64_t kAmxMinM = 2;
constexpr int64_t kBf16RowsMaxM = 2;
// fp16 a runs AMX on two bf16 planes (twice the tile products): fp32 FMA
// tied it at M = 4 and lost from M = 8 (its time grows with M, AMX's
// barely: the decode dominates).
constexpr int64_t kAmxMinMFp16 = 5;

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx512bf16");
  return has;
#else
  return false;
#endif
}

// AMX-BF16 usable: the CPU has it (cpuid leaf 7: EDX bit 22 AMX-BF16, bit
// 24 AMX-TILE) and Linux grants this process the tile data state (it is
// off until requested; a refusal, e.g. an old kernel, means no AMX).
bool amx_usable() {
#if defined(__linux__) && defined(__x86_64__)
  static const bool ok = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    if (!(edx & (1u << 22)) || !(edx & (1u << 24))) return false;
    if (!cpu_has_avx512_bf16()) return false;  // the panel decode uses it
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
#else
  return false;
#endif
}

// VLLM_MYOPS_W4A16_CPU_PATH (read once): "amx", "avx512_bf16" or
// "avx512" forces that path for every call the avx512 ISA runs (amx: both
// dtypes; avx512_bf16: bf16 activations, fp16 runs fp32), so tests can
// cover each; unset or "auto" chooses by M. A forced path this process cannot
// run is an error, never a silent fallback.
enum class Forced { kAuto, kAmx, kBf16, kFp32 };

Forced forced_path() {
  static const Forced f =
      env::choice("VLLM_MYOPS_W4A16_CPU_PATH", Forced::kAuto,
                  {{"amx", Forced::kAmx},
                   {"avx512_bf16", Forced::kBf16},
                   {"avx512", Forced::kFp32}});
  return f;
}

// out[g]: the fp32 sum of row[0, k) over group g of group_rows (16 lanes,
// which the compiler vectorizes); the zero-point term of every CPU path.
template <typename S>
void row_group_sums(const S* row, int64_t k, int64_t groups, int64_t group_rows,
                    float* out) {
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t k0 = g * group_rows;
    const int64_t k1 = std::min(k, k0 + group_rows);
    float lane[16] = {};
    int64_t i = k0;
    for (; i + 16 <= k1; i += 16)
      for (int j = 0; j < 16; ++j) lane[j] += float(row[i + j]);
    for (int j = 0; i < k1; ++i, ++j) lane[j] += float(row[i]);
    float t = 0.f;
    for (int j = 0; j < 16; ++j) t += lane[j];
    out[g] = t;
  }
}

// a [m, k] (row stride >= k) -> ah: bf16 [planes, rows, lda], zero past k
// and m (rows: round_up(m, 16) for the panel paths, m for the row-block
// path, which reads no padding row), row-major or, for AMX, in tile order:
// [16-row blocks]
// [32-column steps][16][32], so a tile is 1 KiB contiguous (row-major, its
// rows would be lda apart, a power of two for most K: one L1 set). bf16 a:
// one plane, a itself. fp16 a (AMX): two, hi = bf16(a) and lo = a - hi,
// exact (11 significant bits; fp16's range is inside bf16's normal range).
// sums [m, groups]: row_group_sums of each row.
template <typename T>
void pack_a_bf16(const at::Tensor& a, int64_t m, int64_t k, int64_t lda,
                 int64_t groups, int64_t group_rows, bool tile_order,
                 at::Tensor& ah, at::Tensor& sums) {
  constexpr bool kSplit = std::is_same_v<T, c10::Half>;
  const T* src = static_cast<const T*>(a.data_ptr());
  const int64_t lds = a.stride(0);
  auto* dst = static_cast<c10::BFloat16*>(ah.data_ptr());
  float* sum = sums.data_ptr<float>();
  const int64_t mp = ah.size(-2);
  const int64_t plane = mp * lda;
  const int64_t steps = lda / 32;
  // Only the padding is cleared: at M = 1 the whole buffer is 16 rows.
  if (tile_order) {
    std::memset(static_cast<void*>(dst), 0,
                size_t(ah.numel()) * sizeof(uint16_t));
  } else {
    for (int64_t pl = 0; pl < ah.size(0); ++pl) {
      c10::BFloat16* d = dst + pl * plane;
      for (int64_t r = 0; r < m; ++r)
        std::memset(static_cast<void*>(d + r * lda + k), 0,
                    size_t(lda - k) * sizeof(uint16_t));
      std::memset(static_cast<void*>(d + m * lda), 0,
                  size_t((mp - m) * lda) * sizeof(uint16_t));
    }
  }
  for (int64_t r = 0; r < m; ++r) {
    const T* ar = src + r * lds;
    c10::BFloat16* d =
        tile_order ? dst + (r / 16 * steps * 16 + r % 16) * 32 : dst + r * lda;
    for (int64_t i = 0; i < k; ++i) {
      const int64_t idx = tile_order ? i / 32 * 512 + i % 32 : i;
      if constexpr (kSplit) {
        const float f = float(ar[i]);
        const c10::BFloat16 hi(f);
        d[idx] = hi;
        d[plane + idx] = c10::BFloat16(std::isfinite(f) ? f - float(hi) : 0.f);
      } else {
        d[idx] = ar[i];
      }
    }
    row_group_sums(ar, k, groups, group_rows, sum + r * groups);
  }
}

// a [m, k] (row stride >= k) -> af: fp32 [m, lda], zero past k, and sums
// [m, groups]: the fp32 sum of af over each group, in one pass (at M = 1 a
// zeroed buffer, a copy and a reduction were each an ATen call).
template <typename T>
void pack_a_f32(const at::Tensor& a, int64_t m, int64_t k, int64_t lda,
                int64_t groups, int64_t group_rows, at::Tensor& af,
                at::Tensor& sums) {
  const T* src = static_cast<const T*>(a.data_ptr());
  const int64_t lds = a.stride(0);
  float* dst = af.data_ptr<float>();
  float* sum = sums.data_ptr<float>();
  for (int64_t r = 0; r < m; ++r) {
    const T* ar = src + r * lds;
    float* d = dst + r * lda;
    for (int64_t i = 0; i < k; ++i) d[i] = float(ar[i]);
    std::memset(static_cast<void*>(d + k), 0, size_t(lda - k) * sizeof(float));
    row_group_sums(d, k, groups, group_rows, sum + r * groups);
  }
}

W4A16CpuPath choose_path(at::ScalarType dtype, int64_t m) {
  const Forced f = forced_path();
  const bool avx512 = cpu_isa() == CpuIsa::kAvx512;
  TORCH_CHECK(f == Forced::kAuto || avx512,
              "VLLM_MYOPS_W4A16_CPU_PATH forces an avx512 path but the CPU "
              "kernels run the ",
              cpu_isa_name(cpu_isa()), " ISA");
  TORCH_CHECK(f != Forced::kAmx || amx_usable(),
              "VLLM_MYOPS_W4A16_CPU_PATH=amx: AMX-BF16 is not usable here "
              "(CPU without it, or Linux refused the tile state)");
  TORCH_CHECK(f != Forced::kBf16 || cpu_has_avx512_bf16(),
              "VLLM_MYOPS_W4A16_CPU_PATH=avx512_bf16: this CPU lacks "
              "AVX512-BF16");
  if (!avx512 || f == Forced::kFp32) return W4A16CpuPath::kFp32;
  if (dtype != at::kBFloat16) {  // fp16: AMX on two bf16 planes, or fp32
    const bool amx = f == Forced::kAmx ||
                     (f == Forced::kAuto && amx_usable() && m >= kAmxMinMFp16);
    return amx ? W4A16CpuPath::kAmx : W4A16CpuPath::kFp32;
  }
  const W4A16CpuPath bf16 =
      m <= kBf16RowsMaxM ? W4A16CpuPath::kBf16Rows : W4A16CpuPath::kBf16Panel;
  switch (f) {
    case Forced::kAmx:
      return W4A16CpuPath::kAmx;
    case Forced::kBf16:
      return bf16;
    default:
      break;
  }
  if (!cpu_has_avx512_bf16()) return W4A16CpuPath::kFp32;
  if (amx_usable() && m >= kAmxMinM) return W4A16CpuPath::kAmx;
  return bf16;
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
  const at::Tensor a1 = w4a16::unit_stride_rows(a);  // the packs read stride 1

  // fp32 activations, zero past K (padding codes then add nothing), and the
  // sum of a over each group for the zero-point term.
  const int64_t k_words = ceil_div(s.k, kPack);
  const int64_t group_rows = group_size == -1 ? s.k : group_size;
  // The bf16 paths step K by 32 up to the tile's end.
  const int64_t lda = std::max(s.k_tiles * kTile, s.groups * group_rows);
  const cpu::W4A16CpuPath path = cpu::choose_path(a.scalar_type(), s.m);
  at::Tensor af, ah, sums;
  if (path == cpu::W4A16CpuPath::kFp32) {
    af = at::empty({s.m, lda}, a.options().dtype(at::kFloat));
    sums = at::empty({s.m, s.groups}, a.options().dtype(at::kFloat));
    if (a.scalar_type() == at::kHalf) {
      cpu::pack_a_f32<c10::Half>(a1, s.m, s.k, lda, s.groups, group_rows, af,
                                 sums);
    } else {
      cpu::pack_a_f32<c10::BFloat16>(a1, s.m, s.k, lda, s.groups, group_rows,
                                     af, sums);
    }
  } else {
    // The bf16 paths read a in bf16 only: one pass copies it (AMX: in tile
    // order) and sums the groups.
    const bool fp16 = a.scalar_type() == at::kHalf;
    const int64_t rows =
        path == cpu::W4A16CpuPath::kBf16Rows ? s.m : ceil_div(s.m, 16) * 16;
    ah = at::empty({fp16 ? 2 : 1, rows, lda}, a.options().dtype(at::kBFloat16));
    sums = at::empty({s.m, s.groups}, a.options().dtype(at::kFloat));
    const bool tile_order = path == cpu::W4A16CpuPath::kAmx;
    if (fp16) {
      cpu::pack_a_bf16<c10::Half>(a1, s.m, s.k, lda, s.groups, group_rows,
                                  tile_order, ah, sums);
    } else {
      cpu::pack_a_bf16<c10::BFloat16>(a1, s.m, s.k, lda, s.groups, group_rows,
                                      tile_order, ah, sums);
    }
  }
  at::Tensor bias_f;
  if (bias.has_value() && bias->defined()) bias_f = bias->to(at::kFloat);

  cpu::W4A16CpuParams p{};
  p.a = af.defined() ? af.data_ptr<float>() : nullptr;
  p.a_half = ah.defined() ? ah.data_ptr() : nullptr;
  p.a_rows = ah.defined() ? ah.size(1) : 0;
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
  p.path = path;

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

// The act-order column gather on the CPU: out[m, j] = a[m, perm[j]]. perm's
// values are checked here (no device round trip on the CPU), so a bad one
// fails naming perm instead of being clamped as on CUDA.
at::Tensor w4a16_permute_cols_cpu(const at::Tensor& a, const at::Tensor& perm) {
  using namespace vllm_myops;
  w4a16::check_permute_cols_args(a, perm);
  const int64_t k = a.size(1);
  if (k > 0) {
    const auto [lo, hi] = at::aminmax(perm);
    const int64_t min_v = lo.item<int32_t>(), max_v = hi.item<int32_t>();
    TORCH_CHECK(min_v >= 0 && max_v < k,
                "w4a16_permute_cols: perm's values must be in [0, K=", k,
                "), got values in [", min_v, ", ", max_v, "]");
  }
  return at::index_select(a, 1, perm).contiguous();
}
