# SPDX-License-Identifier: Apache-2.0
"""The op registry (vllm_myops.ops) and what is derived from it, in this
process: families are registered one by one and a failing family stops no
other, register() never raises, and the counters, the native-counting
wrapper and the verdict follow the registry. A few seconds in total."""

from __future__ import annotations

import importlib
import logging
import sys
import types

import pytest
import torch

from tests.plugin._helpers import requires_vllm
from vllm_myops import ops, plugin
from vllm_myops.family import FamilyStatus
from vllm_myops.observability import counters, ir_impls, stats_files


def test_registry_is_consistent():
    names = [o.name for o in ops.OPS]
    assert len(names) == len(set(names))
    families = {f.name for f in ops.FAMILIES}
    assert len(families) == len(ops.FAMILIES)
    for o in ops.OPS:
        assert o.family in families, o
        assert o.kernels and ops.PROVIDER in o.providers, o
    for f in ops.FAMILIES:
        assert ops.ops_of(f.name), f"family {f.name} has no ops"
        assert callable(importlib.import_module(f.registration).register)
    # One counter slot per (op, provider), nothing else.
    assert sorted(counters.SLOTS) == sorted(
        (o.name, p) for o in ops.OPS for p in o.providers
    )
    ir_ops = ops.ops_with_hook(ops.HOOK_VLLM_IR)
    assert ops.ir_op_priority("native") == {o.hook.target: ["native"] for o in ir_ops}


# --------------------------------------------------------------------------
# plugin.register(): families one by one
# --------------------------------------------------------------------------


@pytest.fixture
def fresh_plugin(monkeypatch):
    """plugin.register() as if never called in this process; warnings land
    in the returned list."""
    monkeypatch.setattr(plugin, "_done", False)
    monkeypatch.setattr(plugin, "STATUS", dict(plugin.STATUS, families={}))
    monkeypatch.delenv("_MYOPS_WARNED", raising=False)
    warnings: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                warnings.append(record.getMessage())

    handler = Collect()
    plugin.logger.addHandler(handler)
    yield warnings
    plugin.logger.removeHandler(handler)


def _fake_family(monkeypatch, name: str, register) -> ops.Family:
    module = types.ModuleType(f"fake_family_{name}")
    module.register = register  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return ops.Family(name=name, title=name.upper(), registration=module.__name__)


@requires_vllm
def test_failing_family_does_not_stop_another(monkeypatch, fresh_plugin):
    seen = []

    def broken(context):
        seen.append("broken")
        raise RuntimeError("kaputt")

    def good(context):
        seen.append("good")
        return FamilyStatus(registered=True, supported=True, reason="fine")

    families = (
        _fake_family(monkeypatch, "broken", broken),
        ops.Family(name="missing", title="MISSING", registration="no_such_module_x"),
        _fake_family(monkeypatch, "good", good),
    )
    monkeypatch.setattr(ops, "FAMILIES", families)
    monkeypatch.setenv("MYOPS_SIMULATE_LOAD_FAILURE", "1")
    plugin.register()  # must not raise

    assert seen == ["broken", "good"]
    fams = plugin.STATUS["families"]
    assert fams["good"] == {
        "registered": True,
        "supported": True,
        "reason": "fine",
        "default_priority_patched": False,
    }
    assert fams["broken"]["registered"] is False
    assert fams["broken"]["reason"] == "registration failed: RuntimeError: kaputt"
    assert fams["missing"]["reason"].startswith(
        "registration failed: ModuleNotFoundError"
    )
    # The summary: not every family is registered, and why, family by family.
    assert plugin.STATUS["registered"] is False
    assert "good: fine" in plugin.STATUS["reason"]
    # One warning per failing family, naming it.
    assert len(fresh_plugin) == 2, fresh_plugin
    assert "could not register the broken family" in fresh_plugin[0]
    assert "BROKEN" in fresh_plugin[0]
    assert "could not register the missing family" in fresh_plugin[1]


@requires_vllm
def test_register_never_raises(monkeypatch, fresh_plugin):
    def boom() -> str:
        raise OSError("no version for you")

    monkeypatch.setattr(plugin, "vllm_version", boom)
    plugin.register()
    plugin.register()  # idempotent: once per process
    assert plugin.STATUS["reason"] == "registration failed: OSError: no version for you"
    assert len(fresh_plugin) == 1 and "registration failed" in fresh_plugin[0]


# --------------------------------------------------------------------------
# observability follows the registry
# --------------------------------------------------------------------------


class _FakeImpl:
    def __init__(self, fn):
        self.impl_fn = fn
        self.uuid = lambda: "vllm-uuid"


@pytest.fixture
def counting(monkeypatch):
    monkeypatch.setattr(counters, "ENABLED", True)
    monkeypatch.setattr(counters, "STATS_DIR", None)
    counters.reset()
    yield
    counters.reset()


def test_native_counting_wraps_every_registry_op(counting):
    def single(x, weight, epsilon, variance_size=None):
        return x * 2

    def pair(x, x_residual, weight, epsilon, variance_size=None):
        return x[:3], x_residual

    # Ops returning one tensor and ops returning several, alternately.
    ir_ops = types.SimpleNamespace()
    fns = {}
    ir_specs = ops.ops_with_hook(ops.HOOK_VLLM_IR)  # the ops vLLM has natives of
    for i, spec in enumerate(ir_specs):
        fns[spec.name] = single if i % 2 == 0 else pair
        impl = _FakeImpl(fns[spec.name])
        setattr(ir_ops, spec.hook.target, types.SimpleNamespace(impls={"native": impl}))
    ir_impls.install_native_counting(ir_ops, ir_specs)
    ir_impls.install_native_counting(ir_ops, ir_specs)  # idempotent

    x = torch.ones(5, 8)
    for spec in ir_specs:
        impl = getattr(ir_ops, spec.hook.target).impls["native"]
        assert impl.uuid() == "vllm-uuid+myops-count"
        args = (x, x.clone(), None, 1e-6) if fns[spec.name] is pair else (x, None, 1e-6)
        result = impl.impl_fn(*args)
        expect = fns[spec.name](*args)
        if isinstance(expect, tuple):
            assert all(torch.equal(a, b) for a, b in zip(result, expect))
        else:
            assert torch.equal(result, expect)
    snap = stats_files.snapshot()
    for spec in ir_specs:
        assert snap["calls"][spec.name] == {"myops": 0, "native": 1}
        # Rows of the counted output: 3 for the pair (x[:3]), 5 otherwise.
        rows = 3 if fns[spec.name] is pair else 5
        assert snap["rows"][spec.name]["native"] == rows


def test_native_counting_off_leaves_vllm_alone(monkeypatch):
    monkeypatch.setattr(counters, "ENABLED", False)
    impl = _FakeImpl(lambda *a: None)
    fn = impl.impl_fn
    ir_ops = types.SimpleNamespace(
        **{
            o.hook.target: types.SimpleNamespace(impls={"native": impl})
            for o in ops.ops_with_hook(ops.HOOK_VLLM_IR)
        }
    )
    ir_impls.install_native_counting(ir_ops, ops.ops_with_hook(ops.HOOK_VLLM_IR))
    assert impl.impl_fn is fn and impl.uuid() == "vllm-uuid"


def _stats(calls: dict[str, dict[str, int]]) -> dict:
    zeros = {op: dict.fromkeys(p, 0) for op, p in calls.items()}
    return {"calls": calls, "rows": calls, "graph_captured": zeros, "priority": {}}


def test_verdict_is_per_family(monkeypatch):
    gemm = ops.OpSpec(
        name="fake_gemm",
        family="fakequant",
        hook=ops.Hook(ops.HOOK_QUANTIZATION, "fakequant"),
        kernels=("fake_gemm",),
    )
    monkeypatch.setattr(ops, "OPS", (*ops.OPS, gemm))
    monkeypatch.setattr(
        ops, "FAMILIES", (*ops.FAMILIES, ops.Family("fakequant", "FakeGEMM", "x"))
    )
    norm = {o.name: {"myops": 4, "native": 0} for o in ops.ops_of("layernorm")}
    n_norm = 4 * len(norm)

    ok, lines = stats_files.verdict(
        _stats({**norm, "fake_gemm": {"myops": 3, "native": 0}})
    )
    assert ok
    assert f"  => RMSNorm: all {n_norm} calls ran on vllm_myops kernels" in lines
    assert "  => FakeGEMM: all 3 calls ran on vllm_myops kernels" in lines

    ok, lines = stats_files.verdict(
        _stats({**norm, "fake_gemm": {"myops": 3, "native": 2}})
    )
    assert not ok
    assert "  => FakeGEMM: 2 of 5 calls ran on vLLM's native code" in lines

    # A family the model does not use counts nothing and fails nothing.
    ok, lines = stats_files.verdict(
        _stats({**norm, "fake_gemm": {"myops": 0, "native": 0}})
    )
    assert ok
    assert (
        "  => FakeGEMM: no call was counted (stats off, or the model has none)" in lines
    )

    # Nothing counted at all: not a pass.
    none = {op: {"myops": 0, "native": 0} for op in (*norm, "fake_gemm")}
    assert stats_files.verdict(_stats(none))[0] is False

    # A server started with a set of families (`vllm-myops serve`): those
    # not in it read "not enabled" and fail nothing, whatever they counted;
    # an enabled family that counted nothing fails (its work went elsewhere).
    zero_gemm = _stats({**norm, "fake_gemm": {"myops": 0, "native": 0}})
    ok, lines = stats_files.verdict(zero_gemm, enabled={"layernorm"})
    assert ok
    assert "  => FakeGEMM: not enabled" in lines
    assert not any("fake_gemm" in ln for ln in lines)  # no per-op lines
    ok, lines = stats_files.verdict(zero_gemm, enabled={"layernorm", "fakequant"})
    assert not ok
    assert "  => FakeGEMM: enabled, but no call reached our kernels" in lines
    mixed = _stats({**norm, "fake_gemm": {"myops": 3, "native": 2}})
    assert stats_files.verdict(mixed, enabled={"layernorm"})[0] is True
    assert stats_files.verdict(mixed, enabled={"fakequant"})[0] is False
    # Nothing enabled (a native run): nothing to fail.
    ok, lines = stats_files.verdict(_stats(none), enabled=())
    assert ok and lines == [f"  => {f.title}: not enabled" for f in ops.FAMILIES]


def test_choice_log_names_the_family_status(monkeypatch):
    from vllm_myops.observability import choice_log

    monkeypatch.setattr(choice_log, "status", {})
    spec = ops.OPS[0]
    choice_log.set_status(spec.family, supported=False, reason="no kernels here")
    line = choice_log.describe_choice(spec.name, ["native"])
    assert line == "native (myops unavailable: no kernels here; priority ['native'])"
    choice_log.set_status(spec.family, supported=True, reason="cpu kernels")
    assert "myops (cpu kernels)" in choice_log.describe_choice(
        spec.name, ["myops", "native"]
    )
