# SPDX-License-Identifier: Apache-2.0
"""Where vllm-myops keeps what it generates or converts once per machine
(the tiny random models, the converted packaged models, their wheels)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "MYOPS_CACHE_DIR"


def default_cache_dir() -> Path:
    """$MYOPS_CACHE_DIR, else $XDG_CACHE_HOME/vllm-myops, else ~/.cache/vllm-myops."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "vllm-myops"
