# SPDX-License-Identifier: Apache-2.0
"""The extension runs on the C++ runtime of the process, the libstdc++ torch
runs on, and carries no private copy of it.

A compiler whose own libstdc++ is static only links the whole runtime
(locale, iostreams, exception support) into the module; the module then
builds its std::ostringstream objects with its copy while torch and the rest
of the process use theirs, and the first error message that formats a
number crashes (seen on a GPU image). The build links the libstdc++.so the
process maps (CMakeLists.txt); these tests read the built module.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from vllm_myops import _extension

# Defined only by a C++ runtime: its iostreams initialiser.
RUNTIME_MARKER = "_ZNSt8ios_base4InitC1Ev"


def _module_path() -> Path:
    if not _extension.is_available():
        pytest.skip(f"extension not loaded: {_extension.load_error()}")
    import vllm_myops._myops_C as mod  # noqa: PLC0415  (loaded: is_available)

    return Path(mod.__file__)


def _process_libstdcxx() -> str | None:
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 6 and "/libstdc++.so" in parts[5]:
            return parts[5]
    return None


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} (binutils) not on PATH")
    return path


def test_module_needs_the_shared_libstdcxx() -> None:
    so = _module_path()
    if _process_libstdcxx() is None:
        pytest.skip("this process maps no libstdc++ (another C++ runtime)")
    dyn = subprocess.run(
        [_tool("readelf"), "-dW", str(so)], capture_output=True, text=True, check=True
    ).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
    assert any(n.startswith("libstdc++.so") for n in needed), (
        f"{so.name} does not load libstdc++.so (NEEDED: {needed}): its C++ "
        "runtime was linked statically"
    )


def test_module_defines_no_private_cxx_runtime() -> None:
    so = _module_path()
    defined = subprocess.run(
        [_tool("nm"), "-D", "--defined-only", str(so)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert RUNTIME_MARKER not in defined, (
        f"{so.name} defines std::ios_base::Init: it carries its own copy of "
        "libstdc++ beside the process's"
    )
