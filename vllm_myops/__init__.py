# SPDX-License-Identifier: Apache-2.0
"""vllm-myops: an out-of-tree vLLM plugin shipping its own CUDA and CPU kernels."""

from __future__ import annotations

__version__ = "0.1.0"


def register() -> None:
    """Entry point of the `vllm.general_plugins` group (see vllm_myops.plugin)."""
    from vllm_myops.plugin import register as _register

    _register()
