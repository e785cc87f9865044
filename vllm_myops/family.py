# SPDX-License-Identifier: Apache-2.0
"""What vllm_myops.plugin hands each family's ``register(context)`` and what
that returns. The plugin does the warning (once across vLLM's processes);
a family only says what to warn about."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class RegistrationContext:
    vllm_version: str | None
    extension_loaded: bool
    extension_reason: str  # "loaded", or why not
    build_info: dict[str, Any] = field(default_factory=dict)


@dataclass
class FamilyStatus:
    registered: bool = False
    supported: bool = False
    reason: str = "register() not called"
    default_priority_patched: bool = False
    warning: str | None = None  # what the plugin warns about, once

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("warning")
        return d
