// SPDX-License-Identifier: Apache-2.0
// The paged attention argument rules; the generic checks come from
// core/checks.h.
#include "attention/attention_args.h"

#include <cmath>

#include <ATen/core/TensorBody.h>
#include <c10/util/Exception.h>

#include "core/checks.h"

namespace vllm_myops::attention {
namespace {

void check_half_dtype(const char* op, const char* name, const at::Tensor& t) {
  const auto dt = t.scalar_type();
  TORCH_CHECK(dt == at::kHalf || dt == at::kBFloat16, op, ": ", name,
              " must be float16 or bfloat16, got ", dt);
}

// [num_blocks, H_kv, block_size, 2*D], contiguous.
void check_cache(const char* op, const at::Tensor& kv_cache) {
  check_half_dtype(op, "kv_cache", kv_cache);
  TORCH_CHECK(kv_cache.dim() == 4, op,
              ": kv_cache must be 4-D [num_blocks, num_kv_heads, block_size, "
              "2*head_dim], got shape ",
              kv_cache.sizes());
  TORCH_CHECK(kv_cache.size(1) > 0 && kv_cache.size(2) > 0, op,
              ": kv_cache must have num_kv_heads > 0 and block_size > 0, got "
              "shape ",
              kv_cache.sizes());
  TORCH_CHECK(kv_cache.size(3) > 0 && kv_cache.size(3) % 2 == 0, op,
              ": kv_cache's last dim must be 2*head_dim (K then V), got ",
              kv_cache.size(3));
  checks::check_contiguous(op, "kv_cache", kv_cache);
}

// [T, heads, D] with the last dim contiguous (other strides free).
void check_rows(const char* op, const char* name, const at::Tensor& t,
                const char* heads) {
  TORCH_CHECK(t.dim() == 3, op, ": ", name, " must be 3-D [num_tokens, ", heads,
              ", head_dim], got shape ", t.sizes());
  TORCH_CHECK(t.size(2) <= 1 || t.stride(2) == 1, op, ": ", name,
              "'s last dim must be contiguous (stride 1), got strides ",
              t.strides());
}

void check_int_vector(const char* op, const char* name, const at::Tensor& t,
                      at::ScalarType dtype, const char* what) {
  TORCH_CHECK(t.scalar_type() == dtype, op, ": ", name, " must be ", dtype,
              " (", what, "), got ", t.scalar_type());
  TORCH_CHECK(t.dim() == 1, op, ": ", name, " must be 1-D (", what,
              "), got shape ", t.sizes());
  checks::check_contiguous(op, name, t);
}

bool overlaps(const at::Tensor& a, const at::Tensor& b) {
  return a.numel() > 0 && b.numel() > 0 && checks::may_overlap(a, b);
}

}  // namespace

KvWriteShape check_kv_write_args(const at::Tensor& key, const at::Tensor& value,
                                 const at::Tensor& kv_cache,
                                 const at::Tensor& slot_mapping) {
  constexpr const char* op = "paged_kv_write";
  checks::check_devices(op, {"key", &key},
                        {{"value", &value},
                         {"kv_cache", &kv_cache},
                         {"slot_mapping", &slot_mapping}},
                        key.device().type());
  check_cache(op, kv_cache);
  check_half_dtype(op, "key", key);
  check_rows(op, "key", key, "num_kv_heads");
  checks::check_same_device_and_dtype(op, "value", value, "key", key);
  TORCH_CHECK(value.sizes() == key.sizes(), op,
              ": value must have the shape of key ", key.sizes(), ", got ",
              value.sizes());
  check_rows(op, "value", value, "num_kv_heads");
  checks::check_same_device_and_dtype(op, "kv_cache", kv_cache, "key", key);

  KvWriteShape s{};
  s.num_tokens = key.size(0);
  s.num_kv_heads = key.size(1);
  s.head_dim = key.size(2);
  s.num_blocks = kv_cache.size(0);
  s.block_size = kv_cache.size(2);
  TORCH_CHECK(
      kv_cache.size(1) == s.num_kv_heads && kv_cache.size(3) == 2 * s.head_dim,
      op,
      ": kv_cache must have shape [num_blocks, num_kv_heads=", s.num_kv_heads,
      ", block_size, 2*head_dim=", 2 * s.head_dim, "] for key of shape ",
      key.sizes(), ", got ", kv_cache.sizes());

  check_int_vector(op, "slot_mapping", slot_mapping, at::kLong,
                   "one cache slot per token, -1 to skip");
  TORCH_CHECK(slot_mapping.size(0) >= s.num_tokens, op,
              ": slot_mapping must have >= num_tokens=", s.num_tokens,
              " entries (one per key row), got ", slot_mapping.size(0));
  TORCH_CHECK(!overlaps(kv_cache, key), op,
              ": kv_cache and key must not overlap (the cache is written)");
  TORCH_CHECK(!overlaps(kv_cache, value), op,
              ": kv_cache and value must not overlap (the cache is written)");
  return s;
}

AttentionShape check_attention_args(
    const at::Tensor& out, const at::Tensor& query, const at::Tensor& kv_cache,
    const at::Tensor& query_start_loc, const at::Tensor& seq_lens,
    const at::Tensor& block_table, double scale, int64_t max_query_len,
    int64_t max_seq_len) {
  constexpr const char* op = "paged_attention";
  checks::check_devices(op, {"out", &out},
                        {{"query", &query},
                         {"kv_cache", &kv_cache},
                         {"query_start_loc", &query_start_loc},
                         {"seq_lens", &seq_lens},
                         {"block_table", &block_table}},
                        out.device().type());
  check_half_dtype(op, "query", query);
  check_rows(op, "query", query, "num_heads");
  checks::check_same_device_and_dtype(op, "out", out, "query", query);
  TORCH_CHECK(out.sizes() == query.sizes(), op,
              ": out must have the shape of query ", query.sizes(), ", got ",
              out.sizes());
  check_rows(op, "out", out, "num_heads");
  checks::check_no_internal_overlap(op, "out", out);
  check_cache(op, kv_cache);
  checks::check_same_device_and_dtype(op, "kv_cache", kv_cache, "query", query);

  AttentionShape s{};
  s.num_tokens = query.size(0);
  s.num_heads = query.size(1);
  s.head_dim = query.size(2);
  s.num_blocks = kv_cache.size(0);
  s.num_kv_heads = kv_cache.size(1);
  s.block_size = kv_cache.size(2);
  TORCH_CHECK(kv_cache.size(3) == 2 * s.head_dim, op,
              ": kv_cache's last dim must be 2*head_dim=", 2 * s.head_dim,
              " (query's head_dim ", s.head_dim, "), got ", kv_cache.size(3));
  TORCH_CHECK(s.num_heads > 0 && s.num_heads % s.num_kv_heads == 0, op,
              ": query's num_heads=", s.num_heads,
              " must be a positive multiple of kv_cache's num_kv_heads=",
              s.num_kv_heads);

  check_int_vector(op, "query_start_loc", query_start_loc, at::kInt,
                   "cumulative query lengths, B+1 entries");
  TORCH_CHECK(query_start_loc.size(0) >= 1, op,
              ": query_start_loc must have B+1 >= 1 entries, got 0");
  s.num_seqs = query_start_loc.size(0) - 1;
  check_int_vector(op, "seq_lens", seq_lens, at::kInt,
                   "context length per sequence");
  TORCH_CHECK(seq_lens.size(0) == s.num_seqs, op,
              ": seq_lens must have B=", s.num_seqs,
              " entries (query_start_loc has B+1), got ", seq_lens.size(0));
  TORCH_CHECK(block_table.scalar_type() == at::kInt, op,
              ": block_table must be int32, got ", block_table.scalar_type());
  TORCH_CHECK(block_table.dim() == 2 && block_table.size(0) == s.num_seqs, op,
              ": block_table must be 2-D [B=", s.num_seqs,
              ", max_blocks_per_seq], got shape ", block_table.sizes());
  TORCH_CHECK(block_table.size(1) <= 1 || block_table.stride(1) == 1, op,
              ": block_table's last dim must be contiguous (stride 1), got "
              "strides ",
              block_table.strides());
  s.max_blocks_per_seq = block_table.size(1);

  TORCH_CHECK(std::isfinite(scale), op, ": scale must be finite, got ", scale);
  TORCH_CHECK(max_query_len >= 0, op, ": max_query_len must be >= 0, got ",
              max_query_len);
  TORCH_CHECK(max_seq_len >= 0, op, ": max_seq_len must be >= 0, got ",
              max_seq_len);
  TORCH_CHECK(!overlaps(out, query), op,
              ": out and query must not overlap (out is written while query "
              "is read)");
  TORCH_CHECK(!overlaps(out, kv_cache), op,
              ": out and kv_cache must not overlap (out is written while the "
              "cache is read)");
  return s;
}

void check_slots(const KvWriteShape& s, const at::Tensor& slot_mapping) {
  const int64_t* slots = slot_mapping.data_ptr<int64_t>();
  const int64_t limit = s.num_blocks * s.block_size;
  for (int64_t t = 0; t < s.num_tokens; ++t) {
    TORCH_CHECK(slots[t] < limit, "paged_kv_write: slot_mapping[", t,
                "]=", slots[t],
                " is out of range: the cache has num_blocks * "
                "block_size = ",
                limit, " slots (use a negative slot to skip a token)");
  }
}

void check_attention_indices(const AttentionShape& s,
                             const at::Tensor& query_start_loc,
                             const at::Tensor& seq_lens,
                             const at::Tensor& block_table,
                             int64_t max_query_len, int64_t max_seq_len) {
  constexpr const char* op = "paged_attention";
  const int32_t* qsl = query_start_loc.data_ptr<int32_t>();
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  const int32_t* table = block_table.data_ptr<int32_t>();
  const int64_t table_stride = block_table.stride(0);
  TORCH_CHECK(qsl[0] == 0, op, ": query_start_loc[0] must be 0, got ", qsl[0]);
  for (int64_t b = 0; b < s.num_seqs; ++b) {
    const int64_t q_len = int64_t(qsl[b + 1]) - qsl[b];
    const int64_t seq_len = lens[b];
    TORCH_CHECK(q_len >= 0, op, ": query_start_loc must not decrease, got [", b,
                "]=", qsl[b], " > [", b + 1, "]=", qsl[b + 1]);
    TORCH_CHECK(qsl[b + 1] <= s.num_tokens, op, ": query_start_loc[", b + 1,
                "]=", qsl[b + 1], " exceeds query's num_tokens=", s.num_tokens);
    TORCH_CHECK(seq_len >= q_len, op, ": seq_lens[", b, "]=", seq_len,
                " must be >= the sequence's query length ", q_len,
                " (seq_len includes the new tokens)");
    TORCH_CHECK(q_len <= max_query_len, op, ": max_query_len=", max_query_len,
                " is smaller than sequence ", b, "'s query length ", q_len);
    TORCH_CHECK(seq_len <= max_seq_len, op, ": max_seq_len=", max_seq_len,
                " is smaller than seq_lens[", b, "]=", seq_len);
    const int64_t blocks = (seq_len + s.block_size - 1) / s.block_size;
    TORCH_CHECK(blocks <= s.max_blocks_per_seq, op, ": seq_lens[", b,
                "]=", seq_len, " needs ", blocks, " blocks of ", s.block_size,
                " but block_table has ", s.max_blocks_per_seq, " columns");
    if (q_len == 0) continue;  // reads nothing
    const int32_t* row = table + b * table_stride;
    for (int64_t j = 0; j < blocks; ++j) {
      TORCH_CHECK(row[j] >= 0 && row[j] < s.num_blocks, op, ": block_table[", b,
                  ", ", j, "]=", row[j],
                  " is out of range [0, num_blocks=", s.num_blocks, ")");
    }
  }
}

}  // namespace vllm_myops::attention
