# SPDX-License-Identifier: Apache-2.0
"""Argument-check messages that stream numbers (ints, doubles including nan
and inf), shapes, strides, devices and dtypes into TORCH_CHECK, on every
device the build has kernels for.

The failing calls run in a child process, one per device: a crash while
formatting a message (as on a GPU image whose compiler linked a private,
static libstdc++ into the module: see test_cxx_runtime.py) then fails these
tests with the signal and the last case that completed, instead of killing
the test worker. Each message is compared whole (its first line), so it must still
name the argument, what was expected and what it got.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch

from tests.kernels import contract
from tests.kernels.utils import devices

EPS = 1e-6
W = 64  # hidden size of every case

# case -> (call that must fail on `device`, exact first line of the message,
# device types the case applies to)
Case = tuple[Callable[[str], None], str, tuple[str, ...]]


def _t(
    shape: tuple[int, ...], device: str, dtype: torch.dtype = torch.bfloat16
) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype, device=device)


def _ops():  # imported in the child too, where the extension loads first
    import vllm_myops._custom_ops as ops

    return ops


def _rms(device: str, *, result=None, x=None, weight=None, eps: float = EPS) -> None:
    x = _t((4, W), device) if x is None else x
    result = _t(tuple(x.shape), device, x.dtype) if result is None else result
    _ops().rms_norm(result, x, weight, eps)


def _fused(device: str, *, eps: float) -> None:
    _ops().fused_add_rms_norm(_t((4, W), device), _t((4, W), device), None, eps)


def _redispatch(backend: str, *args) -> None:
    """Calls the `backend` kernel directly, whatever devices the tensors are
    on (the dispatcher would pick another kernel for them)."""
    from vllm_myops import _extension

    _extension.ensure_loaded()
    keys = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, backend.upper()))
    torch.ops._myops_C.rms_norm.default.redispatch(keys, *args)


def _meta(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.bfloat16, device="meta")


ALL = ("cpu", "cuda")
CASES: dict[str, Case] = {
    # -- integers, shapes, strides --
    "int_weight_elements": (
        lambda d: _rms(d, weight=_t((W - 1,), d)),
        "rms_norm: weight must have hidden_size=64 elements (the last dim of input), got 63",
        ALL,
    ),
    "int64_weight_elements": (
        lambda d: _rms(d, weight=_t((1,), d).expand(2**33 + 1)),
        "rms_norm: weight must have hidden_size=64 elements (the last dim of input), "
        "got 8589934593",
        ALL,
    ),
    "int_weight_rank": (
        lambda d: _rms(d, weight=_t((1, W), d)),
        "rms_norm: weight must be 1-D [hidden_size=64], got 2-D shape [1, 64]",
        ALL,
    ),
    "int_result_shape": (
        lambda d: _rms(d, result=_t((4, W + 1), d)),
        "rms_norm: result must have the shape of input [4, 64], got [4, 65]",
        ALL,
    ),
    "int_result_strides": (
        lambda d: _rms(d, result=_t((W, 4), d).t()),
        "rms_norm: result must be contiguous, got strides [1, 4] for shape [4, 64]",
        ALL,
    ),
    "int_input_dims": (
        lambda d: _rms(d, x=_t((), d)),
        "rms_norm: input must have at least 1 dimension (the normalised one), "
        "got a 0-dim tensor",
        ALL,
    ),
    # -- doubles --
    "double_negative": (
        lambda d: _rms(d, eps=-1e-6),
        "rms_norm: epsilon must be finite and >= 0, got -1e-06",
        ALL,
    ),
    "double_large": (
        lambda d: _fused(d, eps=-2.5e300),
        "fused_add_rms_norm: epsilon must be finite and >= 0, got -2.5e+300",
        ALL,
    ),
    "double_nan": (
        lambda d: _rms(d, eps=float("nan")),
        "rms_norm: epsilon must be finite and >= 0, got nan",
        ALL,
    ),
    "double_inf": (
        lambda d: _fused(d, eps=float("inf")),
        "fused_add_rms_norm: epsilon must be finite and >= 0, got inf",
        ALL,
    ),
    "double_negative_inf": (
        lambda d: _rms(d, eps=float("-inf")),
        "rms_norm: epsilon must be finite and >= 0, got -inf",
        ALL,
    ),
    # -- dtypes --
    "dtype_result": (
        lambda d: _rms(d, result=_t((4, W), d, torch.float32)),
        "rms_norm: result must have the dtype of input (BFloat16), got Float",
        ALL,
    ),
    "dtype_input": (
        lambda d: _rms(d, x=_t((4, W), d, torch.int8)),
        "rms_norm: input must be float32, float16 or bfloat16, got Char",
        ALL,
    ),
    # -- devices --
    "device_of_backend": (
        lambda d: _redispatch("cpu", _meta((4, W)), _meta((4, W)), None, EPS),
        "rms_norm: input must be a cpu tensor, got a tensor on meta",
        ("cpu",),
    ),
    "device_mixed_meta": (
        lambda d: _redispatch("cpu", _t((4, W), d), _t((4, W), d), _meta((W,)), EPS),
        "rms_norm: all tensors must be on one device: input is on cpu but weight is on meta",
        ("cpu",),
    ),
    "device_mixed_cpu_weight": (
        lambda d: _rms(d, weight=_t((W,), "cpu")),
        "rms_norm: all tensors must be on one device: input is on cuda:0 but weight is on cpu",
        ("cuda",),
    ),
    "device_of_cuda_backend": (
        lambda d: _redispatch("cuda", _t((4, W), "cpu"), _t((4, W), "cpu"), None, EPS),
        "rms_norm: input must be a cuda tensor, got a tensor on cpu",
        ("cuda",),
    ),
}


def cases_for(device: str) -> list[str]:
    kind = torch.device(device).type
    return [name for name, (_, _, kinds) in CASES.items() if kind in kinds]


def run_cases(device: str) -> None:
    """Child process: runs every case of `device`, printing one JSON line
    per case as soon as it completes (so a crash shows which case died)."""
    for name in cases_for(device):
        call = CASES[name][0]
        try:
            call(device)
            message = None
        except RuntimeError as e:
            message = str(e).splitlines()[0]
        print(json.dumps({"case": name, "message": message}), flush=True)


_CHILD = "import sys; from tests.kernels.core import test_error_messages as m; m.run_cases(sys.argv[1])"


@pytest.fixture(scope="module")
def child_results() -> dict[str, subprocess.CompletedProcess[str]]:
    return {}


def _results(device: str, cache: dict[str, subprocess.CompletedProcess[str]]):
    if device not in cache:
        cache[device] = subprocess.run(
            [sys.executable, "-c", _CHILD, device],
            cwd=contract.REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
    return cache[device]


# cpu and the first GPU (the expected messages name cuda:0).
PARAMS = [(d, name) for d in devices() if d in ALL for name in cases_for(d)]


@pytest.mark.parametrize("device,case", PARAMS)
def test_error_message_streams_values(
    device: str, case: str, child_results: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    contract.skip_without_kernel("_myops_C::rms_norm", device)
    proc = _results(device, child_results)
    done = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            done[record["case"]] = record["message"]
    last = list(done)[-1] if done else None
    assert proc.returncode == 0, (
        f"the process raising the {device} argument errors died with return code "
        f"{proc.returncode} after case {last!r}:\n{proc.stderr[-4000:]}"
    )
    assert case in done, f"case {case} did not run:\n{proc.stderr[-4000:]}"
    expected = CASES[case][1]
    got = done[case]
    assert got is not None, f"{case}: the call did not raise"
    assert re.fullmatch(re.escape(expected), got), (
        f"{case}:\n  got      {got}\n  expected {expected}"
    )
