# SPDX-License-Identifier: Apache-2.0
"""The CUDA block-per-row kernels have a second form that stages the weight
in shared memory (csrc/layernorm_kernels.cu; by default only for small
batches whose weight is not 16-byte aligned with the rows, which the main
tests reach at few shapes). This reruns the CUDA correctness tests of
test_layernorm.py with VLLM_MYOPS_STAGED_WEIGHT=always, so every shape,
layout, weight phase and dtype there also runs through the staged form. The
variable is read once per process, hence the subprocess.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.kernels.utils import SCOPE_ENV, current_scope

SELECTION = (
    "cuda and (test_rms_norm or test_vector_tails or test_weight_layouts "
    "or test_fused_add_rms_norm_mixed_layouts or test_rms_norm_result_aliases_input "
    "or test_epsilon_values)"
)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_correct_with_staged_weight_for_every_batch() -> None:
    env = dict(os.environ)
    env["VLLM_MYOPS_STAGED_WEIGHT"] = "always"
    env[SCOPE_ENV] = current_scope()
    repo_root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(repo_root / "tests" / "kernels" / "test_layernorm.py"),
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            "-k",
            SELECTION,
        ],
        cwd=repo_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
    assert proc.returncode == 0, f"staged-weight rerun failed:\n{tail}"
    assert " passed" in proc.stdout, f"nothing ran:\n{tail}"
