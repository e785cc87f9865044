# SPDX-License-Identifier: Apache-2.0
"""vLLM IR dispatch to the myops provider, in this process (no engine).

- priority ["myops", ...]: vLLM calls our impl (a spy on the compiled-op
  wrappers sees every call) and the result matches the FP32 reference;
- priority ["native"]: our impl is never called;
- arguments our ops do not take (variance_size, weight dtype != x dtype, ...)
  fall back to native when native follows;
- the in-place overload (maybe_inplace) writes in place, the functional
  overload leaves its inputs alone;
- counting under torch.compile counts executions, not traces (subprocess);
- vLLM's CUDA compile pipeline (IR torch wrapping on, vLLM's post-grad IR
  lowering and clone elimination passes inside Inductor) takes our providers
  with counting on and off, on every device present (subprocesses).

A few seconds in process; the subprocess tests ~20 s each.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from tests.kernels import tolerances, utils
from tests.plugin._helpers import (
    requires_extension,
    requires_vllm,
    run_python,
    subprocess_env,
)
from vllm_myops.layernorm import reference

pytestmark = [requires_vllm, requires_extension]

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
EPS = 1e-6


@pytest.fixture(scope="module")
def ir():
    from vllm import ir as vllm_ir

    import vllm_myops

    vllm_myops.register()
    assert vllm_ir.ops.rms_norm.impls["myops"].supported
    return vllm_ir


@pytest.fixture
def spy(monkeypatch):
    """Counts calls of the compiled ops made through vllm_myops._custom_ops."""
    from vllm_myops import _custom_ops

    calls = {"rms_norm": 0, "fused_add_rms_norm": 0}
    for name in calls:
        orig = getattr(_custom_ops, name)

        def wrapper(*a, _orig=orig, _name=name):
            calls[_name] += 1
            return _orig(*a)

        monkeypatch.setattr(_custom_ops, name, wrapper)
    return calls


def _rows(shape, dtype, device, strided=False):
    if strided:  # Qwen3's q view: [tokens, heads, head_dim] out of a qkv row
        tokens, heads, dim = shape
        qkv = torch.randn(tokens, heads * dim * 3, dtype=dtype, device=device)
        return qkv[:, : heads * dim].view(tokens, heads, dim)
    return torch.randn(*shape, dtype=dtype, device=device)


DEVICES = utils.devices()[:2]  # cpu, and cuda where present


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ["2d", "3d-strided", "no-weight"])
def test_rms_norm_myops_first_calls_our_kernel(ir, spy, dtype, case, device):
    shape = (5, 4, 64) if case == "3d-strided" else (7, 256)
    x = _rows(shape, dtype, device, strided=case == "3d-strided")
    w = (
        None
        if case == "no-weight"
        else torch.randn(shape[-1], dtype=dtype, device=device)
    )
    with ir.ops.rms_norm.set_priority(["myops", "native"]):
        assert ir.ops.rms_norm.dispatch(x, w, EPS).provider == "myops"
        out = ir.ops.rms_norm(x, w, EPS)
    assert spy["rms_norm"] == 1
    assert out.shape == x.shape and out.dtype == dtype
    torch.testing.assert_close(
        out, reference.rms_norm_ref(x, w, EPS), **tolerances.tolerance(dtype)
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_add_rms_norm_myops_inplace_and_functional(ir, spy, dtype, device):
    x, r = (torch.randn(6, 256, dtype=dtype, device=device) for _ in range(2))
    w = torch.randn(256, dtype=dtype, device=device)
    ref_out, ref_res = reference.fused_add_rms_norm_ref(x, r, w, EPS)
    tol = tolerances.tolerance(dtype)
    op = ir.ops.fused_add_rms_norm
    with op.set_priority(["myops", "native"]):
        # functional overload: inputs untouched (vLLM clones for inplace impls)
        x0, r0 = x.clone(), r.clone()
        out, res = op(x, r, w, EPS)
        assert torch.equal(x, x0) and torch.equal(r, r0)
        torch.testing.assert_close(out, ref_out, **tol)
        # residual is T(x + r), rounded like vLLM's CUDA kernel: exact.
        torch.testing.assert_close(res, ref_res, rtol=0, atol=0)
        # maybe_inplace (what vLLM's RMSNorm layer calls): written in place
        out2, res2 = op.maybe_inplace(x, r, w, EPS)
        assert out2.data_ptr() == x.data_ptr() and res2.data_ptr() == r.data_ptr()
        torch.testing.assert_close(x, ref_out, **tol)
        torch.testing.assert_close(r, ref_res, rtol=0, atol=0)
    assert spy["fused_add_rms_norm"] == 2


def test_native_priority_never_calls_ours(ir, spy):
    x = torch.randn(4, 128, dtype=torch.bfloat16)
    w = torch.randn(128, dtype=torch.bfloat16)
    with (
        ir.ops.rms_norm.set_priority(["native"]),
        ir.ops.fused_add_rms_norm.set_priority(["native"]),
    ):
        assert ir.ops.rms_norm.dispatch(x, w, EPS).provider == "native"
        ir.ops.rms_norm(x, w, EPS)
        ir.ops.fused_add_rms_norm(x, x.clone(), w, EPS)
        ir.ops.fused_add_rms_norm.maybe_inplace(x, x.clone(), w, EPS)
    assert spy == {"rms_norm": 0, "fused_add_rms_norm": 0}


def _unsupported_rms_norm_args():
    x = torch.randn(4, 128, dtype=torch.bfloat16)
    w = torch.randn(128, dtype=torch.bfloat16)
    return {
        "variance_size": (x, w, EPS, 64),
        "weight fp32, x bf16": (x, w.float(), EPS),
        "float64 input": (x.double(), w.double(), EPS),
        "weight of wrong size": (x, torch.randn(64, dtype=torch.bfloat16), EPS),
        "2-D weight": (x, w.view(2, 64), EPS),
        "negative epsilon": (x, w, -1.0),
    }


@pytest.mark.parametrize("case", list(_unsupported_rms_norm_args()))
def test_rms_norm_unsupported_args_fall_back_to_native(ir, spy, case):
    args = _unsupported_rms_norm_args()[case]
    op = ir.ops.rms_norm
    assert not op.impls["myops"].supports_args(*args)
    with op.set_priority(["myops", "native"]):
        assert op.dispatch(*args).provider == "native"
        if case not in ("weight of wrong size", "2-D weight", "negative epsilon"):
            out = op(*args)  # native computes it
            expect = op.impls["native"].impl_fn(*args)
            torch.testing.assert_close(out, expect, rtol=0, atol=0)
    assert spy["rms_norm"] == 0


def test_fused_add_rms_norm_unsupported_args_fall_back(ir, spy):
    x = torch.randn(4, 128, dtype=torch.bfloat16)
    r = torch.randn(4, 128, dtype=torch.bfloat16)
    w = torch.randn(128, dtype=torch.bfloat16)
    op = ir.ops.fused_add_rms_norm
    cases = {
        "variance_size": (x, r, w, EPS, 64),
        "weight fp32": (x, r, w.float(), EPS),
        "residual fp32": (x, r.float(), w, EPS),
        "residual of another shape": (x, r[:2], w, EPS),
        "expanded residual (written in place)": (x, r[:1].expand(4, 128), w, EPS),
    }
    with op.set_priority(["myops", "native"]):
        for name, args in cases.items():
            assert op.dispatch(*args).provider == "native", name
        out, res = op(*cases["variance_size"])
        exp_out, exp_res = op.impls["native"].impl_fn(*cases["variance_size"])
        torch.testing.assert_close(out, exp_out, rtol=0, atol=0)
    assert spy["fused_add_rms_norm"] == 0


def test_supported_layouts_stay_on_myops(ir):
    """Leading dims, strided rows and transposed inputs are ours (the op
    copies what it cannot address); only what it rejects falls back."""
    op = ir.ops.rms_norm
    pred = op.impls["myops"].supports_args
    base = torch.randn(8, 3, 64, dtype=torch.float16)
    w = torch.randn(64, dtype=torch.float16)
    assert pred(base, w, EPS)
    assert pred(base[:, 1], w, EPS)  # strided rows
    assert pred(torch.randn(64, 8, dtype=torch.float16).t(), w, EPS)  # last dim strided
    assert pred(torch.randn(64, dtype=torch.float16), w, EPS)  # one row, no leading dim
    assert pred(torch.randn(0, 64, dtype=torch.float16), w, EPS)  # no rows
    assert not pred(torch.tensor(1.0, dtype=torch.float16), None, EPS)  # 0-dim


def test_counting_under_torch_compile_counts_executions():
    """With counting on, a torch.compile'd function (Inductor, IR torch
    wrapping off as vLLM does on CPU) runs the tick op on every call: the
    count is the number of executions, not of traces, for both providers."""
    code = r"""
import json, torch
import vllm_myops
from vllm import ir
vllm_myops.register()
ir.set_default_torch_wrap(False)
from vllm_myops.observability import counters, stats_files
assert counters.ENABLED
def f(x, r, w):
    y = ir.ops.rms_norm(x, w, 1e-6)
    out, res = ir.ops.fused_add_rms_norm.maybe_inplace(y, r, w, 1e-6)
    return out + 1, res
x = torch.randn(5, 256, dtype=torch.bfloat16)
w = torch.randn(256, dtype=torch.bfloat16)
res = {}
for prov in ("myops", "native"):
    counters.reset()
    with ir.ops.rms_norm.set_priority([prov]), ir.ops.fused_add_rms_norm.set_priority([prov]):
        torch._dynamo.reset()
        g = torch.compile(f, backend="inductor", fullgraph=True)
        outs = [g(x, torch.randn(5, 256, dtype=torch.bfloat16), w) for _ in range(7)]
    calls = stats_files.snapshot()["calls"]
    res[prov] = {op: calls[op] for op in ("rms_norm", "fused_add_rms_norm")}
print("RESULT " + json.dumps(res))
"""
    out = run_python(code, timeout=600, env=subprocess_env(MYOPS_STATS="1")).stdout
    line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1]
    res = json.loads(line[len("RESULT ") :])
    assert res["myops"] == {
        "rms_norm": {"myops": 7, "native": 0},
        "fused_add_rms_norm": {"myops": 7, "native": 0},
    }
    assert res["native"] == {
        "rms_norm": {"myops": 0, "native": 7},
        "fused_add_rms_norm": {"myops": 0, "native": 7},
    }


COUNTING = ["counting-on", "counting-off"]


@pytest.fixture(scope="module")
def lowering_runs():
    """(device, counting) -> the RESULT line of tests.plugin._ir_lowering_run.
    Both counting settings of a device run at once (two single-threaded
    compiles on a 2-core machine)."""
    cache: dict[tuple[str, str], dict] = {}

    def run(device: str, counting: str) -> dict:
        env = subprocess_env(MYOPS_STATS="1" if counting == "counting-on" else None)
        out = run_python(
            ["-m", "tests.plugin._ir_lowering_run", device], timeout=600, env=env
        ).stdout
        line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1]
        return json.loads(line[len("RESULT ") :])

    def get(device: str, counting: str) -> dict:
        if (device, counting) not in cache:
            with ThreadPoolExecutor(len(COUNTING)) as pool:
                futures = {c: pool.submit(run, device, c) for c in COUNTING}
                for c, f in futures.items():
                    cache[(device, c)] = f.result()
        return cache[(device, counting)]

    return get


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("counting", COUNTING)
def test_vllm_ir_lowering_pipeline(lowering_runs, device, counting):
    """vLLM's default compiled mode on CUDA lowers IR ops after AOTAutograd:
    the lowering pass traces our in-place fused_add_rms_norm on clones of its
    inputs, then clone elimination asserts that each clone has at most one
    writer. The counting op once declared a write to the kernel's output and
    made that a second writer (AssertionError in clone_elimination.py, only
    with counting on; seen serving on the H200). Run here with vLLM's own
    passes inside Inductor: compiles, every execution is counted, and the
    result equals the eager one (ours exactly: same kernel; native within a
    few bf16 ulps, as Inductor fuses its elementwise math in fp32)."""
    res = lowering_runs(device, counting)
    for provider, other in (("myops", "native"), ("native", "myops")):
        r = res[provider]
        if counting == "counting-on":
            for op in ("rms_norm", "fused_add_rms_norm"):
                assert r["calls"][op] == {provider: r["runs"], other: 0}, r
        else:
            assert r["calls"] is None
    assert res["myops"]["max_abs_diff"] == 0.0, res
    native = res["native"]
    assert native["max_abs_diff"] <= 2**-5 * native["max_abs_expected"], res
