# SPDX-License-Identifier: Apache-2.0
"""W4A16 vLLM integration, without an engine: the config (parsing,
defaults, claiming GPTQ only when asked), GPTQ v1/v2 zero points, act-order,
the linear methods' weight handling, the vLLM shim and the quantize CLI.

The linear-method tests run vllm_myops's real kernels when the extension has
them; the wiring tests (what reaches the GEMM: permutation, zeros, groups)
substitute a reference GEMM through monkeypatch, in the test only."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from tests.plugin._helpers import requires_vllm
from vllm_myops import _custom_ops
from vllm_myops.quantization import gptq_format, reference


def _kernels_available() -> bool:
    try:
        from vllm_myops import _extension, platform

        return _extension.is_available() and "cpu" in platform.kernel_devices(
            ("w4a16_gemm", "w4a16_repack")
        )
    except Exception:
        return False


requires_w4a16_kernels = pytest.mark.skipif(
    not _kernels_available(), reason="the extension has no W4A16 CPU kernels"
)


# --------------------------------------------------------------------------
# config
# --------------------------------------------------------------------------
@requires_vllm
def test_config_defaults_are_complete():
    from vllm_myops.quantization.config import MyopsW4A16Config

    cfg = MyopsW4A16Config()  # what vLLM builds for an unquantized checkpoint
    assert (cfg.source, cfg.group_size, cfg.sym, cfg.desc_act) == (
        "online",
        128,
        False,
        False,
    )
    assert MyopsW4A16Config.get_config_filenames() == []
    assert cfg.get_name() == "myops_w4a16"
    assert torch.bfloat16 in cfg.get_supported_act_dtypes()


@requires_vllm
def test_config_from_own_options_and_errors():
    from vllm_myops.quantization.config import MyopsW4A16Config as C

    cfg = C.from_config({"quant_method": "myops_w4a16", "group_size": 64, "sym": True})
    assert (cfg.source, cfg.group_size, cfg.sym) == ("online", 64, True)
    assert C.from_config({"quant_method": "myops_w4a16"}).group_size == 128
    with pytest.raises(ValueError, match="group_size"):
        C.from_config({"quant_method": "myops_w4a16", "group_size": 96})
    with pytest.raises(ValueError, match="sym"):
        C.from_config({"quant_method": "myops_w4a16", "sym": "yes"})
    with pytest.raises(ValueError, match="unknown keys"):
        C.from_config({"quant_method": "myops_w4a16", "bitz": 4})
    with pytest.raises(ValueError, match="quant_method"):
        C.from_config({"quant_method": "awq"})


@requires_vllm
def test_config_from_gptq():
    from vllm_myops.quantization.config import MyopsW4A16Config as C

    g = {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": 32,
        "desc_act": True,
        "sym": False,
        "checkpoint_format": "gptq_v2",
    }
    cfg = C.from_config(g)
    assert (
        cfg.source,
        cfg.group_size,
        cfg.sym,
        cfg.desc_act,
        cfg.checkpoint_format,
    ) == ("gptq", 32, False, True, "gptq_v2")
    assert C.from_config({**g, "group_size": -1}).group_size == -1
    with pytest.raises(ValueError, match="bits"):
        C.from_config({**g, "bits": 8})
    with pytest.raises(ValueError, match="lm_head"):
        C.from_config({**g, "lm_head": True})
    with pytest.raises(ValueError, match="checkpoint_format"):
        C.from_config({**g, "checkpoint_format": "marlin"})
    with pytest.raises(ValueError, match="group_size: missing"):
        C.from_config({k: v for k, v in g.items() if k != "group_size"})


@requires_vllm
def test_override_claims_gptq_only_when_asked():
    from vllm.model_executor.layers.quantization.auto_gptq import AutoGPTQConfig

    from vllm_myops.quantization.config import MyopsW4A16Config as C

    gptq = {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": 64,
        "desc_act": False,
        "sym": True,
    }
    assert C.override_quantization_method(gptq, "myops_w4a16") == "myops_w4a16"
    assert C.override_quantization_method(gptq, None) is None
    assert C.override_quantization_method(gptq, "gptq") is None
    assert (
        C.override_quantization_method({"quant_method": "awq"}, "myops_w4a16") is None
    )
    own = {"quant_method": "myops_w4a16", "group_size": 64}
    assert C.override_quantization_method(own, "myops_w4a16") == "myops_w4a16"
    # vLLM's own GPTQ override does not take the checkpoint from us when the
    # user asked for myops_w4a16 (it is consulted after custom methods).
    assert AutoGPTQConfig.override_quantization_method(gptq, "myops_w4a16") is None


@requires_vllm
def test_registered_with_vllm():
    from vllm.model_executor.layers.quantization import (
        QUANTIZATION_METHODS,
        get_quantization_config,
    )

    from vllm_myops.family import RegistrationContext
    from vllm_myops.quantization import config, registration

    status = registration.register(
        RegistrationContext(
            vllm_version="x", extension_loaded=False, extension_reason="not built here"
        )
    )
    assert status.registered and not status.supported
    assert "not built here" in status.reason
    assert "myops_w4a16" in QUANTIZATION_METHODS
    assert get_quantization_config("myops_w4a16") is config.MyopsW4A16Config


@requires_vllm
def test_unsupported_kernels_refuse_to_quantize(monkeypatch):
    from vllm_myops.quantization import config

    monkeypatch.setitem(config.KERNELS, "supported", False)
    monkeypatch.setitem(config.KERNELS, "reason", "no W4A16 kernels in this build")
    layer = _linear_layer_stub()
    with pytest.raises(RuntimeError, match="no W4A16 kernels in this build"):
        config.MyopsW4A16Config().get_quant_method(
            layer, "model.layers.0.mlp.down_proj"
        )


@requires_vllm
def test_non_linear_layers_stay_unquantized(monkeypatch):
    from vllm_myops.quantization import config

    monkeypatch.setitem(config.KERNELS, "supported", True)
    cfg = config.MyopsW4A16Config()
    assert cfg.get_quant_method(torch.nn.Embedding(4, 4), "lm_head") is None
    assert cfg.unquantized_prefixes == ["lm_head"]


def test_summarize_prefixes():
    from vllm_myops.quantization.config import summarize_prefixes

    p = [f"model.layers.{i}.{m}" for i in range(3) for m in ("qkv_proj", "o_proj")]
    assert summarize_prefixes(p + ["lm_head"]) == (
        "model.layers.{0..2}.qkv_proj, model.layers.{0..2}.o_proj, lm_head"
    )


# --------------------------------------------------------------------------
# the shim
# --------------------------------------------------------------------------
@requires_vllm
def test_shim_keeps_g_idx():
    # 0.32's default mapper drops g_idx (0.24 has none): the reason for ours.
    import vllm

    from vllm_myops.quantization import vllm_compat
    from vllm_myops.quantization.config import MyopsW4A16Config

    if vllm.__version__.startswith("0.32"):
        assert vllm_compat.base_mapper_drops_g_idx()
    names = [
        ("model.layers.0.mlp.down_proj.g_idx", 1),
        ("model.layers.0.mlp.down_proj.qweight", 2),
    ]
    assert list(MyopsW4A16Config.get_checkpoint_weight_mapper().apply(names)) == names
    lb, lmb, unq = vllm_compat.linear_classes()
    assert issubclass(unq, lmb)


# --------------------------------------------------------------------------
# GPTQ zero points and act-order
# --------------------------------------------------------------------------
def test_gptq_zeros_v1_v2():
    z = torch.randint(0, 16, (3, 16), dtype=torch.int32)
    z[0, 0], z[0, 1] = 0, 15  # the wrap-around of v1's z - 1
    v1 = gptq_format.pack_gptq_zeros(z, 3, 16)
    v2 = reference.pack_int4(z, 1)
    assert torch.equal(gptq_format.gptq_zeros(v1, 16, False, "gptq"), z)
    assert torch.equal(gptq_format.gptq_zeros(v2, 16, False, "gptq_v2"), z)
    assert gptq_format.gptq_zeros(v1, 16, True, "gptq") is None
    # symmetric v1 stores 8 - 1
    sym = gptq_format.pack_gptq_zeros(None, 2, 8)
    assert torch.equal(reference.unpack_int4(sym, 1, 8), torch.full((2, 8), 7))
    with pytest.raises(ValueError, match="checkpoint_format"):
        gptq_format.gptq_zeros(v1, 16, False, "awq")


def test_act_order_g_idx_from_column_norms():
    from vllm_myops.cli.quantize import act_order_g_idx

    w = torch.randn(96, 16)
    w[5] *= 100  # the largest row lands in group 0
    g = act_order_g_idx(w, 32)
    assert g[5] == 0
    assert torch.equal(torch.bincount(g), torch.tensor([32, 32, 32]))
    norms = w.norm(dim=1)
    assert norms[g == 0].min() >= norms[g == 1].max() >= norms[g == 2].min()
    perm = reference.act_order_perm(g, 96, 32)
    assert perm is not None and torch.equal(
        g[perm.long()].sort().values, g[perm.long()]
    )


# --------------------------------------------------------------------------
# the linear methods, fed as vLLM's loaders feed them
# --------------------------------------------------------------------------
def _linear_layer_stub():
    from vllm.model_executor.layers.linear import LinearBase

    layer = LinearBase.__new__(LinearBase)
    torch.nn.Module.__init__(layer)
    return layer


def _fake_gemm(monkeypatch):
    """A contract-shaped reference GEMM (test only): repack keeps the codes,
    the GEMM dequantizes them in fp64."""

    def repack(qweight, size_k, size_n):
        return reference.unpack_int4(qweight, 0, size_k)

    def gemm(a, b, scales, zeros, bias, size_k, size_n, group_size):
        return reference.w4a16_gemm_ref(
            a,
            b,
            scales,
            None if zeros is None else zeros.round().int(),
            group_size,
            None,
            bias,
        )

    monkeypatch.setattr(_custom_ops, "w4a16_repack", repack, raising=False)
    monkeypatch.setattr(_custom_ops, "w4a16_gemm", gemm, raising=False)


@pytest.fixture
def tp1(monkeypatch):
    from vllm.model_executor import parameter

    monkeypatch.setattr(parameter, "get_tensor_model_parallel_rank", lambda: 0)
    monkeypatch.setattr(parameter, "get_tensor_model_parallel_world_size", lambda: 1)


def _gptq_layer(cfg, tensors, size_k, size_n, dtype):
    from vllm_myops.quantization.linear_method import MyopsW4A16GPTQLinearMethod

    method = MyopsW4A16GPTQLinearMethod(cfg)
    layer = _linear_layer_stub()
    method.create_weights(
        layer,
        size_k,
        [size_n],
        size_k,
        size_n,
        dtype,
        weight_loader=lambda p, w: p.data.copy_(w),
    )
    for name, t in tensors.items():
        if name == "g_idx" and t is None:
            continue
        getattr(layer, name).weight_loader(getattr(layer, name), t)
    cfg.quantized_prefixes.append("x")
    method.process_weights_after_loading(layer)
    return method, layer


CASES = [  # (group, sym, act_order, format, K, N)
    (64, True, False, "gptq", 576, 96),
    (128, False, False, "gptq", 576, 64),  # partial last group
    (32, False, True, "gptq", 256, 40),
    (64, False, True, "gptq_v2", 192, 32),
    (-1, True, True, "gptq", 128, 16),
]


@requires_vllm
@pytest.mark.parametrize("group,sym,act,fmt,k,n", CASES)
def test_gptq_method_matches_reference(monkeypatch, tp1, group, sym, act, fmt, k, n):
    from vllm_myops.cli.quantize import act_order_g_idx
    from vllm_myops.quantization.config import MyopsW4A16Config

    if not _kernels_available():
        _fake_gemm(monkeypatch)
    torch.manual_seed(0)
    w = torch.randn(k, n)
    g_idx = act_order_g_idx(w, group) if act else reference.default_g_idx(k, group)
    perm = torch.sort(g_idx.long(), stable=True).indices
    codes_p, scales, zeros = reference.quantize_rtn(w[perm], group, sym)
    codes = torch.empty_like(codes_p)
    codes[perm] = codes_p
    qzeros = (
        gptq_format.pack_gptq_zeros(zeros, scales.shape[0], n)
        if fmt == "gptq" or zeros is None
        else reference.pack_int4(zeros, 1)
    )
    cfg = MyopsW4A16Config(
        group_size=group, sym=sym, source="gptq", desc_act=act, checkpoint_format=fmt
    )
    method, layer = _gptq_layer(
        cfg,
        {
            "qweight": reference.pack_int4(codes, 0),
            "qzeros": qzeros,
            "scales": scales.to(torch.bfloat16),
            "g_idx": g_idx,
        },
        k,
        n,
        torch.bfloat16,
    )
    # One group over all of K needs no permutation.
    assert (layer.w4a16_perm is not None) == (act and group != -1)
    assert not hasattr(layer, "qweight") and not hasattr(layer, "g_idx")
    x = torch.randn(3, 5, k, dtype=torch.bfloat16)
    bias = torch.randn(n, dtype=torch.bfloat16)
    out = method.apply(layer, x, bias)
    expect = reference.w4a16_gemm_ref(
        x.reshape(-1, k), codes, scales.to(torch.bfloat16), zeros, group, g_idx, bias
    ).reshape(3, 5, n)
    assert out.shape == (3, 5, n) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), expect.float(), atol=0.05, rtol=0.02)


_LAYER_WITHOUT_VLLM = """
import sys
sys.modules["vllm"] = None  # any import of vLLM now fails
import torch
from vllm_myops.quantization import reference, w4a16_layer
k, n, group = 256, 48, 64
torch.manual_seed(0)
codes = torch.randint(0, 16, (k, n), dtype=torch.int32)
scales = torch.rand(k // group, n) + 0.5
perm = torch.randperm(k).to(torch.int32)
layer = torch.nn.Module()
w4a16_layer.install_weights(layer, reference.pack_int4(codes, 0), scales, None, perm,
                            k, n, group, torch.bfloat16)
x = torch.randn(5, k, dtype=torch.bfloat16)
out = w4a16_layer.w4a16_apply(layer, x, None)
expect = reference.w4a16_gemm_ref(x[:, perm.long()], codes, scales.to(torch.bfloat16),
                                  None, group, None, None)
torch.testing.assert_close(out.float(), expect.float(), atol=0.05, rtol=0.02)
print("ok")
"""


@requires_w4a16_kernels
def test_layer_code_runs_without_vllm():
    """What a served layer installs and runs (w4a16_layer: the act-order
    gather, then the GEMM) imports and runs with vLLM unimportable: the
    benchmark measures the served act-order path on GPU machines without
    vLLM through it."""
    proc = subprocess.run(
        [sys.executable, "-c", _LAYER_WITHOUT_VLLM],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


@requires_vllm
def test_gptq_method_without_g_idx_and_missing_zero_point_matters(monkeypatch, tp1):
    from vllm_myops.quantization.config import MyopsW4A16Config

    _fake_gemm(monkeypatch)
    torch.manual_seed(1)
    k, n = 128, 32
    w = torch.randn(k, n) + 0.5  # one-sided: the zero point is far from 8
    codes, scales, zeros = reference.quantize_rtn(w, 64, False)
    tensors = {
        "qweight": reference.pack_int4(codes, 0),
        "qzeros": gptq_format.pack_gptq_zeros(zeros, 2, n),
        "scales": scales.to(torch.bfloat16),
        "g_idx": None,
    }
    x = torch.randn(4, k, dtype=torch.bfloat16)
    expect = reference.w4a16_gemm_ref(x, codes, scales.bfloat16(), zeros, 64)
    asym = MyopsW4A16Config(group_size=64, sym=False, source="gptq")
    method, layer = _gptq_layer(asym, tensors, k, n, torch.bfloat16)
    assert layer.w4a16_perm is None
    torch.testing.assert_close(
        method.apply(layer, x).float(), expect.float(), atol=0.05, rtol=0.02
    )
    sym = MyopsW4A16Config(group_size=64, sym=True, source="gptq")
    method, layer = _gptq_layer(sym, tensors, k, n, torch.bfloat16)
    assert (method.apply(layer, x).float() - expect.float()).abs().max() > 1.0


@requires_vllm
def test_fused_shards_with_different_g_idx_are_refused(tp1):
    from vllm_myops.quantization.config import MyopsW4A16Config
    from vllm_myops.quantization.linear_method import MyopsW4A16GPTQLinearMethod

    m = MyopsW4A16GPTQLinearMethod(
        MyopsW4A16Config(group_size=32, source="gptq", desc_act=True)
    )
    layer = _linear_layer_stub()
    m.create_weights(
        layer,
        64,
        [16, 16],
        64,
        32,
        torch.bfloat16,
        weight_loader=lambda p, w, shard_id=None: p.data.copy_(w),
    )
    g = reference.default_g_idx(64, 32)
    layer.g_idx.weight_loader(layer.g_idx, g, 0)
    layer.g_idx.weight_loader(layer.g_idx, g, 1)  # the same: fine
    with pytest.raises(ValueError, match="different act-order permutations"):
        layer.g_idx.weight_loader(layer.g_idx, g.flip(0), 1)


@requires_vllm
def test_gptq_method_shape_errors(tp1):
    from vllm_myops.quantization.config import MyopsW4A16Config
    from vllm_myops.quantization.linear_method import MyopsW4A16GPTQLinearMethod

    m = MyopsW4A16GPTQLinearMethod(MyopsW4A16Config(group_size=128, source="gptq"))
    load = {"weight_loader": lambda p, w: None}
    with pytest.raises(ValueError, match="row-parallel shards must hold whole groups"):
        m.create_weights(
            _linear_layer_stub(), 576 // 2, [64], 576, 64, torch.bfloat16, **load
        )
    with pytest.raises(ValueError, match="multiples of 8"):
        m.create_weights(
            _linear_layer_stub(), 100, [64], 100, 64, torch.bfloat16, **load
        )
    act = MyopsW4A16GPTQLinearMethod(
        MyopsW4A16Config(group_size=64, source="gptq", desc_act=True)
    )
    with pytest.raises(ValueError, match="act-order"):
        act.create_weights(
            _linear_layer_stub(), 128, [64], 256, 64, torch.bfloat16, **load
        )
    with pytest.raises(ValueError, match="dtype"):
        m.create_weights(
            _linear_layer_stub(), 128, [64], 128, 64, torch.float32, **load
        )


@requires_vllm
def test_gptq_row_parallel_shard_groups(monkeypatch, tp1):
    """Rank 1 of 2 holds rows 128..255: its g_idx (global groups 2, 3) is
    renumbered from 0 and its scales are its own groups."""
    from vllm_myops.quantization.config import MyopsW4A16Config
    from vllm_myops.quantization.linear_method import MyopsW4A16GPTQLinearMethod

    _fake_gemm(monkeypatch)
    k, n = 256, 32
    w = torch.randn(k, n)
    codes, scales, zeros = reference.quantize_rtn(w, 64, True)
    cfg = MyopsW4A16Config(group_size=64, sym=True, source="gptq")
    method = MyopsW4A16GPTQLinearMethod(cfg)
    layer = _linear_layer_stub()
    layer.tp_rank = 1
    method.create_weights(
        layer,
        k // 2,
        [n],
        k,
        n,
        torch.bfloat16,
        weight_loader=lambda p, t: p.data.copy_(t),
    )
    layer.qweight.data.copy_(reference.pack_int4(codes[128:], 0))
    layer.scales.data.copy_(scales[2:])
    layer.qzeros.data.copy_(gptq_format.pack_gptq_zeros(None, 2, n))
    layer.g_idx.data.copy_(reference.default_g_idx(k, 64)[128:])
    cfg.quantized_prefixes.append("x")
    method.process_weights_after_loading(layer)
    x = torch.randn(2, k // 2, dtype=torch.bfloat16)
    expect = reference.w4a16_gemm_ref(x, codes[128:], scales[2:].bfloat16(), None, 64)
    torch.testing.assert_close(
        method.apply(layer, x).float(), expect.float(), atol=0.05, rtol=0.02
    )


@requires_vllm
@pytest.mark.parametrize("group,sym", [(128, False), (64, True)])
def test_online_method_quantizes_at_load(monkeypatch, tp1, group, sym, caplog):
    from vllm_myops.quantization.config import MyopsW4A16Config
    from vllm_myops.quantization.linear_method import MyopsW4A16OnlineLinearMethod

    if not _kernels_available():
        _fake_gemm(monkeypatch)
    k, n = 576, 96
    w = torch.randn(n, k, dtype=torch.bfloat16)
    cfg = MyopsW4A16Config(group_size=group, sym=sym)
    cfg.quantized_prefixes.append("model.layers.0.mlp.down_proj")
    method = MyopsW4A16OnlineLinearMethod(cfg)
    layer = _linear_layer_stub()
    method.create_weights(
        layer, k, [n], k, n, torch.bfloat16, weight_loader=lambda p, t: p.data.copy_(t)
    )
    layer.weight.weight_loader(layer.weight, w)
    with caplog.at_level("INFO", logger="vllm.myops"):
        method.process_weights_after_loading(layer)
    assert not hasattr(layer, "weight")  # the bf16 weight is freed
    assert "1 linear layers on the myops W4A16 kernel" in caplog.text
    codes, scales, zeros = reference.quantize_rtn(w.t(), group, sym)
    x = torch.randn(7, k, dtype=torch.bfloat16)
    out = method.apply(layer, x)
    expect = reference.w4a16_gemm_ref(x, codes, scales, zeros, group)
    torch.testing.assert_close(out.float(), expect.float(), atol=0.05, rtol=0.02)


@requires_vllm
def test_apply_counts_calls(monkeypatch, tp1):
    from vllm_myops import ops
    from vllm_myops.observability import counters
    from vllm_myops.quantization.config import MyopsW4A16Config
    from vllm_myops.quantization.linear_method import MyopsW4A16OnlineLinearMethod

    _fake_gemm(monkeypatch)
    monkeypatch.setattr(counters, "ENABLED", True)
    counters.enable()
    counters.reset()
    cfg = MyopsW4A16Config()
    cfg.quantized_prefixes.append("x")
    method = MyopsW4A16OnlineLinearMethod(cfg)
    layer = _linear_layer_stub()
    method.create_weights(
        layer,
        128,
        [32],
        128,
        32,
        torch.bfloat16,
        weight_loader=lambda p, t: p.data.copy_(t),
    )
    layer.weight.data.normal_()
    method.process_weights_after_loading(layer)
    method.apply(layer, torch.randn(5, 128, dtype=torch.bfloat16))
    s = counters.slot("w4a16_linear", ops.PROVIDER)
    assert counters.calls[s] == 1 and counters.rows[s] == 5
    counters.reset()


# --------------------------------------------------------------------------
# the quantize CLI
# --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ["--group-size", "64", "--sym"],
        ["--group-size", "128", "--asym", "--act-order"],
    ],
)
def test_quantize_cli_round_trip(tmp_path, args):
    from safetensors.torch import load_file

    from vllm_myops.cli import main
    from vllm_myops.cli.quantize import dequantize_checkpoint
    from vllm_myops.testing.tiny_model import make_tiny_model

    src = make_tiny_model(tmp_path / "tiny")
    out = tmp_path / "gptq"
    assert main(["quantize", str(src), str(out), *args]) == 0
    q = json.loads((out / "config.json").read_text())["quantization_config"]
    group = int(args[1])
    sym, act = "--sym" in args, "--act-order" in args
    assert q == {
        "quant_method": "gptq",
        "bits": 4,
        "group_size": group,
        "desc_act": act,
        "sym": sym,
        "checkpoint_format": "gptq",
        "lm_head": False,
    }
    assert (out / "tokenizer.json").exists()
    orig = {}
    for f in src.glob("*.safetensors"):
        orig.update(load_file(str(f)))
    got = load_file(str(out / "model.safetensors"))
    deq = load_file(
        str(dequantize_checkpoint(out, tmp_path / "deq") / "model.safetensors")
    )
    n_checked = 0
    for name, t in orig.items():
        if ".layers." in name and name.endswith(".weight") and t.dim() == 2:
            prefix = name[: -len(".weight")]
            assert (
                f"{name}" not in got and got[f"{prefix}.qweight"].dtype == torch.int32
            )
            w = t.t()
            if act:
                g_idx = got[f"{prefix}.g_idx"]
                perm = torch.sort(g_idx.long(), stable=True).indices
                cp, s, z = reference.quantize_rtn(w[perm], group, sym)
                codes = torch.empty_like(cp)
                codes[perm] = cp
            else:
                g_idx = None
                codes, s, z = reference.quantize_rtn(w, group, sym)
                assert torch.equal(
                    got[f"{prefix}.g_idx"], reference.default_g_idx(w.shape[0], group)
                )
            expect = reference.dequantize(codes, s, z, group, g_idx)
            assert torch.equal(deq[name].t(), expect), name
            assert torch.equal(got[f"{prefix}.scales"], s)
            n_checked += 1
        else:
            assert torch.equal(got[name], t), name
    assert n_checked == 7 * 2  # q k v o gate up down, two layers
    if act:  # layers vLLM fuses (one input) share one act-order g_idx
        for i in range(2):
            p = f"model.layers.{i}."
            qkv = [got[p + f"self_attn.{m}_proj.g_idx"] for m in "qkv"]
            assert all(torch.equal(qkv[0], g) for g in qkv)
            gate, up = (got[p + f"mlp.{m}_proj.g_idx"] for m in ("gate", "up"))
            assert torch.equal(gate, up)
