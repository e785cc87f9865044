# SPDX-License-Identifier: Apache-2.0
"""The paged attention benchmark's implementations: the KV-bytes floor, ours
(vllm_myops._custom_ops.paged_attention, on the set's cache as it is) and the
anchors (torch SDPA, vLLM-CPU's CPU_ATTN, vLLM 0.24's FlashAttention 3 / 2
and Triton unified_attention), which convert the set's cache into their own
layouts before timing; IMPL_CLASSES names them all."""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

import torch

from benchmarks.common.impls import BytesPassFloor, ConvertingImpl, load_our_kernels
from benchmarks.common.sweep import Impl, Unavailable
from benchmarks.kernels.attention.cases import (
    dense_kv,
    heads_of,
    metadata,
    num_seqs,
    paged_nhd,
    q_groups,
)

# ---------------------------------------------------------------------------
# Implementations: fn(set) -> out [rows, H_q, D] (or [B, q_len, H_q, D])
# ---------------------------------------------------------------------------


class AttnImpl(ConvertingImpl):
    """An implementation whose KV cache lives in its own layout, converted
    from the set's own cache (per set: each set holds its own keys and
    values) before timing; the case's metadata is shared."""

    convert_each = True


def _vllm(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - any import failure means unavailable
        raise Unavailable(
            f"{module} not importable ({type(e).__name__}: {e}); put the carried "
            "vLLM 0.24 tree on PYTHONPATH (tools/gpu/device_session.sh vllm_env)"
        ) from None


def _paged_varlen_args(s: Any, w: tuple[torch.Tensor, torch.Tensor], case: Any) -> dict:
    """The arguments vLLM's varlen kernels (FlashAttention, Triton
    unified_attention) share: q, paged k / v (block 16, NHD), out, the
    case's sequence metadata, causal."""
    meta = metadata(case, s.q.device)
    k, v = w
    return {
        "q": s.q,
        "k": k,
        "v": v,
        "out": s.out,
        "cu_seqlens_q": meta["qsl"],
        "max_seqlen_q": meta["max_q"],
        "seqused_k": meta["seq_lens"],
        "max_seqlen_k": meta["max_seq"],
        "softmax_scale": meta["scale"],
        "causal": True,
        "block_table": meta["block_table"],
    }


def _need_cuda(device: torch.device) -> None:
    if device.type != "cuda":
        raise Unavailable("CUDA only")


class Floor(BytesPassFloor):
    name = "floor"
    description = (
        "one pass over the KV-cache bytes (CUDA torch.neg, CPU copy), timed like the op"
    )
    operand = "kv"


class Ours(AttnImpl):
    name = "ours"
    description = "vllm_myops._custom_ops.paged_attention"
    is_anchor = False

    def load(self):
        self.ops, note = load_our_kernels(self.device, ("paged_attention",))
        return note

    def call(self, s, w, case):
        meta = metadata(case, s.q.device)
        self.ops.paged_attention(
            s.out,
            s.q,
            s.kv,
            meta["qsl"],
            meta["seq_lens"],
            meta["block_table"],
            meta["scale"],
            meta["max_q"],
            meta["max_seq"],
        )
        return s.out


class Sdpa(AttnImpl):
    name = "sdpa"
    description = "torch SDPA on dense per-sequence K/V copies (enable_gqa)"

    def convert(self, s, case):
        return dense_kv(s, case)

    def call(self, s, w, case):
        meta = metadata(case, s.q.device)
        k, v = w
        hq, _, d = heads_of(case)
        outs, seq0, row0 = [], 0, 0
        for b, ql in q_groups(case):
            q = s.q[row0 : row0 + b * ql].view(b, ql, hq, d).transpose(1, 2)
            kv = slice(seq0, seq0 + b)
            # The queries are the last ql of the ctx tokens. ql == ctx: plain
            # causal (SDPA's fused kernels); 1 < ql < ctx: causal aligned to
            # the end, an explicit mask (is_causal aligns to the start).
            n = case["ctx"]
            mask = None
            if 1 < ql < n:
                mask = torch.ones(ql, n, dtype=torch.bool, device=q.device).tril(n - ql)
            o = torch.nn.functional.scaled_dot_product_attention(
                q,
                k[kv],
                v[kv],
                attn_mask=mask,
                is_causal=ql == n and ql > 1,
                scale=meta["scale"],
                enable_gqa=True,
            )
            outs.append(o.transpose(1, 2).reshape(b * ql, hq, d))
            seq0, row0 = seq0 + b, row0 + b * ql
        return outs[0] if len(outs) == 1 else torch.cat(outs)


class CpuAttn(AttnImpl):
    name = "cpu_attn"
    description = "vLLM-CPU cpu_attention_with_kv_cache (the CPU_ATTN backend's kernel)"

    def load(self):
        if self.device.type != "cpu":
            raise Unavailable("vLLM-CPU's kernel runs on CPU only")
        self.vops = _vllm("vllm._custom_ops")
        self.backend = _vllm("vllm.v1.attention.backends.cpu_attn")
        if not hasattr(torch.ops._C, "cpu_attention_with_kv_cache"):
            raise Unavailable("torch.ops._C.cpu_attention_with_kv_cache missing")
        # Its AMX path needs the AMX state from Linux (a oneDNN bf16 call
        # requests it in vLLM's processes).
        with contextlib.suppress(Exception):
            torch._C._cpu._init_amx()
        return "vllm " + getattr(importlib.import_module("vllm"), "__version__", "?")

    def supports(self, case):
        if case["block"] % 16:
            raise Unavailable("vLLM-CPU needs block sizes that are multiples of 16")

    def convert(self, s, case):
        meta = metadata(case, s.kv.device)
        hq, hkv, d = heads_of(case)
        dtype, bs = s.kv.dtype, case["block"]
        isa = self.backend._get_attn_isa(dtype, bs, d)
        cache = torch.zeros_like(s.kv)
        view = cache.view(cache.shape[0], hkv, 2 * bs, d)
        key_cache, value_cache = view.chunk(2, dim=2)
        k, v = dense_kv(s, case)  # [B, H_kv, ctx, D]
        b, n = num_seqs(case), case["ctx"]
        tok = torch.arange(n)
        slots = (
            meta["block_table"].long().cpu()[:, tok // bs] * bs + tok % bs
        ).reshape(-1)
        self.vops.cpu_attn_reshape_and_cache(
            k.permute(0, 2, 1, 3).reshape(b * n, hkv, d),
            v.permute(0, 2, 1, 3).reshape(b * n, hkv, d),
            key_cache,
            value_cache,
            slots,
            isa,
        )
        sched = self.vops.cpu_attn_get_scheduler_metadata(
            num_reqs=num_seqs(case),
            num_heads=hq,
            num_kv_heads=hkv,
            head_dim=d,
            seq_lens=meta["seq_lens"],
            dtype=dtype,
            query_start_loc=meta["qsl"],
            causal=True,
            sliding_window_size=-1,
            isa=isa,
            enable_kv_split=True,
        )
        return key_cache, value_cache, sched

    def call(self, s, w, case):
        meta = metadata(case, s.q.device)
        key_cache, value_cache, sched = w
        self.vops.cpu_attention_with_kv_cache(
            query=s.q,
            key_cache=key_cache,
            value_cache=value_cache,
            output=s.out,
            query_start_loc=meta["qsl"],
            seq_lens=meta["seq_lens"],
            scale=meta["scale"],
            causal=True,
            alibi_slopes=None,
            sliding_window=-1,
            block_table=meta["block_table"],
            softcap=0.0,
            scheduler_metadata=sched,
            s_aux=None,
        )
        return s.out


class FlashAttn(AttnImpl):
    name = "fa3"
    description = "vLLM 0.24 flash_attn_varlen_func, FlashAttention-3, paged"
    fa_version = 3

    def load(self):
        _need_cuda(self.device)
        mod = _vllm("vllm.vllm_flash_attn")
        self.varlen = mod.flash_attn_varlen_func
        if not mod.is_fa_version_supported(self.fa_version):
            raise Unavailable(
                f"FA{self.fa_version} not supported here: "
                f"{mod.fa_version_unsupported_reason(self.fa_version)}"
            )
        return f"vllm_flash_attn FA{self.fa_version}"

    def convert(self, s, case):
        return paged_nhd(s, case)

    def call(self, s, w, case):
        self.varlen(
            **_paged_varlen_args(s, w, case),
            window_size=[-1, -1],
            fa_version=self.fa_version,
        )
        return s.out


class FlashAttn2(FlashAttn):
    name = "fa2"
    description = "vLLM 0.24 flash_attn_varlen_func, FlashAttention-2, paged"
    fa_version = 2


class Triton(AttnImpl):
    name = "triton"
    description = "vLLM 0.24 unified_attention (Triton), no split-KV segment buffers"

    def load(self):
        _need_cuda(self.device)
        mod = _vllm("vllm.v1.attention.ops.triton_unified_attention")
        self.fn = mod.unified_attention
        return "vllm triton_unified_attention"

    def convert(self, s, case):
        return paged_nhd(s, case)

    def call(self, s, w, case):
        self.fn(
            **_paged_varlen_args(s, w, case),
            window_size=(-1, -1),
            softcap=0,
            q_descale=None,
            k_descale=None,
            v_descale=None,
        )
        return s.out


IMPL_CLASSES: dict[str, type[Impl]] = {
    c.name: c for c in (Floor, Ours, Sdpa, CpuAttn, FlashAttn, FlashAttn2, Triton)
}
