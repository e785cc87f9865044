# SPDX-License-Identifier: Apache-2.0
"""Batches for the paged attention tests: a mix of sequences (decode,
prefill, chunked prefill, empty), their cache blocks scattered over a
NaN-filled cache (so a kernel that reads a slot no sequence owns, or past a
sequence's seq_len, turns its output into NaN), optionally sharing a prefix
of blocks between two sequences (prefix caching), and the tolerance of an
output against the fp64 reference."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from vllm_myops.attention import reference


@dataclass
class Batch:
    out: torch.Tensor  # [T, H_q, D], NaN (rows past qsl[B] must stay NaN)
    query: torch.Tensor  # [T, H_q, D]
    kv_cache: torch.Tensor  # [num_blocks, H_kv, block_size, 2D]
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    scale: float
    max_query_len: int
    max_seq_len: int

    @property
    def num_rows(self) -> int:
        return int(self.query_start_loc[-1])

    def args(self) -> tuple:
        return (
            self.out,
            self.query,
            self.kv_cache,
            self.query_start_loc,
            self.seq_lens,
            self.block_table,
            self.scale,
            self.max_query_len,
            self.max_seq_len,
        )

    def expected(self) -> torch.Tensor:
        return reference.paged_attention_values(
            self.query,
            self.kv_cache,
            self.query_start_loc,
            self.seq_lens,
            self.block_table,
            self.scale,
        )


def random_lengths(
    rng: random.Random, num_seqs: int, max_ctx: int, kinds: str = "mixed"
) -> list[tuple[int, int]]:
    """(q_len, seq_len) per sequence. kinds: "decode" (q_len 1), "prefill"
    (q_len = seq_len), "mixed" (decode, prefill, chunked prefill and an
    empty sequence)."""
    out = []
    for i in range(num_seqs):
        seq_len = rng.randint(1, max_ctx)
        kind = kinds if kinds != "mixed" else ("decode", "prefill", "chunked")[i % 3]
        if kind == "decode":
            out.append((1, seq_len))
        elif kind == "prefill":
            out.append((min(seq_len, 96), min(seq_len, 96)))
        else:  # chunked prefill: new rows after a cached context
            q_len = rng.randint(1, min(seq_len, 48))
            out.append((q_len, seq_len))
    if kinds == "mixed":
        out.insert(num_seqs // 2, (0, 0))  # empty sequence
        out.append((0, rng.randint(1, max_ctx)))  # cached context, no new rows
    return out


def make_batch(
    lengths: list[tuple[int, int]],
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype,
    *,
    device: str = "cpu",
    shared_prefix: bool = False,
    scale: float | None = None,
    extra_rows: int = 3,
    seed: int = 0,
    q_std: float = 1.0,
    kv_std: float = 1.0,
) -> Batch:
    """Scattered blocks (a random permutation), NaN everywhere no sequence
    owns (unused blocks, slots past seq_len in a last block, the padding
    columns of the block table point at an all-NaN block). shared_prefix:
    the second sequence's first blocks are the first sequence's (same
    tokens: a cached prefix), both sequences long enough to share one."""
    gen = torch.Generator().manual_seed(seed)
    blocks_per = [-(-s // block_size) for _, s in lengths]
    shared = 0
    if shared_prefix and len(lengths) >= 2:
        shared = min(blocks_per[0], blocks_per[1]) - 1
        # Whole shared blocks only: both sequences' own tokens start after.
        shared = max(shared, 0)
    num_blocks = sum(blocks_per) - shared + 2
    perm = torch.randperm(num_blocks, generator=gen).tolist()
    nan_block = perm.pop()  # every unused table entry names this block
    width = max(blocks_per + [1]) + 2
    table = torch.full((len(lengths), width), nan_block, dtype=torch.int32)
    for b, n in enumerate(blocks_per):
        for j in range(n):
            if b == 1 and j < shared:
                table[b, j] = table[0, j]
            else:
                table[b, j] = perm.pop()

    cache = torch.full(
        (num_blocks, num_kv_heads, block_size, 2 * head_dim), float("nan"), dtype=dtype
    )
    for b, (_, seq_len) in enumerate(lengths):
        start = shared * block_size if b == 1 else 0
        pos = torch.arange(start, seq_len)
        blk = table[b, pos // block_size].long()
        kv = torch.randn(len(pos), num_kv_heads, 2 * head_dim, generator=gen)
        cache[blk, :, pos % block_size] = (kv * kv_std).to(dtype)

    q_lens = [q for q, _ in lengths]
    qsl = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32)
    rows = int(qsl[-1]) + extra_rows
    query = (torch.randn(rows, num_heads, head_dim, generator=gen) * q_std).to(dtype)
    out = torch.full((rows, num_heads, head_dim), float("nan"), dtype=dtype)
    return Batch(
        out=out.to(device),
        query=query.to(device),
        kv_cache=cache.to(device),
        query_start_loc=qsl.to(device),
        seq_lens=torch.tensor([s for _, s in lengths], dtype=torch.int32).to(device),
        block_table=table.to(device),
        scale=head_dim**-0.5 if scale is None else scale,
        max_query_len=max(q_lens + [0]),
        max_seq_len=max([s for _, s in lengths] + [0]),
    )


# Mantissa bits (with the implicit one) of the output dtypes.
_PRECISION = {torch.float16: 11, torch.bfloat16: 8}


def attention_atol(dtype: torch.dtype, v_absmax: float) -> float:
    """Why: the kernel keeps the softmax and the accumulation in fp32 and
    rounds each output once. An output is a convex combination of V rows, so
    |out| <= max|V| and the rounding moves it by at most half an ulp of
    max|V| (<= 2^-p * max|V|, p the mantissa bits). The fp32 part adds
    ~1e-6 relative. Allowed: two such half ulps (one ulp of max|V|) plus a
    small fp32 floor; a wrong key, row, head or mask moves outputs by O(|V|)."""
    return 2.0 ** -(_PRECISION[dtype] - 1) * v_absmax + 1e-5 * max(v_absmax, 1.0)


def assert_attention_close(batch: Batch, expected: torch.Tensor | None = None) -> None:
    """Rows 0:qsl[B] match the fp64 reference within attention_atol; rows
    past qsl[B] are still NaN (untouched)."""
    n = batch.num_rows
    if expected is None:
        expected = batch.expected()
    got = batch.out[:n].double().cpu()
    expected = expected.cpu()
    assert not got.isnan().any(), (
        f"{int(got.isnan().sum())} NaN outputs (a read past seq_len or of an "
        "unowned block, or an unwritten row)"
    )
    cache = batch.kv_cache.cpu()
    d = cache.shape[-1] // 2
    values = cache[..., d:]
    v_absmax = float(values[~values.isnan()].abs().max()) if values.numel() else 1.0
    atol = attention_atol(batch.out.dtype, v_absmax)
    torch.testing.assert_close(got, expected, rtol=0, atol=atol)
    assert batch.out[n:].isnan().all(), "rows past query_start_loc[B] were written"
