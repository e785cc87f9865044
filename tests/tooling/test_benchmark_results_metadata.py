# SPDX-License-Identifier: Apache-2.0
"""benchmarks/common/results.py: what a result JSON records of the command
line names no machine's layout (results are committed): paths inside the
repository become repo-relative, paths outside it their file name."""

from __future__ import annotations

import sys

import pytest

from benchmarks.common import results


def test_portable_arg_maps_absolute_paths() -> None:
    inside = results.REPO_ROOT / "benchmarks" / "kernels" / "benchmark_w4a16.py"
    assert results.portable_arg(str(inside)) == "benchmarks/kernels/benchmark_w4a16.py"
    assert results.portable_arg("/some/out/dir/bench.json") == "bench.json"
    assert results.portable_arg(inside) == "benchmarks/kernels/benchmark_w4a16.py"
    for kept in ("--save", "bench.json", "28672x4096", "a/b", ""):
        assert results.portable_arg(kept) == kept


def test_metadata_command_line_has_no_absolute_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = str(results.REPO_ROOT / "benchmarks" / "kernels" / "benchmark_w4a16.py")
    monkeypatch.setattr(
        sys, "argv", [script, "--device", "cpu", "--save", "/elsewhere/o/r.json"]
    )
    meta = results.metadata()
    assert meta["argv"] == [
        "benchmarks/kernels/benchmark_w4a16.py",
        "--device",
        "cpu",
        "--save",
        "r.json",
    ]
    assert "/elsewhere" not in meta["command"]
    assert meta["command"].endswith("--save r.json")


def test_git_commit_stated_by_env_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    """A device machine's copy can hold an older .git than its tree: the commit
    the caller states wins over that HEAD, and dirtiness is then unknown."""
    monkeypatch.setenv("VLLM_MYOPS_GIT_COMMIT", "0123456789ab")
    assert results.git_commit() == {"commit": "0123456789ab", "dirty": None}


def test_git_commit_from_head_without_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_MYOPS_GIT_COMMIT", raising=False)
    monkeypatch.setattr(
        results,
        "_git",
        lambda *a: {"rev-parse": "f" * 40, "status": " M x.py"}[a[0]],
    )
    assert results.git_commit() == {"commit": "f" * 40, "dirty": True}
    monkeypatch.setattr(results, "_git", lambda *a: None)
    assert results.git_commit() == {"commit": "unknown", "dirty": None}
