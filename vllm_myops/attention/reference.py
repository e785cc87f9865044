# SPDX-License-Identifier: Apache-2.0
"""The paged KV cache format and a plain-torch reference of the two paged
attention ops (fp64 by default), for the kernel tests, the backend's tests
and debugging (same signatures as the ops in ``vllm_myops._custom_ops``).

Format (vLLM 0.32's ``KVCacheLayout.LBHNC`` view; 0.24's
``get_kv_cache_shape``):

- ``kv_cache``: ``[num_blocks, H_kv, block_size, 2 * D]`` fp16/bf16,
  contiguous; the key of the token in slot ``o`` of block ``n`` for kv head
  ``h`` is ``kv_cache[n, h, o, :D]``, its value ``kv_cache[n, h, o, D:]``.
- ``slot_mapping``: int64 ``[>= T]``; token ``t`` goes to block
  ``slot // block_size``, offset ``slot % block_size``; a negative slot
  skips the token (padding). Only the first T entries are read.
- A batch of ``B`` sequences: ``query_start_loc`` int32 ``[B + 1]``
  (cumulative, from 0), sequence ``b``'s query rows being
  ``query_start_loc[b]:query_start_loc[b + 1]`` (``q_len``, 1 for decode);
  ``seq_lens`` int32 ``[B]``: its whole context, the ``q_len`` new tokens
  (already in the cache) last; ``block_table`` int32 ``[B, max_blocks]``:
  its logical block ``j`` is cache block ``block_table[b, j]``.
- Causal: query row ``i`` of sequence ``b`` sits at position
  ``seq_len - q_len + i`` and attends keys ``0 ..`` that position. Query
  head ``hq`` reads kv head ``hq // (H_q // H_kv)`` (GQA / MQA).
"""

from __future__ import annotations

import torch


def paged_kv_write_ref(
    key: torch.Tensor,
    value: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """In place, like ``_custom_ops.paged_kv_write``."""
    num_tokens, _, d = key.shape
    block_size = kv_cache.shape[2]
    slots = slot_mapping[:num_tokens].to(torch.int64)
    keep = slots >= 0
    slots = slots[keep]
    blocks, offsets = slots // block_size, slots % block_size
    kv_cache[blocks, :, offsets, :d] = key[keep].to(kv_cache.dtype)
    kv_cache[blocks, :, offsets, d:] = value[keep].to(kv_cache.dtype)


def gather_kv(
    kv_cache: torch.Tensor, block_row: torch.Tensor, seq_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence's K and V, each ``[H_kv, seq_len, D]`` in the cache's
    dtype, gathered through its block table row."""
    num_blocks_used = -(-seq_len // kv_cache.shape[2])
    blocks = block_row[:num_blocks_used].to(torch.int64)
    kv = kv_cache[blocks]  # [n, H_kv, block_size, 2D]
    kv = kv.permute(1, 0, 2, 3).reshape(kv.shape[1], -1, kv.shape[3])[:, :seq_len]
    d = kv_cache.shape[3] // 2
    return kv[..., :d], kv[..., d:]


def paged_attention_values(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    scale: float,
    compute_dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """``[query_start_loc[B], H_q, D]`` in ``compute_dtype``: every
    sequence's causal softmax attention, unrounded."""
    qsl = query_start_loc.tolist()
    lens = seq_lens.tolist()
    num_heads, d = query.shape[1], query.shape[2]
    group = num_heads // kv_cache.shape[1]
    result = torch.zeros(
        (qsl[-1], num_heads, d), dtype=compute_dtype, device=query.device
    )
    for b, seq_len in enumerate(lens):
        start, end = qsl[b], qsl[b + 1]
        q_len = end - start
        if q_len == 0:
            continue
        k, v = gather_kv(kv_cache, block_table[b], seq_len)
        k = k.to(compute_dtype).repeat_interleave(group, dim=0)  # [H_q, S, D]
        v = v.to(compute_dtype).repeat_interleave(group, dim=0)
        q = query[start:end].to(compute_dtype).transpose(0, 1)  # [H_q, q_len, D]
        scores = (q @ k.transpose(1, 2)) * scale  # [H_q, q_len, S]
        pos = seq_len - q_len + torch.arange(q_len, device=query.device)
        keys = torch.arange(seq_len, device=query.device)
        mask = keys[None, :] > pos[:, None]
        scores = scores.masked_fill(mask, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        result[start:end] = (probs @ v).transpose(0, 1)
    return result


def paged_attention_ref(
    out: torch.Tensor,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    scale: float,
    max_query_len: int,
    max_seq_len: int,
    compute_dtype: torch.dtype = torch.float64,
) -> None:
    """In place, like ``_custom_ops.paged_attention``: rows
    ``0:query_start_loc[B]`` of ``out`` get the attention rounded once to
    out's dtype; the rest is untouched. The hints are not needed here."""
    values = paged_attention_values(
        query, kv_cache, query_start_loc, seq_lens, block_table, scale, compute_dtype
    )
    out[: values.shape[0]] = values.to(out.dtype)
