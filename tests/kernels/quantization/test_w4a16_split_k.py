# SPDX-License-Identifier: Apache-2.0
"""Split K on CUDA, whichever kernel `auto` (or VLLM_MYOPS_W4A16_CUDA_PATH)
picks: the shapes here have few column blocks and many k-tiles, which the
split plans split. Each split writes an fp32 partial to a workspace of the
call, and a second kernel on the same stream sums them. What would break if
that workspace outlived its call's stream order (freed while the kernel
still runs on another stream, or reused by the next call before the reduce
read it), or if a kernel that merged its own splits left its per-tile
counters non-zero (a design measured on 2026-12-07,
docs/quantization/log/2026-12-07-wgmma-fused-split-merge.md): a partial sum,
or an output never written. So every call below gets new activations (a
stale output of an earlier call is wrong), and outputs the test owns are
filled with NaN before each launch.
"""

from __future__ import annotations

import pytest
import torch

from tests.kernels import contract
from tests.kernels.quantization.inputs import assert_gemm_close, make_a, make_weight
from tests.kernels.utils import cuda_devices, params_or_skip, seed_everything

CUDA = params_or_skip(cuda_devices(), "needs a CUDA device", "cuda")

# (M, K, N): 5, 2 and 1 column blocks of 128 columns (N not a multiple of
# 128: columns past N) over 65, 32 and 129 k-tiles (K not a multiple of 64:
# a short last k-tile); wgmma_tma's token tiles: one of 16, one of 64 cut at
# 40, two of 256 (the second cut at 300).
SPLIT_CASES = [(16, 4104, 576), (40, 2048, 200), (300, 8256, 72)]


def _weight(k: int, n: int, dtype: torch.dtype, device: str):
    return make_weight(k, n, 128, symmetric=False, dtype=dtype, device=device)


@pytest.mark.parametrize("device", CUDA)
def test_split_k_repeats_across_shapes(device: str) -> None:
    """Calls of different shapes in turn, three rounds: no call's splits
    depend on what the call before left behind (workspace, counters)."""
    seed_everything(21)
    weights = [_weight(k, n, torch.bfloat16, device) for _, k, n in SPLIT_CASES]
    bias = [torch.randn(n).to(torch.bfloat16).to(device) for _, _, n in SPLIT_CASES]
    for _ in range(3):
        for (m, k, _), qw, b in zip(SPLIT_CASES, weights, bias):
            a = make_a(m, k, torch.bfloat16, device)
            assert_gemm_close(qw.gemm(a, b), qw, a, b)


@pytest.mark.parametrize("device", CUDA)
def test_split_k_two_streams(device: str) -> None:
    """Two streams run split launches at the same time: neither sees the
    other's partial sums (each call's workspace is its own, kept alive for
    its stream)."""
    seed_everything(22)
    cases = SPLIT_CASES[:2]
    weights = [_weight(k, n, torch.float16, device) for _, k, n in cases]
    streams = [torch.cuda.Stream(device) for _ in cases]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream(device))
    for _ in range(5):
        inputs = [make_a(m, k, torch.float16, device) for m, k, _ in cases]
        outs = []
        for qw, a, stream in zip(weights, inputs, streams):
            a.record_stream(stream)
            with torch.cuda.stream(stream):
                outs.append(qw.gemm(a))
        for qw, a, out, stream in zip(weights, inputs, outs, streams):
            stream.synchronize()
            assert_gemm_close(out, qw, a, None)


@pytest.mark.parametrize("device", CUDA)
def test_split_k_graph_replays(device: str) -> None:
    """A captured split launch replayed with new activations, eager split
    calls of another shape on the same stream between replays: every replay
    sums its own splits again (the graph's workspace is its own)."""
    seed_everything(23)
    m, k, n = SPLIT_CASES[0]
    qw = _weight(k, n, torch.bfloat16, device)
    a = make_a(m, k, torch.bfloat16, device)
    out: list[torch.Tensor] = []

    def call() -> None:
        out.clear()
        out.append(qw.gemm(a))

    graph = contract.capture_without_host_sync(call, torch.device(device))
    em, ek, en = SPLIT_CASES[1]
    other = _weight(ek, en, torch.bfloat16, device)
    for _ in range(3):
        a.copy_(make_a(m, k, torch.bfloat16, device))
        out[0].fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize(device)
        assert_gemm_close(out[0], qw, a, None)
        b = make_a(em, ek, torch.bfloat16, device)
        assert_gemm_close(other.gemm(b), other, b, None)
