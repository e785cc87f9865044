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
