# SPDX-License-Identifier: Apache-2.0
"""Tiny random models generated locally (no downloads), for the main job,
the tests and the benchmarks. See vllm_myops.models.tiny."""

from typing import Any

__all__ = [
    "ARCHS",
    "default_cache_dir",
    "default_model_dir",
    "make_tiny_model",
    "norm_calls_per_forward",
    "sample_prompts",
]


def __getattr__(name: str) -> Any:
    # Lazy, so `python -m vllm_myops.models.tiny` does not import tiny twice.
    if name in __all__:
        from vllm_myops.models import tiny

        return getattr(tiny, name)
    raise AttributeError(name)
