# SPDX-License-Identifier: Apache-2.0
"""Loading of the compiled extension `vllm_myops._myops_C`.

Importing the shared library runs its TORCH_LIBRARY initialisers, which
register the ops under `torch.ops._myops_C`. The name differs from vLLM's
`_C`, so both libraries live in one process without clashing.
"""

from __future__ import annotations

import functools
import importlib
import json
from importlib import resources
from typing import Any

import torch  # noqa: F401  (the extension links against torch's libraries)

EXTENSION_NAME = "_myops_C"


@functools.cache
def _load() -> tuple[bool, str | None]:
    try:
        importlib.import_module(f"vllm_myops.{EXTENSION_NAME}")
    except Exception as e:  # ImportError, OSError (undefined symbol), ...
        return False, f"{type(e).__name__}: {e}"
    return True, None


def is_available() -> bool:
    """True when the compiled ops are loaded and registered with torch."""
    return _load()[0]


def load_error() -> str | None:
    """Why the extension could not be loaded, or None."""
    return _load()[1]


def ensure_loaded() -> None:
    """Loads the extension or raises ImportError saying why it cannot."""
    ok, err = _load()
    if not ok:
        raise ImportError(
            "vllm_myops: the compiled extension vllm_myops._myops_C could not be "
            f"loaded ({err}). Build it with `pip install --no-build-isolation .` "
            "against the torch you run with."
        )


@functools.cache
def build_info() -> dict[str, Any]:
    """What the installed extension was built for (device, CUDA archs, ISAs)."""
    try:
        text = resources.files("vllm_myops").joinpath("_build_info.json").read_text()
    except (FileNotFoundError, OSError):
        return {}
    info: dict[str, Any] = json.loads(text)
    return info


def ops() -> Any:
    """The `torch.ops._myops_C` namespace, loading the extension first."""
    ensure_loaded()
    return getattr(torch.ops, EXTENSION_NAME)
