# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the plugin tests (helpers: tests/plugin/_helpers.py).

Everything that starts vLLM's engine (vllm.LLM, the API server) runs in a
subprocess: vLLM spawns engine-core and worker processes, which need a
``__main__`` guard and must not inherit pytest's state. Such tests are
marked ``slow`` (they still run in CI); the module docstrings give their
times on the 2-core CI machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny Llama and Qwen3 models, generated once per session."""
    from vllm_myops.testing.tiny_model import ARCHS, make_tiny_model

    base = tmp_path_factory.mktemp("tiny-models")
    return {arch: make_tiny_model(base / arch, arch, seed=0) for arch in ARCHS}
