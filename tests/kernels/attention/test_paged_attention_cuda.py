# SPDX-License-Identifier: Apache-2.0
"""CUDA-only paths of the paged attention kernels (csrc/attention/*.cu) that
the device-parametrized tests in test_paged_attention.py do not reach:

- the decode kernel's context splits (flash-decoding) and their merge by
  the last split to finish, from one split (many sequences) to the most (one
  long sequence); the merge bit-for-bit deterministic; its persistent
  counters (no memset per call) left zero by every launch: calls of other
  shapes in between, growth of the counter region, two streams at once,
  eager calls between graph replays;
- the block table read a tile ahead: block sizes 1, 7 and 128;
- G = H_q / H_kv > 16: decode rows go through the prefill kernel;
- query / out views the kernels cannot read or write directly (odd strides,
  misaligned starts) go through copies;
- hints larger than the true maxima;
- CUDA-graph capture without a host sync, replayed on new inputs;
- paged_kv_write: a slot past the cache is skipped (CPU raises; CUDA cannot
  check without a device->host copy), unaligned key rows;
- the prefill kernels' tile edges (row tiles of 64 / 128 packed (token, q
  head) rows, 64-token KV tiles (128 for prefill_wgmma), block sizes below,
  at and above a tile), and each prefill kernel
  (VLLM_MYOPS_ATTENTION_CUDA_PREFILL=m64 / m128 / wgmma) on every prefill
  test, rerun in a subprocess.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import vllm_myops._custom_ops as ops
from tests.kernels import contract
from tests.kernels.attention.inputs import assert_attention_close, make_batch
from tests.kernels.utils import cuda_devices, current_scope, scoped

CUDA = cuda_devices()


def _run(batch) -> None:
    ops.paged_attention(*batch.args())


@pytest.mark.parametrize(
    "lengths",
    scoped(
        quick=[[(1, 8192)], [(1, 1000)] * 8, [(1, 300)] * 64],
        full=[[(1, 16384)], [(1, 8192)] * 4, [(1, 1000)] * 8, [(1, 300)] * 128],
    ),
    ids=lambda v: f"{len(v)}x{v[0][1]}",
)
@pytest.mark.parametrize("device", CUDA)
def test_decode_splits(device: str, lengths: list) -> None:
    """Decode batches from one long sequence (many splits) to many short
    ones (one split), with a few short sequences that fill fewer splits than
    the longest one."""
    lengths = list(lengths) + [(1, 5), (1, 70)]
    for heads, d, dtype in (
        ((32, 8), 128, torch.bfloat16),
        ((8, 1), 64, torch.float16),
        ((8, 2), 256, torch.bfloat16),
    ):
        batch = make_batch(lengths, *heads, d, 16, dtype, device=device, seed=21)
        _run(batch)
        assert_attention_close(batch)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("block_size", [1, 7, 128])
@pytest.mark.parametrize("device", CUDA)
def test_block_table_read_ahead(device: str, block_size: int, head_dim: int) -> None:
    """The kernels read each tile's block-table entries a tile ahead, one
    per token, the first two tiles' before the sequence lengths (dropped
    past the CTA's range), and hand them to the 8 lanes that copy a token
    by shuffle: block sizes below, across and above a 64-token tile, every
    head dim (2, 4 or 8 copies per token; prefill D = 256 has 32-token
    tiles), decode rows of many splits and one, and prefill rows."""
    lengths = [(1, 2000), (1, 64), (1, 65), (1, 1), (37, 300), (3, 129)]
    batch = make_batch(
        lengths, 8, 2, head_dim, block_size, torch.bfloat16, device=device, seed=5
    )
    _run(batch)
    assert_attention_close(batch)


@pytest.mark.parametrize("device", CUDA)
def test_decode_merge_extreme_logits(device: str) -> None:
    """The merge walks the splits with a running max: splits whose maxima
    differ by thousands (scale 50, |q.k| up to ~1e5), more splits than one
    unrolled batch of loads (16; MQA 1 x 6000 takes 64 splits), and splits
    that fill fewer than the longest sequence's: finite and right."""
    lengths = [(1, 6000), (1, 1100), (1, 70)]
    batch = make_batch(
        lengths,
        8,
        1,
        128,
        16,
        torch.float16,
        device=device,
        scale=50.0,
        q_std=8.0,
        kv_std=8.0,
        seed=13,
    )
    _run(batch)
    assert_attention_close(batch)


@pytest.mark.parametrize("device", CUDA)
def test_decode_split_merge_is_deterministic(device: str) -> None:
    """The last split of a (sequence, kv head) to finish merges all of them
    in split order: which CTA is last must not change a bit of the output.
    Also: the per-call counters start from zero on every call."""
    lengths = [(1, 16384), (1, 3000), (1, 100)]
    batch = make_batch(lengths, 32, 8, 128, 16, torch.bfloat16, device=device)
    _run(batch)
    first = batch.out.clone()
    assert_attention_close(batch)
    for _ in range(3):
        batch.out.fill_(float("nan"))
        _run(batch)
        # Bits, not values: the padding rows past query_start_loc[B] stay NaN
        # (make_batch) and NaN != NaN.
        assert torch.equal(batch.out.view(torch.int16), first.view(torch.int16))


@pytest.mark.parametrize("device", CUDA)
def test_cuda_graph_replays_repeat(device: str) -> None:
    """Replayed several times: the split counters of the fused merge are
    left zero by every replay (no memset node in the graph)."""
    lengths = [(1, 5000), (1, 40), (1, 900)]
    batch = make_batch(lengths, 9, 3, 64, 16, torch.float16, device=device, seed=9)
    graph = contract.capture_without_host_sync(lambda: _run(batch), device)
    expected = batch.expected()
    for _ in range(3):
        batch.out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize(device)
        assert_attention_close(batch, expected)


@pytest.mark.parametrize("device", CUDA)
def test_split_counters_persist_across_shapes(device: str) -> None:
    """The split counters are not zeroed per call: the last split of each
    (sequence, kv head) stores 0 back. Calls with other split counts and
    sequence counts in between (a counter used with many splits, then few,
    then one), and a batch of more (sequence, kv head) pairs than the first
    counter region holds (1024): each result must still be right."""
    shapes = [
        ([(1, 9000), (1, 150)], (32, 8), 128),
        ([(1, 160)] * 3, (32, 8), 128),
        # 1200 pairs, above the first region's 1024; ~3.03 waves of the
        # H200's 396 decode slots in one split, so it takes several.
        ([(1, 1000)] * 150, (16, 8), 128),
        ([(1, 9000), (1, 150)], (32, 8), 128),
        ([(1, 700)] * 4, (9, 3), 64),
    ]
    for seed, (lengths, heads, d) in enumerate(shapes):
        batch = make_batch(
            lengths, *heads, d, 16, torch.bfloat16, device=device, seed=seed
        )
        _run(batch)
        assert_attention_close(batch)


@pytest.mark.parametrize("device", CUDA)
def test_split_counters_two_streams(device: str) -> None:
    """Two streams run decode calls with many splits at the same time: each
    stream has its own counters, so neither sees the other's counts."""
    batches = [
        make_batch(
            [(1, 6000), (1, 3000)],
            32,
            8,
            128,
            16,
            torch.bfloat16,
            device=device,
            seed=s,
        )
        for s in (11, 12)
    ]
    expected = [b.expected() for b in batches]
    streams = [torch.cuda.Stream(device) for _ in batches]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream(device))
    for _ in range(5):
        for batch, stream in zip(batches, streams):
            with torch.cuda.stream(stream):
                batch.out.fill_(float("nan"))
                _run(batch)
        for batch, stream, exp in zip(batches, streams, expected):
            stream.synchronize()
            assert_attention_close(batch, exp)


@pytest.mark.parametrize("device", CUDA)
def test_cuda_graph_replays_between_eager_calls(device: str) -> None:
    """A captured graph keeps its own counters: eager calls of other shapes
    on the same stream between its replays, and a second graph, do not
    disturb it (nor it them)."""
    graph_batch = make_batch(
        [(1, 5000), (1, 64)], 32, 8, 128, 16, torch.bfloat16, device=device, seed=7
    )
    graph = contract.capture_without_host_sync(lambda: _run(graph_batch), device)
    other = make_batch(
        [(1, 3000)] * 3, 9, 3, 64, 16, torch.float16, device=device, seed=8
    )
    graph2 = contract.capture_without_host_sync(lambda: _run(other), device)
    eager = make_batch(
        [(1, 12000), (1, 900)], 32, 8, 128, 16, torch.bfloat16, device=device
    )
    graph_expected = graph_batch.expected()
    other_expected = other.expected()
    for _ in range(3):
        graph_batch.out.fill_(float("nan"))
        graph.replay()
        _run(eager)
        other.out.fill_(float("nan"))
        graph2.replay()
        torch.cuda.synchronize(device)
        assert_attention_close(graph_batch, graph_expected)
        assert_attention_close(other, other_expected)
        assert_attention_close(eager)


@pytest.mark.parametrize("heads", [(32, 1), (64, 2), (17, 1)])
@pytest.mark.parametrize("device", CUDA)
def test_large_group(device: str, heads: tuple[int, int]) -> None:
    """More q heads per kv head than the decode kernel's m16 tile: decode
    and prefill rows both run on the prefill kernel."""
    lengths = [(1, 900), (5, 40), (1, 3), (30, 300)]
    batch = make_batch(lengths, *heads, 64, 16, torch.bfloat16, device=device)
    _run(batch)
    assert_attention_close(batch)


@pytest.mark.parametrize("device", CUDA)
def test_strided_and_misaligned_views(device: str) -> None:
    """query as a slice of a fused qkv (what vLLM passes), and query / out
    views the kernels cannot use directly: the results are the same."""
    lengths = [(1, 200), (17, 60), (1, 33)]
    hq, hkv, d = 8, 2, 64
    batch = make_batch(lengths, hq, hkv, d, 16, torch.bfloat16, device=device)
    expected = batch.expected()
    rows = batch.query.shape[0]
    # Fused qkv: rows strided, 16-byte aligned.
    qkv = torch.zeros(rows, (hq + 2 * hkv) * d, dtype=batch.query.dtype, device=device)
    qkv[:, : hq * d] = batch.query.flatten(1)
    batch.query = qkv[:, : hq * d].view(rows, hq, d)
    _run(batch)
    assert_attention_close(batch, expected)
    # Misaligned: one element past a 16-byte boundary (query) and odd row
    # strides (out), through the kernels' copies.
    flat = torch.zeros(rows * hq * d + 1, dtype=batch.query.dtype, device=device)
    flat[1:] = qkv[:, : hq * d].flatten()
    batch.query = flat[1:].view(rows, hq, d)
    wide = torch.full(
        (rows, hq, d + 1), float("nan"), dtype=batch.query.dtype, device=device
    )
    batch.out = wide[:, :, :d]
    _run(batch)
    assert_attention_close(batch, expected)
    assert wide[:, :, d].isnan().all()


@pytest.mark.parametrize("device", CUDA)
def test_hints_larger_than_maxima(device: str) -> None:
    lengths = [(1, 500), (9, 120), (0, 30)]
    batch = make_batch(lengths, 9, 3, 64, 16, torch.float16, device=device)
    batch.max_query_len = 300
    batch.max_seq_len = 20000
    _run(batch)
    assert_attention_close(batch)


@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("device", CUDA)
def test_cuda_graph_replay(device: str, mixed: bool) -> None:
    """Captured once without a host sync, replayed on new query values and
    new (shorter) seq_lens: the graph reads them from device memory."""
    lengths = [(1, 3000), (1, 17), (1, 700)]
    if mixed:
        lengths += [(40, 100)]
    batch = make_batch(lengths, 32, 8, 128, 16, torch.bfloat16, device=device, seed=3)
    graph = contract.capture_without_host_sync(lambda: _run(batch), device)
    gen = torch.Generator().manual_seed(4)
    batch.query.copy_(torch.randn(batch.query.shape, generator=gen))
    batch.out.fill_(float("nan"))
    # Shorter contexts (same blocks): the last tokens drop out.
    shorter = torch.tensor([100, 1, 300] + ([0] if mixed else []), dtype=torch.int32)
    batch.seq_lens.sub_(shorter.to(device))
    graph.replay()
    torch.cuda.synchronize(device)
    assert_attention_close(batch)


@pytest.mark.parametrize("device", CUDA)
def test_kv_write_skips_slots_past_the_cache(device: str) -> None:
    t, hkv, d, bs = 4, 2, 64, 16
    key = torch.randn(t, hkv, d).bfloat16().to(device)
    value = torch.randn(t, hkv, d).bfloat16().to(device)
    cache = torch.zeros(2, hkv, bs, 2 * d).bfloat16().to(device)
    slots = torch.tensor([3, 2 * bs, 10**9, -5], dtype=torch.int64, device=device)
    ops.paged_kv_write(key, value, cache, slots)
    expected = torch.zeros_like(cache)
    expected[0, :, 3, :d] = key[0]
    expected[0, :, 3, d:] = value[0]
    assert torch.equal(cache, expected)


@pytest.mark.parametrize("device", CUDA)
def test_kv_write_unaligned_rows(device: str) -> None:
    """Key rows one element off a 16-byte boundary: the element path."""
    t, hkv, d, bs = 5, 3, 64, 16
    flat = torch.randn(t * hkv * d + 1).half().to(device)
    key = flat[1:].view(t, hkv, d)
    value = torch.randn(t, hkv, d).half().to(device)
    cache = torch.zeros(1, hkv, bs, 2 * d).half().to(device)
    slots = torch.tensor([0, 4, 15, 7, 1], dtype=torch.int64, device=device)
    ops.paged_kv_write(key, value, cache, slots)
    for i, s in enumerate(slots.tolist()):
        assert torch.equal(cache[0, :, s, :d], key[i])
        assert torch.equal(cache[0, :, s, d:], value[i])


# ---------------------------------------------------------------------------
# The prefill kernels: prefill_m64 (64 rows per CTA, 16 per warp),
# prefill_m128 (128 rows per CTA, 32 per warp; D 64 / 128, scale > 0; D 256
# always prefill_m64) and prefill_wgmma (sm_90a: 128 rows per CTA, two
# consumer warpgroups, 128-token KV tiles; D 64 / 128, scale > 0; elsewhere
# forcing it runs auto's choice). auto takes prefill_wgmma on a compute
# capability 9.0 device where its grid has at least one CTA per SM
# (plan.cuh's prefill_wgmma_by_default), else prefill_m128 / prefill_m64.
# VLLM_MYOPS_ATTENTION_CUDA_PREFILL forces one per process.
# ---------------------------------------------------------------------------
# (heads, head_dim, block_size, dtype): G = 1, 3, 4, 8; block sizes below a
# 64-token tile, at it, above it, and not powers of two.
_PREFILL_EDGE_QUICK = [
    ((32, 8), 128, 16, torch.bfloat16),
    ((9, 3), 64, 16, torch.float16),
    ((8, 8), 128, 64, torch.float16),
    ((16, 2), 64, 7, torch.bfloat16),
    ((8, 1), 128, 128, torch.bfloat16),
    ((12, 4), 128, 48, torch.float16),
]
_PREFILL_EDGE_FULL = [
    (heads, d, bs, dtype)
    for heads in ((8, 8), (9, 3), (32, 8), (16, 2))
    for d in (64, 128)
    for bs in (16, 32, 64, 128, 7, 48)
    for dtype in (torch.bfloat16, torch.float16)
]
PREFILL_EDGE_CASES = scoped(quick=_PREFILL_EDGE_QUICK, full=_PREFILL_EDGE_FULL)


def _prefill_edge_id(case: tuple) -> str:
    (hq, hkv), d, bs, dtype = case
    return f"{hq}q{hkv}kv-d{d}-bs{bs}-{str(dtype).removeprefix('torch.')}"


@pytest.mark.parametrize(
    "case", PREFILL_EDGE_CASES, ids=[_prefill_edge_id(c) for c in PREFILL_EDGE_CASES]
)
@pytest.mark.parametrize("device", CUDA)
def test_prefill_tile_edges(device: str, case: tuple) -> None:
    """Prefill rows across the kernels' tile edges: whole prefills of q_len
    at, below and above a row tile (128 / G tokens for prefill_m128, 64 / G
    for prefill_m64) and
    not a multiple of it, the last row tile holding one row; chunked
    prefills (q_len < seq_len) whose cached context is not a multiple of
    the 64-token KV tile nor of the block; a long context (many tiles
    skipped by no row, the diagonal crossing two KV tiles); decode rows and
    an empty sequence beside them."""
    (hq, hkv), d, bs, dtype = case
    lengths = [
        (200, 200),
        (129, 1000),
        (1, 77),
        (64, 64),
        (128, 128),
        (300, 2100),
        (17, 4000),
        (0, 10),
        (43, 43),
        (1, 1),
    ]
    batch = make_batch(lengths, hq, hkv, d, bs, dtype, device=device, seed=17)
    _run(batch)
    assert_attention_close(batch)


@pytest.mark.parametrize("device", CUDA)
def test_prefill_long(device: str) -> None:
    """One long prefill (32 / 8 heads, D 128: the benchmark's shape) and a
    long chunked prefill at a context that is not a multiple of 64: many
    row tiles in longest-first order, most KV tiles unmasked."""
    lengths = [(2500, 2500), (700, 3001)]
    batch = make_batch(lengths, 32, 8, 128, 16, torch.bfloat16, device=device, seed=23)
    _run(batch)
    assert_attention_close(batch)


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("device", CUDA)
def test_prefill_out_4byte_aligned(device: str, head_dim: int) -> None:
    """out views the kernels write directly that are 4-byte but not 16-byte
    aligned (row strides of D + 2 elements; a start 4 bytes past a 16-byte
    boundary): prefill_m128's 16-byte stores fall back to 4-byte ones,
    prefill_m64 stores 4 bytes anyway. The padding between rows stays NaN."""
    lengths = [(150, 150), (1, 40), (20, 300)]
    hq, hkv, d = 8, 2, head_dim
    batch = make_batch(lengths, hq, hkv, d, 16, torch.float16, device=device, seed=29)
    expected = batch.expected()
    rows = batch.query.shape[0]
    wide = torch.full(
        (rows, hq, d + 2), float("nan"), dtype=batch.query.dtype, device=device
    )
    batch.out = wide[:, :, :d]
    _run(batch)
    assert_attention_close(batch, expected)
    assert wide[:, :, d:].isnan().all()
    flat = torch.full(
        (rows * hq * d + 2,), float("nan"), dtype=batch.query.dtype, device=device
    )
    batch.out = flat[2:].view(rows, hq, d)
    _run(batch)
    assert_attention_close(batch, expected)
    assert flat[:2].isnan().all()


PREFILL_PATH_ENV = "VLLM_MYOPS_ATTENTION_CUDA_PREFILL"
# The tests with prefill rows, in this file and in test_paged_attention.py.
PREFILL_PATH_TESTS = (
    "test_prefill_tile_edges",
    "test_prefill_long",
    "test_prefill_out_4byte_aligned",
    "test_block_table_read_ahead",
    "test_large_group",
    "test_strided_and_misaligned_views",
    "test_hints_larger_than_maxima",
)
# Also rerun per path, except under compute-sanitizer: capture needs the
# caching allocator, which tools/gpu/sanitize.sh turns off (the graph tests
# skip there, and a rerun with a skipped case fails).
PREFILL_PATH_GRAPH_TESTS = ("test_cuda_graph_replay",)
PREFILL_PATH_TESTS_COMMON = (
    "test_paged_attention_values",
    "test_context_lengths_around_blocks",
    "test_extreme_logits",
    "test_context_split",
)
_COMMON_FILE = Path(__file__).resolve().parent / "test_paged_attention.py"
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")


# Every value VLLM_MYOPS_ATTENTION_CUDA_PREFILL forces (also read by
# tools/gpu/device_session.sh's `paths` stage).
PREFILL_PATHS = ("m64", "m128", "wgmma")


@needs_cuda
@pytest.mark.slow
@pytest.mark.parametrize("path", PREFILL_PATHS)
def test_cuda_prefill_paths(path: str, tmp_path: Path) -> None:
    """m64: the 64-row prefill kernel (prefill_m64) at every head dim; m128:
    the 128-row one (prefill_m128) at D 64 / 128 (D 256 runs prefill_m64
    under every value); wgmma: the sm_90a wgmma kernel (prefill_wgmma) at
    D 64 / 128 on a compute capability 9.0 device, whatever the grid
    (elsewhere auto's choice). The default run covers only auto's choice
    per shape; these reruns hold each to the same fp64 reference and
    tolerance on every test with prefill rows."""
    common = " or ".join(PREFILL_PATH_TESTS_COMMON)
    graphs = os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") != "1"
    passed, output = contract.rerun_tests(
        Path(__file__).resolve(),
        PREFILL_PATH_TESTS + (PREFILL_PATH_GRAPH_TESTS if graphs else ()),
        env={PREFILL_PATH_ENV: path},
        scope=current_scope(),
        junit_xml=tmp_path / "junit.xml",
        device_keyword="cuda",
        extra_files=(_COMMON_FILE,),
        extra_selection=f"(({common}) and cuda)",
    )
    for name in PREFILL_PATH_TESTS_COMMON:
        assert passed.get(name, 0) > 0, f"no cuda case of {name} ran\n{output}"


@needs_cuda
@pytest.mark.parametrize("bad", ["v2", "wgmma_overlap", "wgmma_pingpong"])
def test_cuda_prefill_path_env_rejects_unknown(bad: str) -> None:
    """A prefill call in a process with an unknown value fails, and the
    error names the variable and the value. The values are names the
    variable no longer takes: v2 (prefill_m128 is m128), wgmma_overlap and
    wgmma_pingpong (prefill_wgmma's overlapped mainloop and its ping-pong,
    removed after losing the A/B to the serial one)."""
    code = (
        "import torch, vllm_myops._custom_ops as ops\n"
        "from tests.kernels.attention.inputs import make_batch\n"
        "b = make_batch([(5, 9)], 8, 2, 64, 16, torch.bfloat16, device='cuda')\n"
        "ops.paged_attention(*b.args())\n"
        "torch.cuda.synchronize()\n"
    )
    contract.assert_env_value_refused(code, PREFILL_PATH_ENV, bad)
