# SPDX-License-Identifier: Apache-2.0
"""The entry point, register() and its failure modes, each in a fresh
interpreter (what vLLM's processes see). ~10-20 s per subprocess on the
2-core CI machine (importing vLLM dominates)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.plugin._helpers import (
    requires_extension,
    requires_vllm,
    run_python,
    subprocess_env,
)
from vllm_myops.plugin import parse_version, version_message

pytestmark = requires_vllm


def _json_line(stdout: str) -> dict:
    for line in reversed(stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise AssertionError(f"no RESULT line in:\n{stdout[-3000:]}")


@requires_extension
def test_entry_point_discovered_and_loaded_by_vllm():
    """vLLM's own loader finds `myops`, and load_general_plugins() (what
    every vLLM process runs) registers both providers as supported."""
    code = r"""
import json
from vllm.plugins import DEFAULT_PLUGINS_GROUP, load_general_plugins, load_plugins_by_group
found = load_plugins_by_group(DEFAULT_PLUGINS_GROUP)
load_general_plugins()
from vllm import ir
res = {
    "found": sorted(found),
    "value": f"{found['myops'].__module__}:{found['myops'].__name__}" if "myops" in found else None,
    "providers": {n: {p: bool(i.supported) for p, i in getattr(ir.ops, n).impls.items()}
                  for n in ("rms_norm", "fused_add_rms_norm")},
}
print("RESULT " + json.dumps(res))
"""
    res = _json_line(run_python(code, timeout=240).stdout)
    assert "myops" in res["found"]
    assert res["value"] == "vllm_myops:register"
    for name in ("rms_norm", "fused_add_rms_norm"):
        assert res["providers"][name] == {"native": True, "myops": True}


def test_vllm_plugins_allowlist_excludes_us():
    """VLLM_PLUGINS without myops: vLLM does not load us, nothing registered."""
    code = r"""
import json
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm import ir
print("RESULT " + json.dumps(sorted(ir.ops.rms_norm.impls)))
"""
    env = subprocess_env(VLLM_PLUGINS="some_other_plugin")
    assert _json_line(run_python(code, timeout=240, env=env).stdout) == ["native"]


@requires_extension
def test_register_twice_registers_once():
    code = r"""
import json, logging
from vllm import ir
calls = []
orig = type(ir.ops.rms_norm).register_impl
def counting(self, provider, **kw):
    calls.append((self.name, provider))
    return orig(self, provider, **kw)
type(ir.ops.rms_norm).register_impl = counting
import vllm_myops
vllm_myops.register()
first = {n: id(getattr(ir.ops, n).impls["myops"]) for n in ("rms_norm", "fused_add_rms_norm")}
vllm_myops.register()
from vllm_myops.plugin import register as plugin_register
plugin_register()
second = {n: id(getattr(ir.ops, n).impls["myops"]) for n in ("rms_norm", "fused_add_rms_norm")}
print("RESULT " + json.dumps({"calls": calls, "same": first == second}))
"""
    res = _json_line(run_python(code, timeout=240).stdout)
    assert sorted(map(tuple, res["calls"])) == [
        ("fused_add_rms_norm", "myops"),
        ("rms_norm", "myops"),
    ]
    assert res["same"]


_FALLBACK_CHECK = r"""
import json, logging, io
# vLLM configures logging when vllm.logger is imported; vLLM 0.24 does it
# with dictConfig, which drops every handler added before.
import vllm.logger
buf = io.StringIO()
handler = logging.StreamHandler(buf)
logging.getLogger("vllm.myops").addHandler(handler)
import torch
import vllm_myops
vllm_myops.register()          # must not raise
vllm_myops.register()
from vllm import ir
from vllm_myops.plugin import STATUS
res = {"status": STATUS, "log": buf.getvalue()}
res["impls"] = {n: {p: bool(i.supported) for p, i in getattr(ir.ops, n).impls.items()}
                for n in ("rms_norm", "fused_add_rms_norm")}
if "myops" in ir.ops.rms_norm.impls:
    x = torch.randn(3, 64, dtype=torch.bfloat16); w = torch.ones(64, dtype=torch.bfloat16)
    # What vLLM does with --ir-op-priority myops: keeps working, on native.
    with ir.ops.rms_norm.set_priority(["myops", "native"]):
        res["priority"] = ir.ops.rms_norm.get_priority()
        res["dispatch"] = ir.ops.rms_norm.dispatch(x, w, 1e-6).provider
        ir.ops.rms_norm(x, w, 1e-6)
print("RESULT " + json.dumps(res))
"""


def _check_fallback(res: dict, reason_part: str) -> None:
    assert res["status"]["supported"] is False
    assert reason_part in res["status"]["reason"]
    warnings = [ln for ln in res["log"].splitlines() if "kernels unavailable" in ln]
    assert len(warnings) == 1, res["log"]  # one clear warning, not one per call
    assert "native" in warnings[0]
    # Still registered (as unsupported), so a priority naming myops is valid
    # and vLLM falls back to native instead of failing.
    assert res["impls"]["rms_norm"] == {"native": True, "myops": False}
    assert res["priority"] == ["native"]
    assert res["dispatch"] == "native"


def test_simulated_load_failure_warns_and_falls_back():
    env = subprocess_env(MYOPS_SIMULATE_LOAD_FAILURE="1")
    res = _json_line(run_python(_FALLBACK_CHECK, timeout=240, env=env).stdout)
    _check_fallback(res, "simulated load failure")


def test_extension_import_failure_warns_and_falls_back():
    """A real import failure of the compiled module (as with a broken or
    missing .so): blocked with an import hook in a fresh interpreter."""
    code = (
        "import sys, importlib.abc\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'vllm_myops._myops_C':\n"
        "            raise ImportError('undefined symbol: _ZN3c10simulated')\n"
        "        return None\n"
        "sys.meta_path.insert(0, Block())\n" + _FALLBACK_CHECK
    )
    res = _json_line(run_python(code, timeout=240).stdout)
    _check_fallback(res, "undefined symbol")


def test_missing_ir_api_warns_and_does_not_raise():
    """vLLM without vllm.ir (older than 0.24): one warning, plugin inactive."""
    code = r"""
import sys, json, logging, io, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "vllm.ir" or name.startswith("vllm.ir."):
            raise ImportError("No module named 'vllm.ir' (simulated)")
        return None
sys.meta_path.insert(0, Block())
import vllm.logger  # configures logging first (see _FALLBACK_CHECK)
buf = io.StringIO()
logging.getLogger("vllm.myops").addHandler(logging.StreamHandler(buf))
import vllm_myops
vllm_myops.register()
from vllm_myops.plugin import STATUS
print("RESULT " + json.dumps({"status": STATUS, "log": buf.getvalue()}))
"""
    res = _json_line(run_python(code, timeout=240).stdout)
    assert res["status"]["registered"] is False
    assert "vLLM IR API missing" in res["status"]["reason"]
    assert res["log"].count("vllm-myops:") == 1
    assert "0.24 to 0.33" in res["log"]


@pytest.mark.parametrize(
    "version, expect",
    [
        ("0.24.0", None),
        ("0.32.0", None),
        ("0.32.0+cpu", None),
        ("0.33.1", None),
        ("0.23.2", "predates"),
        ("0.34.0", "newer"),
        ("1.0.0rc1", "newer"),
        (None, "cannot tell"),
    ],
)
def test_version_check(version, expect):
    msg = version_message(version)
    if expect is None:
        assert msg is None
    else:
        assert msg is not None and expect in msg and "0.24 to 0.33" in msg


def test_parse_version():
    assert parse_version("0.32.0") == (0, 32)
    assert parse_version("0.33.0rc2.dev5+g123") == (0, 33)
    assert parse_version("1") == (1, 0)


@requires_extension
@pytest.mark.slow
def test_myops_priority_env_puts_myops_first_by_default(tiny_models):
    """MYOPS_PRIORITY=1: with no --ir-op-priority the resolved config lists
    myops first; an explicit user list still comes first (vLLM appends
    platform defaults after it)."""
    code = r"""
import json, sys
from vllm.engine.arg_utils import EngineArgs
def final(**kw):
    cfg = EngineArgs(model=sys.argv[1], kv_cache_memory_bytes=1 << 26, enforce_eager=True,
                     **kw).create_engine_config()
    p = cfg.kernel_config.ir_op_priority
    return {"rms_norm": p.rms_norm, "fused_add_rms_norm": p.fused_add_rms_norm}
res = {"default": final(),
       "user_native": final(kernel_config={"ir_op_priority": {"rms_norm": ["native"]}})}
print("RESULT " + json.dumps(res))
"""
    model = str(tiny_models["llama"])
    # Both children at once: each is one vLLM import (single-threaded), and
    # the machine has two cores.
    with ThreadPoolExecutor(2) as pool:
        on_proc = pool.submit(
            run_python,
            ["-c", code, model],
            timeout=300,
            env=subprocess_env(MYOPS_PRIORITY="1"),
        )
        off_proc = pool.submit(run_python, ["-c", code, model], timeout=300)
        on = _json_line(on_proc.result().stdout)
        off = _json_line(off_proc.result().stdout)
    # The platform default without the switch: ["native"] on CPU,
    # ["vllm_c", "native"] on CUDA in eager mode; it always ends with native.
    for op, prio in off["default"].items():
        assert "myops" not in prio and prio[-1] == "native", off
        assert on["default"][op] == ["myops", *prio], on
    assert on["user_native"]["rms_norm"][:2] == ["native", "myops"]  # native wins
