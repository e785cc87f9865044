# SPDX-License-Identifier: Apache-2.0
"""The benchmark's command line itself: every help text renders (argparse
%-formats them, so a stray '%' breaks --help for every option)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_help_renders_every_option() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.kernels.benchmark_layernorm", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    for option in ("--plot", "--compare", "--threshold", "--cache", "--summarize"):
        assert option in proc.stdout
    assert "% of floor" in proc.stdout
