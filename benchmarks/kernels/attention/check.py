# SPDX-License-Identifier: Apache-2.0
"""The paged attention benchmark's correctness check: every implementation's
output against an fp32 reference (softmax(Q K^T) V from the paged cache,
chunked by sequences and query rows) on fresh inputs of the case, per element
within the rounding a bf16/fp16 kernel may do (the bound is derived below)."""

from __future__ import annotations

from typing import Any

import torch

from benchmarks.common import timing
from benchmarks.common.sweep import CallFn, Case, log
from benchmarks.kernels.attention.cases import (
    DTYPES,
    heads_of,
    label,
    metadata,
    q_groups,
    q_rows,
    set_specs,
)

# ---------------------------------------------------------------------------
# Correctness check
# ---------------------------------------------------------------------------

# Tolerance, per element (a bound, not a fit; the reference is fp32 and is
# not rounded). A kernel's output differs from exact attention by
#  (1) its one rounding of the output to the dtype: <= u * |o|, u the dtype's
#      unit roundoff (bf16 2^-8, fp16 2^-11): rtol = u (x 1 + 2^-6 slack for
#      |o| vs |ref|);
#  (2) the rounding of the probabilities to the dtype before P @ V (ours,
#      FlashAttention, Triton, SDPA's fused kernels; the softmax sum stays
#      fp32): each term p_j v_j moves by <= u * p_j |v_j|, so element (row, d)
#      moves by <= u * sum_j p_j |v_jd| / sum_j p_j = u * (P |V|)[row, d]. This
#      does not shrink with the context the way the output does (random V
#      cancels: |o| ~ 1/sqrt(ctx), P |V| stays ~0.8), which is why an atol
#      relative to the output's RMS failed long prefills for every kernel;
#  (3) fp32 sums and exp2 approximations: 2^-12 of P |V| (a few hundred
#      sequential fp32 adds of <= 2^-24 each over 16k keys, ex2.approx
#      ~2^-22), plus 1e-6 absolute.
# atol = (u + 2^-12) * (P |V|) + 1e-6. A wrong kernel still fails: zeros, a
# dropped or extra key at short contexts, a swapped head, unnormalised rows
# (tests/tooling/test_benchmark_attention.py perturbs an output each way).
UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
FP32_SLACK = 2.0**-12
ABS_SLACK = 1e-6
# Bytes of the largest fp32 temporary of the reference (scores, gathered K/V
# chunk): the long prefills chunk by sequences, then by query rows (4 x 16k
# at once is a 128 GiB score matrix).
REF_CHUNK_BYTES = 256 << 20
_check_cache: dict[tuple[Any, ...], tuple[Any, torch.Tensor, torch.Tensor]] = {}


def reference(s: Any, case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact-as-fp32 attention from the paged cache: (out, P @ |V|), both
    [rows, H_q, D] fp32; the second sizes the tolerance (see above). Each
    run of sequences with equal query length (q_groups) in turn; a
    sequence's queries are the last q_len of its ctx tokens, causal."""
    hq, hkv, d = heads_of(case)
    out = torch.empty(q_rows(case), hq, d, dtype=torch.float32, device=s.q.device)
    pv_abs = torch.empty_like(out)
    seq0 = row0 = 0
    for b, ql in q_groups(case):
        rows = slice(row0, row0 + b * ql)
        _reference_group(
            s, case, seq0, b, ql, out[rows].view(b, ql, hkv, hq // hkv, d),
            pv_abs[rows].view(b, ql, hkv, hq // hkv, d),
        )  # fmt: skip
        seq0, row0 = seq0 + b, row0 + b * ql
    return out, pv_abs


def _reference_group(
    s: Any,
    case: Case,
    seq0: int,
    b: int,
    ql: int,
    out: torch.Tensor,
    pv_abs: torch.Tensor,
) -> None:
    """reference() for sequences seq0 .. seq0 + b - 1, each of ql queries:
    into out / pv_abs [b, ql, H_kv, G, D]."""
    hq, hkv, d = heads_of(case)
    g, n = hq // hkv, case["ctx"]
    meta = metadata(case, s.q.device)
    table = meta["block_table"].long()
    scale = meta["scale"]
    row_base = int(meta["qsl"][seq0])
    q = s.q[row_base : row_base + b * ql].view(b, ql, hkv, g, d)
    seqs = max(1, REF_CHUNK_BYTES // (hkv * n * 2 * d * 4))
    for i in range(0, b, seqs):
        j = slice(i, min(b, i + seqs))
        # [cs, blocks, H_kv, bs, 2D] -> [cs, H_kv, ctx, 2D], fp32
        kv = s.kv[table[seq0 + i : seq0 + j.stop]].permute(0, 2, 1, 3, 4)
        kv = kv.reshape(kv.shape[0], hkv, -1, 2 * d)[:, :, :n].float()
        k, v = kv[..., :d], kv[..., d:]
        v_abs = v.abs()
        cs = kv.shape[0]
        rows = max(1, REF_CHUNK_BYTES // (cs * hq * n * 4))
        for r0 in range(0, ql, rows):
            r1 = min(ql, r0 + rows)
            keys_end = n - ql + r1  # the chunk's last row sees keys [0, keys_end)
            # [cs, rows, H_kv, G, D] -> [cs, H_kv, G * rows, D]
            qc = q[j, r0:r1].float().permute(0, 2, 3, 1, 4)
            qc = qc.reshape(cs, hkv, g * (r1 - r0), d)
            sc = (qc @ k[:, :, :keys_end].transpose(-1, -2)) * scale
            row = torch.arange(r0, r1, device=sc.device) + (n - ql)
            hide = torch.arange(keys_end, device=sc.device)[None, :] > row[:, None]
            sc.view(cs, hkv, g, r1 - r0, keys_end).masked_fill_(hide, float("-inf"))
            p = torch.softmax(sc, dim=-1)
            del sc
            for dst, val in ((out, v), (pv_abs, v_abs)):
                o = p @ val[:, :, :keys_end]
                dst[j, r0:r1] = o.view(cs, hkv, g, r1 - r0, d).permute(0, 3, 1, 2, 4)
            del p


def check_inputs(
    case: Case, device: torch.device
) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """A fresh set and its fp32 reference, cached per case so every
    implementation sees the same."""
    key = tuple(sorted(case.items())) + (str(device),)
    if key not in _check_cache:
        _check_cache.clear()
        gen = torch.Generator(device=device).manual_seed(1234)
        s = timing.alloc_sets(set_specs(case), 1, device, generator=gen)[0]
        _check_cache[key] = (s, *reference(s, case))
    return _check_cache[key]


def compare_to_reference(
    out: torch.Tensor, ref: torch.Tensor, pv_abs: torch.Tensor, dtype: torch.dtype
) -> tuple[bool, str, float | None]:
    """out against the per-element bound above: (ok, reason, max abs error).
    Row-chunked, so the fp32 temporaries stay small."""
    if out.shape != ref.shape or out.dtype != dtype:
        return (
            False,
            f"out: got {tuple(out.shape)} {out.dtype}, expected "
            f"{tuple(ref.shape)} {dtype}",
            None,
        )
    u = UNIT_ROUNDOFF[dtype]
    rows = max(1, REF_CHUNK_BYTES // max(1, ref[0].numel() * 4))
    max_err, bad, nans = 0.0, 0, 0
    worst: tuple[float, float, float] | None = None  # (excess, err, allowed)
    for r0 in range(0, ref.shape[0], rows):
        o = out[r0 : r0 + rows].float()
        rf, pa = ref[r0 : r0 + rows], pv_abs[r0 : r0 + rows]
        err = (o - rf).abs().nan_to_num(float("inf")).flatten()
        allowed = (rf.abs() * (u * (1 + 2.0**-6)) + pa * (u + FP32_SLACK)).flatten()
        allowed += ABS_SLACK
        nans += int(torch.isnan(o).sum())
        bad += int((err > allowed).sum())
        if err.numel():
            max_err = max(max_err, float(err.max()))
            k = int((err - allowed).argmax())
            excess = float(err[k] - allowed[k])
            if excess > 0 and (worst is None or excess > worst[0]):
                worst = (excess, float(err[k]), float(allowed[k]))
    if worst is not None:
        return (
            False,
            f"out mismatch vs FP32 reference ({nans} NaN): {bad} / {ref.numel()} "
            f"elements over the bound; worst: abs err {worst[1]:.3g} where "
            f"{worst[2]:.3g} allowed (max abs err {max_err:.3g})",
            max_err,
        )
    return True, "", max_err


def check(
    fn: CallFn, case: Case, device: torch.device
) -> tuple[bool, str, float | None]:
    s, ref, pv_abs = check_inputs(case, device)
    s.out.fill_(float("nan"))  # an unwritten row is caught
    out = fn(s)
    if device.type == "cuda":
        torch.cuda.synchronize()
    out = out.reshape(ref.shape)
    ok, why, err = compare_to_reference(out, ref, pv_abs, DTYPES[case["dtype"]])
    if not ok:
        log(f"  !! {label(case)}: disagrees with the FP32 reference: {why}")
    return ok, why, err
