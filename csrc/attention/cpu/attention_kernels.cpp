// SPDX-License-Identifier: Apache-2.0
// Host entry points of the CPU paged attention ops: argument checks, the
// cache write, and the work split of paged_attention (the per-item kernel
// is attention_kernels_isa.cpp).
//
// Work split: one item per (sequence, kv head, block of query rows); a
// block holds up to kRowsPerItem query rows counting every head of the kv
// head's group (decode: one token, G heads). When a few items would hold
// most of the work (one long sequence, or fewer items than threads) their
// context is split into chunks of >= kMinChunk tokens: each chunk writes an
// unnormalised fp32 partial (acc, max, sum per row) and a merge pass
// combines them (flash-decoding). Items run longest first from a shared
// counter, so uneven items (causal prefill rows late in a sequence see
// more context) still balance over the threads.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "attention/attention_args.h"
#include "attention/cpu/attention_kernels_isa.h"
#include "core/checks.h"
#include "core/env_choice.h"
#include "cpu/isa.h"
#include "ops.h"

namespace vllm_myops::cpu {
namespace {

constexpr int64_t kRowsPerItem = 64;
constexpr int64_t kMinChunk = 256;
// Below this much work (rows x context tokens x D) one thread is faster
// than waking the others.
constexpr int64_t kInlineWork = int64_t{1} << 18;

AttentionItemFn item_fn() {
  static const PerIsa<AttentionItemFn> table =
      MYOPS_PER_ISA_TABLE(attention_item);
  return table.get(cpu_isa());
}

// The vdpbf16ps paths run where the avx512 ISA runs on AVX512-BF16.
bool can_run_bf16_dot() {
  return cpu_isa() == CpuIsa::kAvx512 && __builtin_cpu_supports("avx512bf16");
}

// VLLM_MYOPS_ATTENTION_CPU_PV (read once): "fp32" or "bf16_dot" forces
// that p . V path (attention_kernels_isa.h), so tests and A/B runs can cover
// each; unset or "auto" chooses. A forced path this process cannot run is an
// error, never a silent fallback.
PvPath pv_path() {
  static const PvPath path = [] {
    const PvPath p =
        env::choice("VLLM_MYOPS_ATTENTION_CPU_PV", PvPath::kAuto,
                    {{"fp32", PvPath::kFp32}, {"bf16_dot", PvPath::kBf16Dot}});
    TORCH_CHECK(p != PvPath::kBf16Dot || can_run_bf16_dot(),
                "VLLM_MYOPS_ATTENTION_CPU_PV=bf16_dot needs the avx512 ISA ",
                "and AVX512-BF16; this process runs ", cpu_isa_name(cpu_isa()));
    return p;
  }();
  return path;
}

// VLLM_MYOPS_ATTENTION_CPU_QK (read once): "bf16_dot" forces the
// vdpbf16ps q . k (attention_kernels_isa.h); unset or "auto" chooses.
QkPath qk_path() {
  static const QkPath path = [] {
    const QkPath q = env::choice("VLLM_MYOPS_ATTENTION_CPU_QK", QkPath::kAuto,
                                 {{"bf16_dot", QkPath::kBf16Dot}});
    TORCH_CHECK(q != QkPath::kBf16Dot || can_run_bf16_dot(),
                "VLLM_MYOPS_ATTENTION_CPU_QK=bf16_dot needs the avx512 ISA ",
                "and AVX512-BF16; this process runs ", cpu_isa_name(cpu_isa()));
    return q;
  }();
  return path;
}

struct Item {
  AttentionWorkItem w;
  int64_t cost;
  int64_t partial_offset;  // floats into the partial buffer, -1: none
};

// A context split: items [first, first + count) of one (sequence, kv head,
// row block), partial results at `partial`.
struct SplitGroup {
  int32_t seq, kv_head, q_begin, q_end;
  float* partial;
  int64_t count;
};

template <typename T>
void merge_group(const PagedAttentionParams& p, const SplitGroup& grp) {
  const int64_t d = p.head_dim;
  const int64_t g = p.num_heads / p.num_kv_heads;
  const int64_t rows = (grp.q_end - grp.q_begin) * g;
  const int64_t stride = rows * (d + 2);  // one split's partial
  const int64_t tok0 = p.query_start_loc[grp.seq] + grp.q_begin;
  std::vector<float> sum(d);
  for (int64_t r = 0; r < rows; ++r) {
    float mx = -INFINITY;
    for (int64_t k = 0; k < grp.count; ++k)
      mx = std::max(mx, grp.partial[k * stride + r * (d + 2) + d]);
    std::fill(sum.begin(), sum.end(), 0.f);
    float l = 0.f;
    for (int64_t k = 0; k < grp.count; ++k) {
      const float* part = grp.partial + k * stride + r * (d + 2);
      if (part[d + 1] == 0.f) continue;  // a chunk past this row's position
      const float c = std::exp2(part[d] - mx);
      l += part[d + 1] * c;
      for (int64_t j = 0; j < d; ++j) sum[j] += part[j] * c;
    }
    const int64_t i = r / g;
    const int64_t hq = grp.kv_head * g + r % g;
    T* o = static_cast<T*>(p.out) + (tok0 + i) * p.out_stride_t +
           hq * p.out_stride_h;
    const float inv = 1.f / l;
    for (int64_t j = 0; j < d; ++j) o[j] = T(sum[j] * inv);
  }
}

// Runs fn(i) for i in [0, n), the lowest index first, on every thread.
template <typename Fn>
void run_dynamic(int64_t n, bool inline_only, const Fn& fn) {
  if (inline_only || n <= 1 || at::get_num_threads() <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  const int64_t threads = std::min<int64_t>(at::get_num_threads(), n);
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  });
}

}  // namespace
}  // namespace vllm_myops::cpu

void paged_kv_write_cpu(const at::Tensor& key, const at::Tensor& value,
                        at::Tensor& kv_cache, const at::Tensor& slot_mapping) {
  using namespace vllm_myops;
  const attention::KvWriteShape s =
      attention::check_kv_write_args(key, value, kv_cache, slot_mapping);
  checks::check_devices("paged_kv_write", {"key", &key}, {},
                        c10::DeviceType::CPU);
  if (s.num_tokens == 0) return;
  attention::check_slots(s, slot_mapping);
  const int64_t* slots = slot_mapping.data_ptr<int64_t>();
  const int64_t d = s.head_dim;
  const int64_t bytes = d * key.element_size();
  const char* kb = static_cast<const char*>(key.data_ptr());
  const char* vb = static_cast<const char*>(value.data_ptr());
  char* cache = static_cast<char*>(kv_cache.data_ptr());
  const int64_t es = key.element_size();
  const int64_t ks0 = key.stride(0) * es, ks1 = key.stride(1) * es;
  const int64_t vs0 = value.stride(0) * es, vs1 = value.stride(1) * es;
  const int64_t token_bytes = 2 * bytes;  // K then V of one (slot, head)
  const int64_t head_bytes = s.block_size * token_bytes;
  const int64_t block_bytes = s.num_kv_heads * head_bytes;
  const int64_t grain =
      std::max<int64_t>(1, (int64_t{1} << 14) / (s.num_kv_heads * token_bytes));
  at::parallel_for(0, s.num_tokens, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t slot = slots[t];
      if (slot < 0) continue;  // padding
      char* dst = cache + (slot / s.block_size) * block_bytes +
                  (slot % s.block_size) * token_bytes;
      for (int64_t h = 0; h < s.num_kv_heads; ++h) {
        std::memcpy(dst + h * head_bytes, kb + t * ks0 + h * ks1, bytes);
        std::memcpy(dst + h * head_bytes + bytes, vb + t * vs0 + h * vs1,
                    bytes);
      }
    }
  });
}

void paged_attention_cpu(at::Tensor& out, const at::Tensor& query,
                         const at::Tensor& kv_cache,
                         const at::Tensor& query_start_loc,
                         const at::Tensor& seq_lens,
                         const at::Tensor& block_table, double scale,
                         int64_t max_query_len, int64_t max_seq_len) {
  using namespace vllm_myops;
  using cpu::AttentionWorkItem;
  const attention::AttentionShape s = attention::check_attention_args(
      out, query, kv_cache, query_start_loc, seq_lens, block_table, scale,
      max_query_len, max_seq_len);
  checks::check_devices("paged_attention", {"out", &out}, {},
                        c10::DeviceType::CPU);
  TORCH_CHECK(s.head_dim % 16 == 0, "paged_attention: head_dim must be a ",
              "multiple of 16 on CPU, got ", s.head_dim);
  attention::check_attention_indices(s, query_start_loc, seq_lens, block_table,
                                     max_query_len, max_seq_len);
  if (s.num_seqs == 0 || s.num_tokens == 0) return;

  cpu::PagedAttentionParams p{};
  p.out = out.data_ptr();
  p.out_stride_t = out.stride(0);
  p.out_stride_h = out.stride(1);
  p.query = query.data_ptr();
  p.q_stride_t = query.stride(0);
  p.q_stride_h = query.stride(1);
  p.kv_cache = kv_cache.data_ptr();
  p.query_start_loc = query_start_loc.data_ptr<int32_t>();
  p.seq_lens = seq_lens.data_ptr<int32_t>();
  p.block_table = block_table.data_ptr<int32_t>();
  p.block_table_stride = block_table.stride(0);
  p.num_heads = s.num_heads;
  p.num_kv_heads = s.num_kv_heads;
  p.head_dim = s.head_dim;
  p.block_size = s.block_size;
  p.scale = float(scale);
  p.dtype = checks::to_dtype(query.scalar_type());
  p.qk_path = cpu::qk_path();
  p.pv_path = cpu::pv_path();

  const int64_t g = s.num_heads / s.num_kv_heads;
  const int64_t rows_per_item = std::max<int64_t>(1, cpu::kRowsPerItem / g);
  std::vector<cpu::Item> items;
  int64_t total = 0;
  for (int64_t b = 0; b < s.num_seqs; ++b) {
    const int32_t q_len = p.query_start_loc[b + 1] - p.query_start_loc[b];
    const int32_t ctx0 = p.seq_lens[b] - q_len;
    for (int32_t i0 = 0; i0 < q_len; i0 += int32_t(rows_per_item)) {
      const int32_t i1 = std::min<int32_t>(q_len, i0 + int32_t(rows_per_item));
      const int32_t kv_end = ctx0 + i1;  // the last row sees positions < this
      for (int64_t h = 0; h < s.num_kv_heads; ++h) {
        AttentionWorkItem w{int32_t(b), int32_t(h), i0, i1, 0, kv_end, nullptr};
        const int64_t cost = int64_t(i1 - i0) * g * kv_end;
        items.push_back({w, cost, -1});
        total += cost;
      }
    }
  }
  if (items.empty()) return;

  // Context split of the items that would otherwise dominate.
  const int64_t threads = at::get_num_threads();
  const bool inline_only = total * s.head_dim < cpu::kInlineWork;
  std::vector<cpu::SplitGroup> groups;
  at::Tensor partial;
  if (threads > 1 && !inline_only) {
    const int64_t target = std::max<int64_t>(1, total / (4 * threads));
    std::vector<cpu::Item> split_items;
    std::vector<int64_t> group_sizes;  // floats per group
    std::vector<cpu::Item> kept;
    int64_t floats = 0;
    for (const cpu::Item& it : items) {
      const int64_t kv_len = it.w.kv_end;
      const int64_t chunks = std::min<int64_t>((it.cost + target - 1) / target,
                                               kv_len / cpu::kMinChunk);
      if (chunks < 2) {
        kept.push_back(it);
        continue;
      }
      const int64_t rows = int64_t(it.w.q_end - it.w.q_begin) * g;
      // Chunks of whole tiles; the last may be shorter.
      const int64_t chunk = ((kv_len + chunks - 1) / chunks + 31) / 32 * 32;
      int64_t count = 0;
      for (int64_t k0 = 0; k0 < kv_len; k0 += chunk) ++count;
      groups.push_back(
          {it.w.seq, it.w.kv_head, it.w.q_begin, it.w.q_end, nullptr, count});
      group_sizes.push_back(floats);
      for (int64_t k0 = 0; k0 < kv_len; k0 += chunk) {
        cpu::Item piece = it;
        piece.w.kv_begin = int32_t(k0);
        piece.w.kv_end = int32_t(std::min(kv_len, k0 + chunk));
        piece.cost = rows * (piece.w.kv_end - piece.w.kv_begin);
        piece.partial_offset = floats;  // the buffer is allocated below
        floats += rows * (s.head_dim + 2);
        split_items.push_back(piece);
      }
    }
    if (!groups.empty()) {
      partial = at::empty({floats}, query.options().dtype(at::kFloat));
      float* base = partial.data_ptr<float>();
      for (cpu::Item& it : split_items) it.w.partial = base + it.partial_offset;
      for (size_t k = 0; k < groups.size(); ++k)
        groups[k].partial = base + group_sizes[k];
      kept.insert(kept.end(), split_items.begin(), split_items.end());
    }
    items.swap(kept);
  }
  std::stable_sort(
      items.begin(), items.end(),
      [](const cpu::Item& a, const cpu::Item& b) { return a.cost > b.cost; });

  const cpu::AttentionItemFn fn = cpu::item_fn();
  cpu::run_dynamic(int64_t(items.size()), inline_only,
                   [&](int64_t i) { fn(p, items[i].w); });
  if (!groups.empty()) {
    cpu::run_dynamic(int64_t(groups.size()), false, [&](int64_t i) {
      if (p.dtype == DType::kBFloat16) {
        cpu::merge_group<c10::BFloat16>(p, groups[i]);
      } else {
        cpu::merge_group<c10::Half>(p, groups[i]);
      }
    });
  }
}
