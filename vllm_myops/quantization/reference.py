# SPDX-License-Identifier: Apache-2.0
"""The W4A16 weight format and its FP32 reference, in plain torch.

Interchange format (GPTQ's, so a checkpoint, our `quantize` command and
vLLM's own loader all speak it). A linear layer ``y = x @ W`` with
``W: [K, N]`` (K = input features, N = output features) is stored as:

- ``qweight``: int32 ``[ceil(K / 8), N]``; nibble ``j`` (bits ``4j..4j+3``)
  of ``qweight[r, n]`` is the 4-bit code ``q[8r + j, n]`` in ``[0, 15]``.
  Nibbles past K (K not a multiple of 8) are padding and never read.
- ``scales``: ``[G, N]`` (fp16 / bf16), ``G = ceil(K / group_size)``;
  ``group_size = -1`` means one group over all of K (per-channel). K need
  not be a multiple of the group: the last group is partial.
- zero points: ``zeros[G, N]`` codes in ``[0, 15]`` (asymmetric), or none
  (symmetric: the zero point is 8). GPTQ checkpoints pack them as int32
  ``qzeros[G, ceil(N / 8)]`` along N, v1 checkpoints storing ``z - 1``.
- ``g_idx``: optional int32 ``[K]``, the group of input row k; without it
  the group is ``k // group_size``. Act-order (``desc_act``) checkpoints
  have a permuted one; each group still holds exactly ``group_size`` rows
  (the last one the rest), which is all this format accepts.

Dequantized weight: ``W[k, n] = (q[k, n] - z[g(k), n]) * s[g(k), n]``,
exact in fp32 (a 5-bit integer times an 11-bit mantissa). The product is
``x @ W`` accumulated in fp32 and rounded once to the activation dtype.

The kernels take the weight repacked once at load into a per-device layout
(``_custom_ops.w4a16_repack``); act-order rows are permuted at repack time
by ``act_order_perm(g_idx)`` so groups become contiguous, and the
activation's columns are gathered with the same permutation per call.
"""

from __future__ import annotations

import torch

PACK = 8  # 4-bit codes per int32
SYM_ZERO = 8


def num_groups(size_k: int, group_size: int) -> int:
    if group_size == -1:
        return 1
    if group_size <= 0:
        raise ValueError(
            f"group_size: expected -1 or a positive size, got {group_size}"
        )
    return -(-size_k // group_size)


def effective_group_size(size_k: int, group_size: int) -> int:
    """The group size in rows (-1, per-channel, is all of K)."""
    return size_k if group_size == -1 else group_size


# ---------------------------------------------------------------------------
# Packing along one dim (int32, 8 codes each, low nibble first)
# ---------------------------------------------------------------------------
def pack_int4(codes: torch.Tensor, dim: int) -> torch.Tensor:
    """Packs integer codes in [0, 15] into int32 along `dim` (padded with 0
    to a multiple of 8)."""
    codes = codes.to(torch.int32).movedim(dim, 0)
    n = codes.shape[0]
    pad = -n % PACK
    if pad:
        codes = torch.cat([codes, codes.new_zeros((pad, *codes.shape[1:]))])
    codes = codes.reshape(-1, PACK, *codes.shape[1:])
    packed = torch.zeros_like(codes[:, 0])
    for j in range(PACK):
        packed |= (codes[:, j] & 0xF) << (4 * j)
    return packed.movedim(0, dim).contiguous()


def unpack_int4(packed: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """The `size` int32 codes in [0, 15] packed along `dim`."""
    p = packed.to(torch.int32).movedim(dim, 0)
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=p.device)
    codes = (p.unsqueeze(1) >> shifts.view(1, PACK, *([1] * (p.dim() - 1)))) & 0xF
    codes = codes.reshape(-1, *p.shape[1:])[:size]
    return codes.movedim(0, dim).contiguous()


# ---------------------------------------------------------------------------
# Groups and act-order
# ---------------------------------------------------------------------------
def default_g_idx(size_k: int, group_size: int, device=None) -> torch.Tensor:
    g = effective_group_size(size_k, group_size)
    return torch.arange(size_k, dtype=torch.int32, device=device) // g


def act_order_perm(
    g_idx: torch.Tensor | None, size_k: int, group_size: int
) -> torch.Tensor | None:
    """The row permutation that makes g_idx's groups contiguous (stable sort
    by group), or None when g_idx is absent or already ``k // group_size``.

    Raises ValueError naming g_idx for one this format cannot represent: the
    wrong shape or dtype, a group outside [0, G), or groups not of exactly
    group_size rows (the last one the rest).
    """
    if g_idx is None:
        return None
    if g_idx.dim() != 1 or g_idx.shape[0] != size_k:
        raise ValueError(
            f"g_idx: expected shape [{size_k}] (one group per input row), "
            f"got {list(g_idx.shape)}"
        )
    if g_idx.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"g_idx: expected int32 or int64, got {g_idx.dtype}")
    groups = num_groups(size_k, group_size)
    gi = g_idx.to(torch.int64).cpu()
    if size_k and (int(gi.min()) < 0 or int(gi.max()) >= groups):
        raise ValueError(
            f"g_idx: names group {int(gi.min()) if int(gi.min()) < 0 else int(gi.max())}"
            f" but the weight has {groups} groups (K={size_k}, group_size={group_size})"
        )
    expected = default_g_idx(size_k, group_size).to(torch.int64)
    perm = torch.sort(gi, stable=True).indices
    if not torch.equal(gi[perm], expected):
        raise ValueError(
            "g_idx: every group must hold exactly group_size rows (the last "
            f"group the rest of K); got group sizes {torch.bincount(gi).tolist()[:8]}..."
        )
    if torch.equal(perm, torch.arange(size_k)):
        return None
    return perm.to(torch.int32)


# ---------------------------------------------------------------------------
# Quantization (RTN) and dequantization
# ---------------------------------------------------------------------------
def quantize_rtn(
    weight: torch.Tensor, group_size: int = 128, symmetric: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Round-to-nearest 4-bit quantization of ``weight [K, N]`` per group of
    input rows. Returns (codes int32 [K, N], scales [G, N] in weight's dtype,
    zeros int32 [G, N] or None when symmetric). Scales are rounded to the
    dtype before the codes are computed, so dequantize(...) is the weight
    the kernels really multiply by."""
    if weight.dim() != 2:
        raise ValueError(f"weight: expected [K, N], got {list(weight.shape)}")
    size_k, size_n = weight.shape
    g = effective_group_size(size_k, group_size)
    groups = num_groups(size_k, group_size)
    w = weight.float()
    pad = groups * g - size_k
    wp = torch.cat([w, w.new_zeros(pad, size_n)]) if pad else w
    wg = wp.reshape(groups, g, size_n)
    valid = (torch.arange(groups * g, device=w.device) < size_k).reshape(groups, g, 1)
    big = torch.finfo(torch.float32).max
    wmax = torch.where(valid, wg, -big).amax(dim=1)
    wmin = torch.where(valid, wg, big).amin(dim=1)
    if symmetric:
        # Codes -8..7 around zero 8, scaled so the largest magnitude fits.
        amax = torch.maximum(wmax.abs(), wmin.abs())
        scales = (amax / 7.5).clamp_min(1e-10).to(weight.dtype)
        zeros_f = torch.full_like(scales, SYM_ZERO, dtype=torch.float32)
    else:
        wmax, wmin = wmax.clamp_min(0), wmin.clamp_max(0)  # zero is representable
        scales = ((wmax - wmin) / 15).clamp_min(1e-10).to(weight.dtype)
        zeros_f = torch.round(-wmin / scales.float()).clamp(0, 15)
    s = scales.float().repeat_interleave(g, dim=0)[:size_k]
    z = zeros_f.repeat_interleave(g, dim=0)[:size_k]
    codes = torch.round(w / s + z).clamp(0, 15).to(torch.int32)
    zeros = None if symmetric else zeros_f.to(torch.int32)
    return codes, scales, zeros


def dequantize(
    codes: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    group_size: int,
    g_idx: torch.Tensor | None = None,
) -> torch.Tensor:
    """W [K, N] in fp32 from codes [K, N] (int), scales [G, N], zeros [G, N]
    (codes, None = symmetric) and the group of each row."""
    size_k = codes.shape[0]
    if g_idx is None:
        g_idx = default_g_idx(size_k, group_size, codes.device)
    gi = g_idx.to(torch.int64)
    s = scales.float()[gi]
    z = SYM_ZERO if zeros is None else zeros.float()[gi]
    return (codes.float() - z) * s


def w4a16_gemm_ref(
    a: torch.Tensor,
    codes: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    group_size: int,
    g_idx: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``a [M, K] @ dequantize(...)`` (+ bias) in fp64, rounded once to a's
    dtype: the value a kernel's fp32 accumulation approximates."""
    w = dequantize(codes, scales, zeros, group_size, g_idx).double()
    out = a.double() @ w
    if bias is not None:
        out = out + bias.double()
    return out.to(a.dtype)
