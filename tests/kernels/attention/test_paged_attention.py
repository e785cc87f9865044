# SPDX-License-Identifier: Apache-2.0
"""Paged attention kernels (`paged_kv_write`, `paged_attention`) against the
fp64 reference (vllm_myops/attention/reference.py), plus the op contract.

1. values: batches mixing decode, prefill, chunked-prefill and empty
   sequences; scattered and shared (prefix-cached) blocks over a NaN cache;
   head configs (9,3) SmolLM2, (32,8), (8,1) MQA, (4,4); D 64/128(/256);
   block sizes 16, 32, odd 7; both dtypes; rows past qsl[B] untouched.
2. numerics: extreme logits (large scale, fp16-range values), context split
   (flash-decoding merge) with one and two threads.
3. the cache write, slot by slot (padding slots -1 write nothing).
4. bad inputs: every argument, rejected with the argument named.
5. opcheck, torch.compile(fullgraph=True) of write + attention.
6. lower CPU ISAs rerun in a subprocess.
Tolerances: inputs.attention_atol (one rounding of an fp32 result).
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import vllm_myops._custom_ops as ops
from tests.kernels import contract
from tests.kernels.attention.inputs import (
    assert_attention_close,
    make_batch,
    random_lengths,
)
from tests.kernels.utils import (
    current_scope,
    devices,
    params_or_skip,
    scoped,
    seed_everything,
)

_C = torch.ops._myops_C
DEVICES = devices()
DTYPES = [torch.bfloat16, torch.float16]
HEADS = [(9, 3), (32, 8), (8, 1), (4, 4)]


def _run(batch: Any) -> None:
    ops.paged_attention(*batch.args())


# ---------------------------------------------------------------------------
# 1. Values
# ---------------------------------------------------------------------------
# (heads, head_dim, block_size, dtype, kinds, num_seqs, max_ctx, shared)
QUICK_CASES = [
    ((9, 3), 64, 16, torch.bfloat16, "mixed", 5, 600, True),
    ((32, 8), 128, 16, torch.bfloat16, "decode", 4, 4096, False),
    ((8, 1), 128, 32, torch.float16, "mixed", 4, 900, False),
    ((4, 4), 64, 7, torch.float16, "mixed", 4, 300, True),
    ((32, 8), 128, 32, torch.float16, "chunked", 2, 2000, True),
    ((8, 2), 256, 16, torch.bfloat16, "mixed", 3, 200, False),
]
FULL_CASES = [
    (heads, d, bs, dtype, kinds, 6, ctx, shared)
    for heads in HEADS
    for d in (64, 128, 256)
    for bs in (16, 32, 7)
    for dtype in DTYPES
    for kinds, ctx, shared in (("mixed", 1500, True), ("decode", 16384, False))
] + [((32, 8), 128, 16, torch.bfloat16, "chunked", 3, 16384, True)]
CASES = scoped(quick=QUICK_CASES, full=FULL_CASES)


def _case_id(case: tuple) -> str:
    (hq, hkv), d, bs, dtype, kinds, n, ctx, shared = case
    dt = str(dtype).removeprefix("torch.")
    return (
        f"{hq}q{hkv}kv-d{d}-bs{bs}-{dt}-{kinds}{n}x{ctx}{'-shared' if shared else ''}"
    )


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
@pytest.mark.parametrize("device", DEVICES)
def test_paged_attention_values(device: str, case: tuple) -> None:
    (hq, hkv), d, bs, dtype, kinds, num_seqs, max_ctx, shared = case
    rng = random.Random(zlib.crc32(_case_id(case).encode()))
    lengths = random_lengths(rng, num_seqs, max_ctx, kinds)
    if shared:  # two sequences long enough to share whole blocks
        lengths[0] = (lengths[0][0], max(lengths[0][1], 3 * bs))
        lengths[1] = (min(lengths[1][0], 9), max(lengths[1][1], 2 * bs + 5))
    batch = make_batch(
        lengths, hq, hkv, d, bs, dtype, device=device, shared_prefix=shared, seed=1
    )
    _run(batch)
    assert_attention_close(batch)


@pytest.mark.parametrize(
    "seq_len", scoped(quick=[1, 15, 16, 17, 33], full=list(range(1, 70)))
)
@pytest.mark.parametrize("device", DEVICES)
def test_context_lengths_around_blocks(device: str, seq_len: int) -> None:
    """Contexts that end inside, at and just past a block (and a tile)."""
    lengths = [(1, seq_len), (min(seq_len, 5), seq_len)]
    batch = make_batch(
        lengths, 8, 2, 64, 16, torch.bfloat16, device=device, seed=seq_len
    )
    _run(batch)
    assert_attention_close(batch)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_batches(device: str) -> None:
    """No sequence, only empty sequences, q_len 0 with a context: nothing
    is written."""
    for lengths in ([], [(0, 0)], [(0, 0), (0, 40)]):
        batch = make_batch(lengths, 4, 2, 64, 16, torch.float16, device=device)
        _run(batch)
        assert batch.out.isnan().all()


@pytest.mark.parametrize("device", DEVICES)
def test_reference_in_place(device: str) -> None:
    """paged_attention_ref (the backend's debugging stand-in for the op)
    writes rows 0:qsl[B] rounded once and leaves the rest, like the op; the
    kernel agrees with it within the tolerance."""
    from vllm_myops.attention import reference

    batch = make_batch([(1, 30), (4, 9)], 8, 2, 64, 16, torch.bfloat16, device=device)
    expected = batch.expected()
    ref_out = batch.out.clone()
    reference.paged_attention_ref(ref_out, *batch.args()[1:])
    n = batch.num_rows
    assert torch.equal(ref_out[:n], expected.to(ref_out.dtype))
    assert ref_out[n:].isnan().all()
    _run(batch)
    assert_attention_close(batch, expected)


# ---------------------------------------------------------------------------
# 2. Numerics
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_extreme_logits(device: str, dtype: torch.dtype) -> None:
    """Logits far outside exp's range (scale 50, |q.k| up to ~1e5; fp16-range
    values in V) give finite outputs: the running max is subtracted before
    every exp, so nothing overflows and masked or tiny terms are exact 0."""
    lengths = [(1, 700), (40, 300), (5, 5)]
    batch = make_batch(
        lengths,
        8,
        2,
        128,
        16,
        dtype,
        device=device,
        scale=50.0,
        q_std=8.0,
        kv_std=8.0,
        seed=3,
    )
    _run(batch)
    assert_attention_close(batch)
    # V near the top of fp16's range (both dtypes hold 6e4): acc stays fp32.
    big = make_batch(lengths, 8, 2, 64, 16, dtype, device=device, scale=0.5, seed=4)
    d = 64
    big.kv_cache[..., d:] = (big.kv_cache[..., d:].float().clamp(-1, 1) * 6e4).to(dtype)
    _run(big)
    assert_attention_close(big)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("device", DEVICES)
def test_context_split(device: str, threads: int) -> None:
    """A batch whose work is one long sequence: with 2 threads its context
    is split into chunks merged afterwards (flash-decoding), with 1 it is
    not; both match the reference. MQA decode (one kv head: one item) and a
    long chunked prefill next to short decodes."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for lengths, heads in (
            ([(1, scoped(quick=[3000], full=[16000])[0])], (8, 1)),
            ([(64, 2500), (1, 20), (1, 7)], (9, 3)),
        ):
            batch = make_batch(
                lengths, *heads, 64, 16, torch.bfloat16, device=device, seed=5
            )
            _run(batch)
            assert_attention_close(batch)
    finally:
        torch.set_num_threads(before)


# ---------------------------------------------------------------------------
# 3. Cache write
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("num_tokens", scoped(quick=[1, 37], full=[1, 37, 300]))
@pytest.mark.parametrize("block_size", scoped(quick=[16, 7], full=[16, 32, 7]))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_paged_kv_write(
    device: str, dtype: torch.dtype, block_size: int, num_tokens: int
) -> None:
    """Keys and values as vLLM passes them (slices of a fused qkv: rows
    strided, last dim contiguous) land in their slots; slots -1 and every
    slot not named keep their bytes; slot_mapping entries past T (padding)
    are not used."""
    seed_everything(11)
    hkv, d, hq = 3, 64, 9
    num_blocks = -(-num_tokens // block_size) * 2 + 1
    qkv = torch.randn(num_tokens, (hq + 2 * hkv) * d).to(dtype).to(device)
    key = qkv[:, hq * d : (hq + hkv) * d].view(num_tokens, hkv, d)
    value = qkv[:, (hq + hkv) * d :].view(num_tokens, hkv, d)
    assert num_tokens == 1 or not key.is_contiguous()
    slots = torch.randperm(num_blocks * block_size)[:num_tokens]
    slots[::4] = -1  # padding tokens
    # Padding after T: valid-looking slots that must not be written.
    tail = torch.randperm(num_blocks * block_size)[:5]
    slot_mapping = torch.cat([slots, tail]).to(torch.int64).to(device)
    cache = torch.randn(num_blocks, hkv, block_size, 2 * d).to(dtype).to(device)
    before = cache.clone()
    ops.paged_kv_write(key, value, cache, slot_mapping)

    expected = before.clone()
    for t, s in enumerate(slots.tolist()):
        if s < 0:
            continue
        blk, off = divmod(s, block_size)
        expected[blk, :, off, :d] = key[t]
        expected[blk, :, off, d:] = value[t]
    assert torch.equal(cache, expected)
    # The reference does the same.
    ref_cache = before.clone()
    from vllm_myops.attention import reference

    reference.paged_kv_write_ref(key, value, ref_cache, slot_mapping)
    assert torch.equal(ref_cache, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_write_then_attend(device: str) -> None:
    """One engine step: the new tokens' K/V written with paged_kv_write, then
    attention over the cache that now holds them."""
    seed_everything(12)
    lengths = [(1, 40), (20, 20), (7, 50)]
    batch = make_batch(lengths, 8, 2, 64, 16, torch.float16, device=device, seed=6)
    key, value, slots = _new_tokens(batch)
    expected_cache = batch.kv_cache.clone()
    ops.paged_kv_write(key, value, batch.kv_cache, slots)
    # Writing back the K/V that were already there changes nothing.
    torch.testing.assert_close(
        batch.kv_cache, expected_cache, rtol=0, atol=0, equal_nan=True
    )
    _run(batch)
    assert_attention_close(batch)


def _new_tokens(batch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The K/V and slots of each sequence's q_len newest tokens (the last
    positions of its context), as the engine would write them this step;
    rows past qsl[B] get slot -1."""
    cache, bs = batch.kv_cache, batch.kv_cache.shape[2]
    d = cache.shape[-1] // 2
    qsl, lens = batch.query_start_loc.tolist(), batch.seq_lens.tolist()
    rows = batch.query.shape[0]
    slots = torch.full((rows,), -1, dtype=torch.int64)
    for b, seq_len in enumerate(lens):
        q_len = qsl[b + 1] - qsl[b]
        for i in range(q_len):
            pos = seq_len - q_len + i
            slots[qsl[b] + i] = int(batch.block_table[b, pos // bs]) * bs + pos % bs
    key = torch.zeros(rows, cache.shape[1], d, dtype=cache.dtype, device=cache.device)
    value = torch.zeros_like(key)
    keep = slots >= 0
    blk, off = slots[keep] // bs, slots[keep] % bs
    key[keep] = cache[blk, :, off, :d]
    value[keep] = cache[blk, :, off, d:]
    return key, value, slots.to(cache.device)


# ---------------------------------------------------------------------------
# 4. Bad inputs
# ---------------------------------------------------------------------------
def _attention_args(device: str, **change: Any) -> tuple[Any, ...]:
    batch = make_batch(
        [(1, 40), (3, 20)], 8, 2, 64, 16, torch.bfloat16, device=device, seed=7
    )
    # No NaN: the rejected call must leave every argument equal to before.
    batch.out.zero_()
    batch.kv_cache.nan_to_num_(0.0)
    names = [
        "out",
        "query",
        "kv_cache",
        "query_start_loc",
        "seq_lens",
        "block_table",
        "scale",
        "max_query_len",
        "max_seq_len",
    ]
    args = dict(zip(names, batch.args()))
    for name, fn in change.items():
        args[name] = fn(args[name]) if callable(fn) else fn
    return tuple(args.values())


def _set(index: Any, value: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def fn(t: torch.Tensor) -> torch.Tensor:
        t = t.clone()
        t[index] = value
        return t

    return fn


BAD_ATTENTION: dict[str, tuple[dict[str, Any], str]] = {
    "out_dtype": ({"out": lambda t: t.half()}, "out must have the dtype of query"),
    "out_shape": ({"out": lambda t: t[:, :4]}, "out must have the shape of query"),
    "out_layout": (
        {"out": lambda t: t.transpose(1, 2).contiguous().transpose(1, 2)},
        "out's last dim must be contiguous",
    ),
    "query_dtype": (
        {"query": lambda t: t.float(), "out": lambda t: t.float()},
        "query must be float16 or bfloat16",
    ),
    "query_2d": ({"query": lambda t: t.flatten(1)}, "query must be 3-D"),
    "query_layout": (
        {"query": lambda t: t.transpose(1, 2).contiguous().transpose(1, 2)},
        "query's last dim must be contiguous",
    ),
    "cache_dtype": (
        {"kv_cache": lambda t: t.half()},
        "kv_cache must have the dtype of query",
    ),
    "cache_3d": ({"kv_cache": lambda t: t[0]}, "kv_cache must be 4-D"),
    "cache_layout": (
        {"kv_cache": lambda t: t.transpose(0, 1).contiguous().transpose(0, 1)},
        "kv_cache must be contiguous",
    ),
    "cache_head_dim": (
        {"kv_cache": lambda t: t[..., :64].contiguous()},
        "kv_cache's last dim must be 2\\*head_dim=128",
    ),
    "heads_ratio": (
        {"kv_cache": lambda t: t[:, :1].expand(-1, 3, -1, -1).contiguous()},
        "query's num_heads=8 must be a positive multiple of kv_cache's num_kv_heads=3",
    ),
    "qsl_dtype": (
        {"query_start_loc": lambda t: t.long()},
        "query_start_loc must be Int",
    ),
    "qsl_2d": ({"query_start_loc": lambda t: t[None]}, "query_start_loc must be 1-D"),
    "seq_lens_len": ({"seq_lens": lambda t: t[:1]}, "seq_lens must have B=2 entries"),
    "seq_lens_dtype": ({"seq_lens": lambda t: t.long()}, "seq_lens must be Int"),
    "table_dtype": ({"block_table": lambda t: t.long()}, "block_table must be int32"),
    "table_rows": ({"block_table": lambda t: t[:1]}, "block_table must be 2-D \\[B=2"),
    "table_entry": (
        {"block_table": _set((1, 0), 10_000)},
        "block_table\\[1, 0\\]=10000 is out of range",
    ),
    "table_negative": (
        {"block_table": _set((0, 2), -1)},
        "block_table\\[0, 2\\]=-1 is out of range",
    ),
    "table_width": (
        {"block_table": lambda t: t[:, :2]},
        "seq_lens\\[0\\]=40 needs 3 blocks of 16 but block_table has 2",
    ),
    "seq_len_short": (
        {"seq_lens": _set(1, 2)},
        "seq_lens\\[1\\]=2 must be >= the sequence's query length 3",
    ),
    "qsl_start": ({"query_start_loc": _set(0, 1)}, "query_start_loc\\[0\\] must be 0"),
    "qsl_decreasing": (
        {"query_start_loc": _set(1, 5), "max_query_len": 10},
        "query_start_loc must not decrease",
    ),
    "qsl_past_rows": (
        {
            "query_start_loc": _set(2, 100),
            "seq_lens": _set(1, 120),
            "max_query_len": 200,
            "max_seq_len": 200,
        },
        "query_start_loc\\[2\\]=100 exceeds query's num_tokens",
    ),
    "max_query_len": ({"max_query_len": 2}, "max_query_len=2 is smaller"),
    "max_seq_len": ({"max_seq_len": 39}, "max_seq_len=39 is smaller"),
    "scale_inf": ({"scale": float("inf")}, "scale must be finite"),
    "hint_negative": ({"max_query_len": -1}, "max_query_len must be >= 0"),
    "out_is_query": ({"out": lambda t: None}, "out and query must not overlap"),
}


# Cases only the values inside the index tensors reveal: the CPU kernel reads
# them on the host and refuses; on CUDA they live on the device and checking
# them would cost a device->host sync per call, so the kernels clamp every
# index instead (never an access out of bounds; the output values are then
# undefined). compute-sanitizer memcheck over these tests checks the clamping.
DEVICE_VALUE_CASES = frozenset(
    {
        "table_entry",
        "table_negative",
        "table_width",
        "seq_len_short",
        "qsl_start",
        "qsl_decreasing",
        "qsl_past_rows",
        "max_query_len",
        "max_seq_len",
    }
)


@pytest.mark.parametrize("case", list(BAD_ATTENTION))
@pytest.mark.parametrize("device", DEVICES)
def test_attention_bad_input(device: str, case: str) -> None:
    change, match = BAD_ATTENTION[case]
    if case == "out_is_query":
        args = list(_attention_args(device))
        args[0] = args[1]
        args = tuple(args)
    else:
        args = _attention_args(device, **change)
    if device.startswith("cuda") and case in DEVICE_VALUE_CASES:
        _C.paged_attention(*args)  # clamped: runs, faults nothing
        torch.cuda.synchronize(device)
        return
    contract.assert_rejected_unchanged(
        _C.paged_attention, args, "paged_attention: " + match
    )


@pytest.mark.parametrize("device", DEVICES)
def test_attention_head_dim_not_multiple_of_16(device: str) -> None:
    batch = make_batch([(1, 20)], 4, 2, 24, 16, torch.bfloat16, device=device)
    batch.out.zero_()
    batch.kv_cache.nan_to_num_(0.0)
    expected = (
        "head_dim must be 64, 128 or 256 on CUDA, got 24"
        if device.startswith("cuda")
        else "head_dim must be a multiple of 16 on CPU, got 24"
    )
    contract.assert_rejected_unchanged(
        _C.paged_attention, batch.args(), "paged_attention: " + expected
    )


def _write_args(device: str, **change: Any) -> tuple[Any, ...]:
    t, hkv, d, bs = 5, 2, 64, 16
    args = {
        "key": torch.randn(t, hkv, d).bfloat16().to(device),
        "value": torch.randn(t, hkv, d).bfloat16().to(device),
        "kv_cache": torch.zeros(3, hkv, bs, 2 * d).bfloat16().to(device),
        "slot_mapping": torch.tensor([0, 5, -1, 17, 47, 3], dtype=torch.int64).to(
            device
        ),
    }
    for name, fn in change.items():
        args[name] = fn(args[name]) if callable(fn) else fn
    return tuple(args.values())


BAD_WRITE: dict[str, tuple[dict[str, Any], str]] = {
    "key_dtype": (
        {"key": lambda t: t.float(), "value": lambda t: t.float()},
        "key must be float16 or bfloat16",
    ),
    "key_2d": (
        {"key": lambda t: t.flatten(1), "value": lambda t: t.flatten(1)},
        "key must be 3-D",
    ),
    "key_layout": (
        {"key": lambda t: t.transpose(1, 2).contiguous().transpose(1, 2)},
        "key's last dim must be contiguous",
    ),
    "value_shape": ({"value": lambda t: t[:4]}, "value must have the shape of key"),
    "value_dtype": ({"value": lambda t: t.half()}, "value must have the dtype of key"),
    "value_layout": (
        {"value": lambda t: t.transpose(1, 2).contiguous().transpose(1, 2)},
        "value's last dim must be contiguous",
    ),
    "cache_dtype": (
        {"kv_cache": lambda t: t.half()},
        "kv_cache must have the dtype of key",
    ),
    "cache_heads": (
        {"kv_cache": lambda t: t[:, :1].contiguous()},
        "kv_cache must have shape \\[num_blocks, num_kv_heads=2",
    ),
    "cache_width": (
        {"kv_cache": lambda t: t[..., :64].contiguous()},
        "kv_cache must have shape",
    ),
    "cache_layout": (
        {"kv_cache": lambda t: t.transpose(0, 1).contiguous().transpose(0, 1)},
        "kv_cache must be contiguous",
    ),
    "slots_dtype": ({"slot_mapping": lambda t: t.int()}, "slot_mapping must be Long"),
    "slots_short": (
        {"slot_mapping": lambda t: t[:4]},
        "slot_mapping must have >= num_tokens=5 entries",
    ),
    "slot_range": (
        {"slot_mapping": _set(3, 48)},
        "slot_mapping\\[3\\]=48 is out of range: the cache has",
    ),
}


@pytest.mark.parametrize("case", list(BAD_WRITE))
@pytest.mark.parametrize("device", DEVICES)
def test_kv_write_bad_input(device: str, case: str) -> None:
    change, match = BAD_WRITE[case]
    args = _write_args(device, **change)
    if device.startswith("cuda") and case == "slot_range":
        # A slot past the cache is a device value: CUDA skips that token
        # (never writes out of bounds) instead of syncing to check it.
        key, value, kv_cache, slots = args
        before = kv_cache.clone()
        _C.paged_kv_write(*args)
        torch.cuda.synchronize(device)
        bs = kv_cache.shape[2]
        for t, slot in enumerate(slots[: key.shape[0]].tolist()):
            if 0 <= slot < kv_cache.shape[0] * bs:
                before[slot // bs, :, slot % bs] = torch.cat([key[t], value[t]], -1)
        assert torch.equal(kv_cache, before)
        return
    contract.assert_rejected_unchanged(
        _C.paged_kv_write, args, "paged_kv_write: " + match
    )


# ---------------------------------------------------------------------------
# 5. opcheck, torch.compile
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device: str) -> None:
    contract.opcheck(_C.paged_kv_write, _write_args(device))
    batch = make_batch(
        [(1, 40), (3, 20)], 8, 2, 64, 16, torch.bfloat16, device=device, seed=8
    )
    contract.opcheck(_C.paged_attention, batch.args())


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph(device: str) -> None:
    """Write + attention in one compiled graph (what vLLM's traced forward
    does), bitwise like eager, for two batch sizes."""

    def fn(
        key: torch.Tensor,
        value: torch.Tensor,
        cache: torch.Tensor,
        slots: torch.Tensor,
        out: torch.Tensor,
        query: torch.Tensor,
        qsl: torch.Tensor,
        seq_lens: torch.Tensor,
        table: torch.Tensor,
    ) -> torch.Tensor:
        ops.paged_kv_write(key, value, cache, slots)
        ops.paged_attention(
            out, query * 1.0, cache, qsl, seq_lens, table, 0.125, 64, 256
        )
        # Elementwise, not a reduction: inductor may sum in another order
        # than ATen (an ulp apart on the H200), which is not the op's doing.
        return out.float() * 2.0

    def make_args(n: int) -> tuple[Any, ...]:
        lengths = [(1, 30 + n), (n, n + 10)]
        batch = make_batch(
            lengths, 8, 2, 64, 16, torch.bfloat16, device=device, seed=n, extra_rows=0
        )
        key, value, slots = _new_tokens(batch)
        batch.out.zero_()
        batch.kv_cache.nan_to_num_(0.0)  # compared with assert_close
        return (
            key,
            value,
            batch.kv_cache,
            slots,
            batch.out,
            batch.query,
            batch.query_start_loc,
            batch.seq_lens,
            batch.block_table,
        )

    contract.assert_compiles_like_eager(fn, make_args, (5, 19), backend="inductor")


# ---------------------------------------------------------------------------
# 6. CPU ISA paths: lower ISAs in a subprocess (ATEN_CPU_CAPABILITY)
# ---------------------------------------------------------------------------
# The kernel paths (every head config, block size and dtype, the split and
# merge, the write); the quick scope keeps a rerun at ~20 s on 2 cores.
ISA_RERUN_TESTS = (
    "test_paged_attention_values",
    "test_extreme_logits",
    "test_context_split",
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "isa",
    params_or_skip(
        contract.lower_cpu_isas(), "no lower CPU ISA built or available", "default"
    ),
)
def test_cpu_isa_paths(isa: str, tmp_path: Path) -> None:
    contract.rerun_under_cpu_isa(
        isa,
        Path(__file__).resolve(),
        ISA_RERUN_TESTS,
        scope=current_scope(),
        junit_xml=tmp_path / "junit.xml",
    )
