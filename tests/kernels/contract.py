# SPDX-License-Identifier: Apache-2.0
"""What every `_myops_C` op must do besides computing the right values, as
reusable checks: a family's tests (RMSNorm today, a GEMM or attention next)
call these with their own ops and inputs.

- kernel presence: skip a device the build has no kernel for;
- bad input: rejected with a message, every argument left unchanged;
- `opcheck`: schema, fake tensor and AOT dispatch agree with the kernel;
- `torch.compile(fullgraph=True)`: one graph, results bitwise like eager;
- CUDA graphs: capturable, no host synchronisation;
- CPU ISAs: rerun tests in a process whose ATen CPU capability is lower;
- more than 2^31 elements: memory checks and rows cheap to fill and verify.

Nothing here names an op.
"""

from __future__ import annotations

import os
import subprocess
import sys
import unittest.mock
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from vllm_myops import _extension

REPO_ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------
# Kernel presence
# ---------------------------------------------------------------------------
def has_kernel(qualified_op: str, device: str | torch.device) -> bool:
    """Whether the dispatcher has a kernel of `qualified_op` ("lib::name")
    for the device's backend (CPU, CUDA)."""
    dispatch_key = torch.device(device).type.upper()
    return torch._C._dispatch_has_kernel_for_dispatch_key(qualified_op, dispatch_key)


def device_param(request: pytest.FixtureRequest) -> str | None:
    """The `device` parameter of the requesting test, if it has one."""
    callspec = getattr(request.node, "callspec", None)
    device = callspec.params.get("device") if callspec is not None else None
    return device if isinstance(device, str) else None


def skip_without_kernel(qualified_op: str, device: str | None) -> None:
    """Skips a test on an accelerator the extension was built without. CPU
    kernels are always built: a missing one must fail the test, not skip it."""
    if device is None or torch.device(device).type == "cpu":
        return
    if not has_kernel(qualified_op, device):
        pytest.skip(
            f"vllm_myops was built without {torch.device(device).type.upper()} "
            f"kernels (build_info: {_extension.build_info()}); rebuild with "
            "that toolchain present"
        )


# ---------------------------------------------------------------------------
# Bad input: rejected, nothing modified
# ---------------------------------------------------------------------------
def snapshot(args: Sequence[Any]) -> list[torch.Tensor | None]:
    """Clones of the tensor arguments (None for others and for `meta` tensors,
    which hold no values)."""
    return [
        a.clone() if isinstance(a, torch.Tensor) and a.device.type != "meta" else None
        for a in args
    ]


def assert_unchanged(args: Sequence[Any], before: list[torch.Tensor | None]) -> None:
    for i, (a, b) in enumerate(zip(args, before)):
        if b is not None:
            assert torch.equal(a, b), f"argument {i} was modified by a rejected call"


def assert_rejected_unchanged(
    fn: Callable[..., Any],
    args: Sequence[Any],
    match: str,
    exception: type[BaseException] = RuntimeError,
) -> None:
    """`fn(*args)` raises `exception` whose message matches `match`, and no
    tensor argument changed."""
    before = snapshot(args)
    with pytest.raises(exception, match=match):
        fn(*args)
    assert_unchanged(args, before)


# ---------------------------------------------------------------------------
# opcheck (vLLM's wrapper): torch.library.opcheck with torch.allclose patched
# to compare in float64, so dtypes torch.allclose rejects (fp8) also work.
# ---------------------------------------------------------------------------
ALL_OPCHECK_TEST_UTILS: tuple[str, ...] = (
    "test_schema",
    "test_autograd_registration",
    "test_faketensor",
    "test_aot_dispatch_dynamic",
)


def fp8_allclose(
    a: torch.Tensor,
    b: torch.Tensor,
    rtol: float = 1e-05,
    atol: float = 1e-08,
    equal_nan: bool = False,
) -> bool:
    """torch.allclose computed in float64."""
    torch._refs._check_close_args(name="torch.allclose", a=a, b=b, rtol=rtol, atol=atol)
    return bool(
        torch.all(
            torch.isclose(
                a.double(), b.double(), rtol=rtol, atol=atol, equal_nan=equal_nan
            )
        ).item()
    )


def opcheck(
    op: torch._ops.OpOverload | torch._ops.OpOverloadPacket,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None = None,
    *,
    test_utils: str | Sequence[str] = ALL_OPCHECK_TEST_UTILS,
    raise_exception: bool = True,
    cond: bool = True,
) -> dict[str, str]:
    with unittest.mock.patch("torch.allclose", new=fp8_allclose):
        if not cond:
            return {}
        return torch.library.opcheck(
            op, args, kwargs, test_utils=test_utils, raise_exception=raise_exception
        )


# ---------------------------------------------------------------------------
# torch.compile(fullgraph=True)
# ---------------------------------------------------------------------------
def clone_args(args: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def assert_compiles_like_eager(
    fn: Callable[..., Any],
    make_args: Callable[[int], tuple[Any, ...]],
    sizes: Sequence[int],
    *,
    backend: str,
) -> list[tuple[tuple[Any, ...], tuple[Any, ...]]]:
    """`fn` traces into one graph without a break, and compiled with
    fullgraph=True gives bitwise the eager results (outputs and mutated
    arguments) for inputs of each size in `sizes` (the second size
    recompiles with a dynamic dim). Returns (args, compiled call's args) per
    size, so the caller can check what the op mutated."""
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(fn)(*clone_args(make_args(sizes[0])))
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    torch._dynamo.reset()

    compiled = torch.compile(fn, fullgraph=True, backend=backend)
    calls = []
    for size in sizes:
        args = make_args(size)
        eager_args, compiled_args = clone_args(args), clone_args(args)
        expected = fn(*eager_args)
        got = compiled(*compiled_args)
        # Same kernel on the same values: bitwise equal.
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        for e, g in zip(eager_args, compiled_args):  # mutated graph inputs
            torch.testing.assert_close(g, e, rtol=0, atol=0)
        calls.append((args, compiled_args))
    return calls


# ---------------------------------------------------------------------------
# CUDA graphs
# ---------------------------------------------------------------------------
def capture_without_host_sync(
    call: Callable[[], None], device: str | torch.device
) -> torch.cuda.CUDAGraph:
    """Runs `call` once with sync debug mode "error" (any host
    synchronisation raises), warms it up on a side stream, and returns a CUDA
    graph of it (capture only works on the current stream). The caller
    refills the inputs, replays and checks the results.

    Skipped without the caching allocator (PYTORCH_NO_CUDA_MEMORY_CACHING=1,
    as under compute-sanitizer): an op that frees a temporary (a split-K
    workspace) then calls cudaFree inside the capture, which CUDA forbids."""
    if os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1":
        pytest.skip("CUDA graph capture needs the caching allocator")
    dev = torch.device(device)
    with torch.cuda.device(dev):
        torch.cuda.set_sync_debug_mode("error")
        try:
            call()
        finally:
            torch.cuda.set_sync_debug_mode("default")

        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            call()  # warm-up outside capture
        torch.cuda.current_stream(dev).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call()
    return graph


# ---------------------------------------------------------------------------
# CPU ISAs. ATen's capability (env ATEN_CPU_CAPABILITY) picks the kernels'
# ISA once per process, so a lower ISA is tested in a fresh process.
# ---------------------------------------------------------------------------
CPU_ISAS = ("default", "avx2", "avx512")
# Set for the rerun's process: the ISA check test asserts the ops chose it.
EXPECT_ISA_ENV = "VLLM_MYOPS_TEST_EXPECT_CPU_ISA"
ISA_CHECK_FILE = Path(__file__).resolve().parent / "core" / "test_cpu_isa.py"
ISA_CHECK_TEST = "test_cpu_kernel_isa_follows_aten_capability"


def built_cpu_isas() -> list[str]:
    info = _extension.build_info()
    isas = [s.lower() for s in str(info.get("cpu_isas", "")).split(";") if s]
    return isas or ["default"]


def isa_for_capability(capability: str) -> str:
    """The ISA our dispatch must pick for an ATen capability string."""
    cap = capability.upper()
    rank = 2 if "AVX512" in cap else 1 if "AVX2" in cap else 0
    built = built_cpu_isas()
    for isa in reversed(CPU_ISAS[: rank + 1]):
        if isa in built:
            return isa
    return "default"


def current_cpu_isa() -> str:
    return isa_for_capability(torch.backends.cpu.get_cpu_capability())


def cpu_flags() -> set[str]:
    """The CPU's feature flags (/proc/cpuinfo; empty where it is missing)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def lower_cpu_isas() -> list[str]:
    """The built ISAs below the one this process runs."""
    current = current_cpu_isa()
    return [i for i in CPU_ISAS[: CPU_ISAS.index(current)] if i in built_cpu_isas()]


def rerun_tests(
    test_file: Path,
    test_names: Sequence[str],
    *,
    env: dict[str, str],
    scope: str,
    junit_xml: Path,
    device_keyword: str,
    extra_files: Sequence[Path] = (),
    extra_selection: str | None = None,
) -> tuple[dict[str, int], str]:
    """Runs the `device_keyword` cases of `test_names` in `test_file` (plus
    `extra_selection` from `extra_files`) in a fresh pytest process with the
    environment `env` added. Asserts the run passed with nothing skipped and
    every named test ran at least one case; returns the passed cases per test
    function and the run's output."""
    full_env = dict(os.environ, **env)
    full_env.pop("PYTEST_ADDOPTS", None)
    selection = f"(({' or '.join(test_names)}) and {device_keyword})"
    if extra_selection:
        selection = f"{extra_selection} or {selection}"
    cmd = [
        sys.executable,
        *(["-S"] if sys.flags.no_site else []),
        "-m",
        "pytest",
        *(str(f) for f in extra_files),
        str(test_file),
        "-q",
        "-x",
        "-p",
        "no:cacheprovider",
        "--scope",
        scope,
        "--junitxml",
        str(junit_xml),
        "-k",
        selection,
    ]
    proc = subprocess.run(
        cmd, env=full_env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900
    )
    output = proc.stdout[-6000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, output

    passed: dict[str, int] = {}
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        outcome = [c.tag for c in case if c.tag in ("failure", "error", "skipped")]
        assert not outcome, f"{case.get('name')}: {outcome}\n{output}"
        function = str(case.get("name")).split("[", 1)[0]
        passed[function] = passed.get(function, 0) + 1
    for name in test_names:
        assert passed.get(name, 0) > 0, (
            f"no {device_keyword} case of {name} ran\n{output}"
        )
    return passed, output


def rerun_under_cpu_isa(
    isa: str,
    test_file: Path,
    test_names: Sequence[str],
    *,
    scope: str,
    junit_xml: Path,
    device_keyword: str = "cpu",
) -> None:
    """`rerun_tests` with ATEN_CPU_CAPABILITY=`isa`, plus the ISA check test:
    asserts the ops reported `isa`."""
    passed, output = rerun_tests(
        test_file,
        test_names,
        env={"ATEN_CPU_CAPABILITY": isa, EXPECT_ISA_ENV: isa},
        scope=scope,
        junit_xml=junit_xml,
        device_keyword=device_keyword,
        extra_files=(ISA_CHECK_FILE,),
        extra_selection=ISA_CHECK_TEST,
    )
    assert passed.get(ISA_CHECK_TEST) == 1, f"the ISA check did not run\n{output}"


# ---------------------------------------------------------------------------
# More than 2^31 elements (64-bit offsets)
# ---------------------------------------------------------------------------
def available_memory_bytes(device: str | torch.device) -> int | None:
    """Free memory for new tensors on `device`, or None when unknown."""
    dev = torch.device(device)
    if dev.type == "cuda":
        free, _total = torch.cuda.mem_get_info(dev)
        return int(free)
    if dev.type == "cpu":
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
    return None


def skip_unless_memory(device: str | torch.device, need_bytes: int) -> None:
    have = available_memory_bytes(device)
    gib = 2**30
    if have is None:
        pytest.skip(
            f"cannot tell free memory on {device}; need {need_bytes / gib:.1f} GiB"
        )
    if have < need_bytes:
        pytest.skip(
            f"needs {need_bytes / gib:.1f} GiB free on {device}, have {have / gib:.1f} GiB"
        )


# Rows repeat with a prime period: rows r and r + 2^k never share content.
ROW_PERIOD = 1021


def periodic_rows(
    rows: int, width: int, dtype: torch.dtype, device: str | torch.device
) -> torch.Tensor:
    """[rows, width] whose row r is block[r % ROW_PERIOD] of a random block:
    cheap to fill on a 2-core CPU, unlike randn over 2^31 elements, and every
    row still differs from its neighbours and from the row 2^31 elements
    away."""
    block = torch.randn(ROW_PERIOD, width, device=device).to(dtype)
    t = torch.empty(rows, width, dtype=dtype, device=device)
    full = rows // ROW_PERIOD
    t[: full * ROW_PERIOD].view(full, ROW_PERIOD, width).copy_(
        block.expand(full, ROW_PERIOD, width)
    )
    t[full * ROW_PERIOD :].copy_(block[: rows - full * ROW_PERIOD])
    return t


def assert_rows_periodic(t: torch.Tensor, what: str) -> None:
    """Identical input rows give identical output rows: checks every row of a
    result of periodic_rows inputs without a full reference (NaN never
    equals, so an unwritten NaN-filled row fails)."""
    rows, width = t.shape
    pattern = t[:ROW_PERIOD]
    chunk = ROW_PERIOD * 64
    for start in range(0, rows, chunk):
        part = t[start : start + chunk]
        full = part.shape[0] // ROW_PERIOD
        head = part[: full * ROW_PERIOD].view(full, ROW_PERIOD, width)
        assert torch.equal(head, pattern.expand(full, ROW_PERIOD, width)), (
            f"{what}: rows {start}..{start + full * ROW_PERIOD} differ from the pattern"
        )
        tail = part[full * ROW_PERIOD :]
        assert torch.equal(tail, pattern[: tail.shape[0]]), f"{what}: tail rows differ"


def rows_around_2_31(rows: int, width: int) -> list[int]:
    """Row indices worth comparing with a reference in a [rows, width] tensor
    of more than 2^31 elements: the first rows, the end of the first period,
    the middle, both sides of the row that starts past 2^31, the last row."""
    first_past = 2**31 // width  # first row starting beyond 2^31 elements
    return sorted(
        {
            0,
            1,
            2,
            ROW_PERIOD - 1,
            rows // 2,
            rows // 2 + 1,
            first_past - 1,
            first_past,
            first_past + 1,
            rows - 1,
        }
    )


def assert_env_value_refused(code: str, env_name: str, bad: str) -> None:
    """`code` (a Python program calling an op) run in a fresh process with
    `env_name`=`bad` fails, and its error names the variable and the value
    (forced-path variables are read once per process, hence the process)."""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, **{env_name: bad}),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert env_name in proc.stderr and bad in proc.stderr, proc.stderr
