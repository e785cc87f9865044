# SPDX-License-Identifier: Apache-2.0
"""Thin Python wrappers over the compiled ops, one per op, like vLLM's
`vllm/_custom_ops.py`.

The RMSNorm ops are out-style: they mutate arguments and return nothing, so
their schemas (`Tensor!` ... `-> ()`) are all torch.compile needs to trace
them and no fake (meta) implementation is registered. The W4A16 ops
(`w4a16_repack`, `w4a16_gemm`) return new tensors: each has a
`torch.library.register_fake` next to its wrapper, which torch.compile (and
vLLM tracing a linear method's `apply`) uses for the output's metadata.
The paged attention ops (`paged_kv_write`, `paged_attention`) mutate their
output and return nothing; they register do-nothing fakes so vLLM's traced
attention forward has one for every op it calls.
"""

from __future__ import annotations

import torch

from vllm_myops import _extension

_extension.ensure_loaded()
_ops = torch.ops._myops_C


def rms_norm(
    out: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
) -> None:
    """out = (input / sqrt(mean(input**2, -1) + epsilon)).to(dtype) * weight.

    `out` must be contiguous with input's shape and dtype; input may have any
    leading dims and strided rows. weight=None means no scale.
    """
    _ops.rms_norm(out, input, weight, epsilon)


def fused_add_rms_norm(
    input: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    epsilon: float,
) -> None:
    """In place: residual = input + residual (rounded to the dtype), then
    input = rms_norm(residual) * weight."""
    _ops.fused_add_rms_norm(input, residual, weight, epsilon)


# ---------------------------------------------------------------------------
# W4A16 GEMM (int4 weights, fp16/bf16 activations). Formats:
# vllm_myops/quantization/reference.py.
# ---------------------------------------------------------------------------
W4A16_TILE = 64
W4A16_TILE_WORDS = 512


def w4a16_packed_shape(size_k: int, size_n: int) -> tuple[int, int, int]:
    """Shape of w4a16_repack's output: one 64x64 tile of codes per (n-tile,
    k-tile), 512 int32 words each (the word order is the device's)."""
    return (-(-size_n // W4A16_TILE), -(-size_k // W4A16_TILE), W4A16_TILE_WORDS)


def w4a16_repack(qweight: torch.Tensor, size_k: int, size_n: int) -> torch.Tensor:
    """GPTQ `qweight` int32 [ceil(K/8), N] (rows already in the order the GEMM
    uses: act-order permutation applied) -> the device's tile layout, int32
    [ceil(N/64), ceil(K/64), 512]. Once, at load."""
    return _ops.w4a16_repack(qweight, size_k, size_n)


def w4a16_gemm(
    a: torch.Tensor,
    b_packed: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    bias: torch.Tensor | None,
    size_k: int,
    size_n: int,
    group_size: int,
) -> torch.Tensor:
    """New [M, N] in a's dtype: a [M, K] @ ((q - zeros) * scales) + bias, fp32
    accumulation. zeros=None is symmetric (zero code 8); group_size -1
    (per channel), 32, 64 or 128, the last group may be partial."""
    return _ops.w4a16_gemm(a, b_packed, scales, zeros, bias, size_k, size_n, group_size)


def w4a16_permute_cols(a: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """New contiguous [M, K] = a[:, perm]: the act-order (GPTQ desc_act)
    activation gather, perm int32 [K] the order of the repacked weight's rows
    (reference.act_order_perm). Per call, before w4a16_gemm. On CUDA perm's
    values are not checked (clamped to [0, K)); on the CPU a bad one raises."""
    return _ops.w4a16_permute_cols(a, perm)


@torch.library.register_fake("_myops_C::w4a16_permute_cols")
def _w4a16_permute_cols_fake(a: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    return a.new_empty(a.shape)


@torch.library.register_fake("_myops_C::w4a16_repack")
def _w4a16_repack_fake(qweight: torch.Tensor, size_k: int, size_n: int) -> torch.Tensor:
    return qweight.new_empty(w4a16_packed_shape(size_k, size_n))


@torch.library.register_fake("_myops_C::w4a16_gemm")
def _w4a16_gemm_fake(
    a: torch.Tensor,
    b_packed: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    bias: torch.Tensor | None,
    size_k: int,
    size_n: int,
    group_size: int,
) -> torch.Tensor:
    return a.new_empty((a.shape[0], size_n))


def cpu_kernel_isa() -> str:
    """Vector ISA the CPU kernels use on this machine (avx512, avx2, default)."""
    return str(_ops.cpu_kernel_isa())


# ---------------------------------------------------------------------------
# Paged attention. Formats: vllm_myops/attention/reference.py. Both ops
# mutate an argument and return nothing; their fakes (torch.compile, vLLM's
# traced forward) do nothing either.
# ---------------------------------------------------------------------------
def paged_kv_write(
    key: torch.Tensor,
    value: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Writes key/value [T, H_kv, D] into kv_cache [num_blocks, H_kv,
    block_size, 2*D] (K in [..., :D], V in [..., D:]) at slot_mapping[t]
    (int64; block slot // block_size, offset slot % block_size); a negative
    slot skips its token. Only the first T slots are read."""
    _ops.paged_kv_write(key, value, kv_cache, slot_mapping)


def paged_attention(
    out: torch.Tensor,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    scale: float,
    max_query_len: int,
    max_seq_len: int,
) -> None:
    """In place: out[T, H_q, D] = causal attention of query [T, H_q, D] over
    each sequence's cached context. Sequence b's query rows are
    query_start_loc[b]:query_start_loc[b+1] (int32 [B+1]); seq_lens[b]
    (int32 [B]) counts its whole context including those rows, whose keys
    are already in the cache; block_table (int32 [B, max_blocks]) maps its
    logical blocks to cache blocks. Rows past query_start_loc[B] are left
    untouched. max_query_len / max_seq_len are upper bounds."""
    _ops.paged_attention(
        out,
        query,
        kv_cache,
        query_start_loc,
        seq_lens,
        block_table,
        scale,
        max_query_len,
        max_seq_len,
    )


@torch.library.register_fake("_myops_C::paged_kv_write")
def _paged_kv_write_fake(
    key: torch.Tensor,
    value: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    return None


@torch.library.register_fake("_myops_C::paged_attention")
def _paged_attention_fake(
    out: torch.Tensor,
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    scale: float,
    max_query_len: int,
    max_seq_len: int,
) -> None:
    return None
