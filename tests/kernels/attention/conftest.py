# SPDX-License-Identifier: Apache-2.0
"""Every attention test with a `device` parameter skips an accelerator the
extension was built without kernels for."""

from __future__ import annotations

import pytest

from tests.kernels import contract


@pytest.fixture(autouse=True)
def _skip_devices_without_kernels(request: pytest.FixtureRequest) -> None:
    contract.skip_without_kernel(
        "_myops_C::paged_attention", contract.device_param(request)
    )
