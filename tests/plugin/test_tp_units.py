# SPDX-License-Identifier: Apache-2.0
"""Tensor parallelism without an engine: what each rank of a TP=2 (or TP=4)
model holds and computes, against the unsplit (TP=1) layer.

The layers are vLLM's own parallel linear classes (QKVParallelLinear,
MergedColumnParallelLinear, RowParallelLinear) built with
``--quantization myops_w4a16`` on a rank of a faked tensor-parallel group
(vLLM's rank/world-size getters patched, in the test only), fed whole
checkpoint tensors through their weight loaders as a model's load_weights
feeds them (fused parts by shard id), then processed and applied as vLLM
does. Checked:

- column-parallel shards (N split: q/k/v and gate/up parts, replicated kv
  heads when TP exceeds them, act-order g_idx kept whole): each rank's
  output is exactly the unsplit layer's columns for that rank;
- row-parallel shards (K split into whole groups; scales, zeros and g_idx
  cut per shard and renumbered; the bias on rank 0 only): each rank's
  partial product is its rows' share, and their sum (vLLM's all-reduce) is
  the unsplit output up to bf16 rounding of the partials;
- refusals at load, each naming the layer, K, the TP size and the group:
  a shard that is not a whole number of groups (online and GPTQ), one
  group over all of K split, act-order split along K, a g_idx that puts a
  shard's row in another shard's group, fused parts not a multiple of 8;
- the CUSTOM attention impl with a rank's num_heads / N q heads and
  max(1, kv_heads / N) kv heads: each rank's output is the unsplit
  attention's heads for that rank.

With the W4A16 CPU kernels the linear methods run on them; without, a
reference GEMM (fp64, test only) stands in so the shard arithmetic is
still checked.
"""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch

from tests.plugin._helpers import requires_vllm
from vllm_myops import _custom_ops
from vllm_myops.quantization import reference

pytestmark = requires_vllm

DTYPE = torch.bfloat16
HIDDEN = 256
HEAD = 32
Q_HEADS = 4
INTER = 256
M = 5  # tokens
TP = 2


def _w4a16_cpu_kernels() -> bool:
    try:
        from vllm_myops import _extension, platform

        return _extension.is_available() and "cpu" in platform.kernel_devices(
            ("w4a16_gemm", "w4a16_repack")
        )
    except Exception:
        return False


@pytest.fixture
def w4a16(monkeypatch):
    """Lets the config build linear methods; without the CPU kernels, an
    fp64 reference GEMM of the same contract (repack keeps the codes)."""
    from vllm_myops.quantization import config

    monkeypatch.setitem(config.KERNELS, "supported", True)
    if _w4a16_cpu_kernels():
        return "kernels"

    def repack(qweight, size_k, size_n):
        return reference.unpack_int4(qweight, 0, size_k)

    def gemm(a, b, scales, zeros, bias, size_k, size_n, group_size):
        z = None if zeros is None else zeros.round().int()
        return reference.w4a16_gemm_ref(a, b, scales, z, group_size, None, bias)

    monkeypatch.setattr(_custom_ops, "w4a16_repack", repack, raising=False)
    monkeypatch.setattr(_custom_ops, "w4a16_gemm", gemm, raising=False)
    return "reference"


def _on_rank(monkeypatch, rank: int, size: int) -> None:
    """vLLM's tensor-parallel rank and world size, as the layers and the
    parameter classes read them."""
    from vllm.model_executor import parameter
    from vllm.model_executor.layers import linear

    for mod in (linear, parameter):
        monkeypatch.setattr(mod, "get_tensor_model_parallel_rank", lambda: rank)
        monkeypatch.setattr(mod, "get_tensor_model_parallel_world_size", lambda: size)


def _config(source: str, group: int, sym: bool, act: bool = False):
    from vllm_myops.quantization.config import MyopsW4A16Config

    if source == "online":
        return MyopsW4A16Config(group_size=group, sym=sym)
    return MyopsW4A16Config(group_size=group, sym=sym, source="gptq", desc_act=act)


# --------------------------------------------------------------------------
# layers as a Llama builds them, and their checkpoint tensors
# --------------------------------------------------------------------------
def _parts(kind: str, kv_heads: int) -> list[tuple[Any, int]]:
    """(shard id, N) of each checkpoint weight a layer fuses."""
    if kind == "qkv":
        return [("q", Q_HEADS * HEAD), ("k", kv_heads * HEAD), ("v", kv_heads * HEAD)]
    if kind == "gate_up":
        return [(0, INTER), (1, INTER)]
    return [(None, HIDDEN)]  # down: row-parallel


def _build(kind: str, cfg, kv_heads: int = 2, input_size: int | None = None):
    from vllm.model_executor.layers import linear

    common = dict(quant_config=cfg, params_dtype=DTYPE)
    if kind == "qkv":
        return linear.QKVParallelLinear(
            HIDDEN, HEAD, Q_HEADS, kv_heads, bias=False,
            prefix="model.layers.0.self_attn.qkv_proj", **common,
        )  # fmt: skip
    if kind == "gate_up":
        return linear.MergedColumnParallelLinear(
            HIDDEN, [INTER, INTER], bias=False,
            prefix="model.layers.0.mlp.gate_up_proj", **common,
        )  # fmt: skip
    return linear.RowParallelLinear(
        input_size or INTER, HIDDEN, bias=True,
        prefix="model.layers.0.mlp.down_proj", **common,
    )  # fmt: skip


def _checkpoint(kind: str, source: str, group: int, sym: bool, act: bool, kv: int):
    """Per part: the HF weight [N, K] (bf16), its GPTQ tensors (what
    `vllm-myops quantize` writes; act-order parts of one layer share one
    g_idx, as the command gives them) and the dequantized weight [K, N]
    the unsplit layer multiplies by."""
    from vllm_myops.cli.quantize import act_order_g_idx, quantize_weight
    from vllm_myops.quantization.gptq_format import gptq_zeros

    g = torch.Generator().manual_seed(7)
    size_k = INTER if kind == "down" else HIDDEN
    weights = {
        sid: (torch.randn(n, size_k, generator=g) * size_k**-0.5).to(DTYPE)
        for sid, n in _parts(kind, kv)
    }
    shared = None
    if act:
        stacked = torch.cat(list(weights.values()), dim=0).float()
        shared = act_order_g_idx(stacked.t(), group)
    parts = {}
    for sid, w in weights.items():
        q = quantize_weight(w, group, sym, act, shared)
        codes = reference.unpack_int4(q["qweight"], 0, size_k)
        zeros = gptq_zeros(q["qzeros"], w.shape[0], sym, "gptq")
        g_idx = q["g_idx"] if group != -1 else None
        deq = reference.dequantize(codes, q["scales"], zeros, group, g_idx)
        parts[sid] = {"weight": w, "gptq": q, "dequantized": deq}
    bias = (torch.randn(HIDDEN, generator=g) * 0.1).to(DTYPE)
    return parts, bias


def _load(layer, source: str, parts: dict, bias: torch.Tensor) -> None:
    """As LlamaForCausalLM.load_weights does: fused parts by shard id."""
    for sid, p in parts.items():
        tensors = {"weight": p["weight"]} if source == "online" else p["gptq"]
        for name, t in tensors.items():
            param = getattr(layer, name)
            if sid is None:
                param.weight_loader(param, t)
            else:
                param.weight_loader(param, t, sid)
    if layer.bias is not None:
        layer.bias.weight_loader(layer.bias, bias)
    layer.quant_method.quant_config.quantized_prefixes.append(layer.prefix)
    layer.quant_method.process_weights_after_loading(layer)


def _shard(monkeypatch, kind, source, group, sym, act, kv, rank, size, parts, bias):
    _on_rank(monkeypatch, rank, size)
    layer = _build(kind, _config(source, group, sym, act), kv)
    _load(layer, source, parts, bias)
    return layer


COLUMN_CASES = [  # (kind, source, group, sym, act, kv_heads)
    ("qkv", "online", 128, False, False, 2),
    ("qkv", "online", 32, True, False, 1),  # kv heads replicated on both ranks
    ("gate_up", "online", -1, False, False, 2),  # per-channel: K is not split
    ("qkv", "gptq", 64, False, False, 2),
    ("qkv", "gptq", 128, True, False, 1),
    ("gate_up", "gptq", 32, False, False, 2),
    ("gate_up", "gptq", -1, True, False, 2),
    ("qkv", "gptq", 64, False, True, 2),  # act-order: g_idx whole on every rank
    ("gate_up", "gptq", 32, True, True, 2),
]


@pytest.mark.parametrize("kind,source,group,sym,act,kv", COLUMN_CASES)
def test_column_parallel_shards_are_the_unsplit_columns(
    monkeypatch, w4a16, kind, source, group, sym, act, kv
):
    parts, bias = _checkpoint(kind, source, group, sym, act, kv)
    x = (torch.randn(M, HIDDEN, generator=torch.Generator().manual_seed(3))).to(DTYPE)
    case = (kind, source, group, sym, act, kv)
    full = _shard(monkeypatch, *case, 0, 1, parts, bias)
    y_full = full.quant_method.apply(full, x)
    # The unsplit layer against the fp64 product of its dequantized weights.
    deq = torch.cat([p["dequantized"] for p in parts.values()], dim=1)
    expect = (x.double() @ deq.double()).to(DTYPE)
    torch.testing.assert_close(y_full.float(), expect.float(), atol=0.03, rtol=0.02)
    replicas = TP // kv if kind == "qkv" and kv < TP else 1
    for rank in range(TP):
        layer = _shard(monkeypatch, *case, rank, TP, parts, bias)
        cols, start = [], 0
        for sid, n in _parts(kind, kv):
            per_rank = n // TP if sid in ("q", 0, 1) or replicas == 1 else n
            owner = rank if per_rank != n else 0
            cols.append(
                torch.arange(start + owner * per_rank, start + (owner + 1) * per_rank)
            )
            start += n
        idx = torch.cat(cols)
        y = layer.quant_method.apply(layer, x)
        assert y.shape == (M, idx.numel())
        # Same codes, scales and K order per column: the same bits.
        assert torch.equal(y, y_full[:, idx]), (rank, (y - y_full[:, idx]).abs().max())
        if act:
            assert layer.w4a16_perm is not None  # the act-order gather is kept


ROW_CASES = [  # (source, group, sym)
    ("online", 128, False),  # one group per rank
    ("online", 64, True),
    ("online", 32, False),
    ("gptq", 128, True),
    ("gptq", 64, False),
    ("gptq", -1, True),  # one group over all of K: scales on every rank
]


@pytest.mark.parametrize("source,group,sym", ROW_CASES)
def test_row_parallel_shards_sum_to_the_unsplit_layer(
    monkeypatch, w4a16, source, group, sym
):
    parts, bias = _checkpoint("down", source, group, sym, False, 2)
    deq = parts[None]["dequantized"].double()  # [K, N], the unsplit weight
    x = torch.randn(M, INTER, generator=torch.Generator().manual_seed(4)).to(DTYPE)
    case = ("down", source, group, sym, False, 2)
    full = _shard(monkeypatch, *case, 0, 1, parts, bias)
    y_full = full.quant_method.apply(full, x, full.bias)
    k = INTER // TP
    total = torch.zeros(M, HIDDEN, dtype=torch.float64)
    for rank in range(TP):
        layer = _shard(monkeypatch, *case, rank, TP, parts, bias)
        rows = slice(rank * k, (rank + 1) * k)
        b = layer.bias if rank == 0 else None  # RowParallelLinear.forward's rule
        y = layer.quant_method.apply(layer, x[:, rows].contiguous(), b)
        expect = x[:, rows].double() @ deq[rows]
        if rank == 0:
            expect = expect + bias.double()
        torch.testing.assert_close(
            y.float(), expect.to(DTYPE).float(), atol=0.03, rtol=0.02
        )
        total += y.double()
    # vLLM's all-reduce of the bf16 partials: the unsplit output up to their
    # rounding (one bf16 ulp of each partial, 2^-8 relative).
    torch.testing.assert_close(total.float(), y_full.float(), atol=0.02, rtol=2**-7)
    full_expect = (x.double() @ deq + bias.double()).float()
    assert (total.float() - full_expect).abs().max() < 0.05


def test_row_parallel_act_order_within_each_shard(monkeypatch, w4a16):
    """A g_idx permuted only inside each shard (every row in one of its own
    shard's groups): each rank renumbers its groups from 0 and gathers its
    activation columns by its own permutation; the sum is the unsplit
    layer's output."""
    from vllm_myops.cli.quantize import act_order_g_idx
    from vllm_myops.quantization.gptq_format import pack_gptq_zeros

    group, k = 32, INTER // TP
    g = torch.Generator().manual_seed(5)
    w = torch.randn(INTER, HIDDEN, generator=g) * INTER**-0.5  # [K, N]
    g_idx = torch.cat(
        [
            act_order_g_idx(w[r * k : (r + 1) * k], group) + r * (k // group)
            for r in range(TP)
        ]
    )
    perm = torch.sort(g_idx.long(), stable=True).indices
    codes_p, scales, zeros = reference.quantize_rtn(w[perm], group, False)
    codes = torch.empty_like(codes_p)
    codes[perm] = codes_p
    tensors = {
        "qweight": reference.pack_int4(codes, 0),
        "qzeros": pack_gptq_zeros(zeros, scales.shape[0], HIDDEN),
        "scales": scales.to(DTYPE),
        "g_idx": g_idx,
    }
    x = torch.randn(M, INTER, generator=g).to(DTYPE)
    deq = reference.dequantize(codes, scales.to(DTYPE), zeros, group, g_idx).double()
    total = torch.zeros(M, HIDDEN, dtype=torch.float64)
    for rank in range(TP):
        _on_rank(monkeypatch, rank, TP)
        layer = _build("down", _config("gptq", group, False))
        for name, t in tensors.items():
            getattr(layer, name).weight_loader(getattr(layer, name), t)
        layer.quant_method.quant_config.quantized_prefixes.append(layer.prefix)
        layer.quant_method.process_weights_after_loading(layer)
        assert layer.w4a16_perm is not None
        rows = slice(rank * k, (rank + 1) * k)
        y = layer.quant_method.apply(layer, x[:, rows].contiguous(), None)
        torch.testing.assert_close(
            y.float(),
            (x[:, rows].double() @ deq[rows]).to(DTYPE).float(),
            atol=0.03,
            rtol=0.02,
        )
        total += y.double()
    assert (total - x.double() @ deq).abs().max() < 0.05


# --------------------------------------------------------------------------
# refusals at load
# --------------------------------------------------------------------------
@pytest.mark.parametrize("source", ["online", "gptq"])
def test_row_parallel_shard_of_partial_groups_is_refused(monkeypatch, w4a16, source):
    """K = 384 over 2 ranks: 192 rows each, 1.5 groups of 128 (SmolLM2's
    K = 576 at TP=3 would be the same)."""
    _on_rank(monkeypatch, 1, TP)
    with pytest.raises(
        ValueError, match="row-parallel shards must hold whole groups"
    ) as e:
        _build("down", _config(source, 128, False), input_size=384)
    msg = str(e.value)
    for named in ("model.layers.0.mlp.down_proj", "K=384", "tensor_parallel_size 2",
                  "192 rows per rank", "group_size 128"):  # fmt: skip
        assert named in msg, msg
    _on_rank(monkeypatch, 0, 1)  # unsplit, the same K is fine (a partial last group)
    _build("down", _config(source, 128, False), input_size=384)
    _on_rank(monkeypatch, 0, TP)  # and 64 divides the 192 rows of a shard
    _build("down", _config(source, 64, False), input_size=384)


def test_online_per_channel_row_parallel_is_refused(monkeypatch, w4a16):
    _on_rank(monkeypatch, 0, TP)
    with pytest.raises(ValueError, match="group_size -1") as e:
        _build("down", _config("online", -1, True))
    assert "tensor_parallel_size 2" in str(e.value)
    assert "model.layers.0.mlp.down_proj" in str(e.value)


def test_act_order_row_parallel_is_refused(monkeypatch, w4a16):
    _on_rank(monkeypatch, 1, TP)
    with pytest.raises(ValueError, match="act-order") as e:
        _build("down", _config("gptq", 64, False, act=True))
    msg = str(e.value)
    assert "model.layers.0.mlp.down_proj" in msg and "K=256" in msg
    assert "tensor_parallel_size 2" in msg and "group_size 64" in msg
    _build("qkv", _config("gptq", 64, False, act=True))  # column-parallel: fine


def test_g_idx_crossing_the_shards_is_refused_at_load(monkeypatch, w4a16):
    """desc_act false but a permuted g_idx (GPTQ's whole-K order): rank 0's
    rows name groups held by rank 1; refused rather than read another
    group's scale."""
    from vllm_myops.cli.quantize import act_order_g_idx, quantize_weight

    w = torch.randn(HIDDEN, INTER, generator=torch.Generator().manual_seed(6))
    q = quantize_weight(w.to(DTYPE), 64, True, True, act_order_g_idx(w.t(), 64))
    _on_rank(monkeypatch, 0, TP)
    layer = _build("down", _config("gptq", 64, True))
    for name, t in q.items():
        getattr(layer, name).weight_loader(getattr(layer, name), t)
    with pytest.raises(ValueError, match="act-order groups cross") as e:
        layer.quant_method.process_weights_after_loading(layer)
    msg = str(e.value)
    assert "model.layers.0.mlp.down_proj.g_idx" in msg
    assert "tensor_parallel_size 2" in msg and "K=256" in msg


def test_fused_parts_not_multiples_of_8_are_refused(monkeypatch, w4a16):
    """gate/up of 24 + 40 columns over 2 ranks: 12 + 20 per rank (32 in all,
    a multiple of 8, but qzeros would mix the parts' columns in one int32)."""
    from vllm.model_executor.layers import linear

    _on_rank(monkeypatch, 0, TP)
    with pytest.raises(ValueError, match="multiples of 8") as e:
        linear.MergedColumnParallelLinear(
            HIDDEN, [24, 40], bias=False, quant_config=_config("gptq", 64, True),
            params_dtype=DTYPE, prefix="model.layers.0.mlp.gate_up_proj",
        )  # fmt: skip
    assert "[12, 20]" in str(e.value) and "gate_up_proj" in str(e.value)


# --------------------------------------------------------------------------
# CUSTOM attention with a rank's heads
# --------------------------------------------------------------------------
BLOCK = 16


def _attention_step(q_lens: list[int], seq_lens: list[int], kv_heads: int):
    """A mixed step (decode, chunked prefill, prefill) over scattered blocks
    and the backend's metadata for it."""
    from vllm_myops.attention import metadata, vllm_compat

    b = len(q_lens)
    qsl = torch.zeros(b + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(torch.tensor(q_lens), 0)
    max_blocks = max(-(-s // BLOCK) for s in seq_lens)
    table = torch.arange(b * max_blocks, dtype=torch.int32).flip(0).view(b, max_blocks)
    slots = [
        int(table[i, pos // BLOCK]) * BLOCK + pos % BLOCK
        for i, (q, s) in enumerate(zip(q_lens, seq_lens))
        for pos in range(s - q, s)
    ]
    sl = torch.tensor(seq_lens, dtype=torch.int32)
    common = vllm_compat.common_attention_metadata(
        query_start_loc=qsl,
        query_start_loc_cpu=qsl.clone(),
        seq_lens=sl,
        _seq_lens_cpu=sl.clone(),  # 0.24 only
        num_reqs=b,
        num_actual_tokens=int(qsl[-1]),
        max_query_len=max(q_lens),
        max_seq_len=max(seq_lens),
        block_table_tensor=table,
        slot_mapping=torch.tensor(slots, dtype=torch.int64),
        causal=True,
    )
    spec = types.SimpleNamespace(
        num_kv_heads=kv_heads, head_size=64, block_size=BLOCK, dtype=DTYPE
    )
    model_config = types.SimpleNamespace(
        max_model_len=2048, get_num_attention_heads=lambda parallel: 0
    )
    cfg = types.SimpleNamespace(model_config=model_config, parallel_config=None)
    builder = metadata.MyopsAttentionMetadataBuilder(
        spec, ["model.layers.0.self_attn.attn"], cfg, torch.device("cpu")
    )
    return builder.build(0, common), int(qsl[-1]), max_blocks * b


def _impl(num_heads: int, num_kv_heads: int):
    from vllm_myops.attention import backend

    return backend.MyopsAttentionImpl(
        num_heads=num_heads, head_size=64, scale=0.125, num_kv_heads=num_kv_heads,
        alibi_slopes=None, sliding_window=None, kv_cache_dtype="auto",
        logits_soft_cap=None, attn_type="decoder", kv_sharing_target_layer_name=None,
    )  # fmt: skip


@pytest.mark.parametrize(
    "q_heads,kv_heads,tp",
    [(4, 2, 2), (6, 2, 2), (8, 2, 4), (4, 2, 4)],  # last: kv heads replicated
)
def test_custom_attention_with_a_ranks_heads(q_heads, kv_heads, tp):
    """Rank r runs q heads [r*Hq/N, (r+1)*Hq/N) and kv heads as vLLM's
    QKVParallelLinear gives them (Hkv/N each, or one replicated head when N
    exceeds Hkv); its output is the unsplit attention's heads r*Hq/N..."""
    from vllm_myops import _extension
    from vllm_myops.attention import backend, registration
    from vllm_myops.family import RegistrationContext

    if not backend.KERNELS["supported"] and _extension.is_available():
        registration.register(
            RegistrationContext("0.32.0", True, "loaded", _extension.build_info())
        )
    if not backend.KERNELS["supported"]:
        pytest.skip(f"paged attention kernels unavailable: {backend.KERNELS}")
    md, t, blocks = _attention_step([1, 5, 7, 1], [40, 21, 7, 17], kv_heads)
    g = torch.Generator().manual_seed(8)
    q = torch.randn(t, q_heads, 64, generator=g).to(DTYPE)
    k = torch.randn(t, kv_heads, 64, generator=g).to(DTYPE)
    v = torch.randn(t, kv_heads, 64, generator=g).to(DTYPE)
    cache = torch.randn(blocks, kv_heads, BLOCK, 128, generator=g).to(DTYPE)
    full_out = torch.zeros(t, q_heads, 64, dtype=DTYPE)
    _impl(q_heads, kv_heads).forward(None, q, k, v, cache.clone(), md, full_out)
    hq, hkv = q_heads // tp, max(1, kv_heads // tp)
    replicas = max(1, tp // kv_heads)
    for rank in range(tp):
        qs = slice(rank * hq, (rank + 1) * hq)
        first_kv = rank // replicas * hkv
        ks = slice(first_kv, first_kv + hkv)
        out = torch.zeros(t, hq, 64, dtype=DTYPE)
        rank_md, _, _ = _attention_step([1, 5, 7, 1], [40, 21, 7, 17], hkv)
        _impl(hq, hkv).forward(
            None, q[:, qs].contiguous(), k[:, ks].contiguous(), v[:, ks].contiguous(),
            cache[:, ks].contiguous(), rank_md, out,
        )  # fmt: skip
        torch.testing.assert_close(out, full_out[:, qs], atol=0, rtol=0)
