# SPDX-License-Identifier: Apache-2.0
"""The CPU kernels' ISA follows ATen's CPU capability (env
ATEN_CPU_CAPABILITY). contract.rerun_under_cpu_isa runs this test in the
process it starts with a lower capability, so every rerun family's tests are
known to have run on the ISA they were meant for.
"""

from __future__ import annotations

import os

import vllm_myops._custom_ops as ops
from tests.kernels import contract


def test_cpu_kernel_isa_follows_aten_capability() -> None:
    isa = ops.cpu_kernel_isa()
    assert isa in contract.CPU_ISAS
    assert isa == contract.current_cpu_isa()
    expected = os.environ.get(contract.EXPECT_ISA_ENV)
    if expected:  # set by contract.rerun_under_cpu_isa for its process
        assert isa == expected, (
            f"ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY')}"
        )
