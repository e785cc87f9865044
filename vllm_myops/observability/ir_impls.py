# SPDX-License-Identifier: Apache-2.0
"""What counting changes in vllm.ir impls: vLLM's native impls of the
registry's ops get a tick while counting is on, and impl uuids (vLLM's
compile-cache keys) say whether counting was on."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vllm_myops import ops
from vllm_myops.observability import counters


def counted_output(result: Any, spec: ops.OpSpec) -> Any:
    """The output tensor of `spec` whose rows are counted."""
    return result[spec.counted_output] if isinstance(result, tuple) else result


def _counted(fn: Callable[..., Any], spec: ops.OpSpec, slot: int) -> Callable[..., Any]:
    @functools.wraps(fn)
    def counted(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        counters.tick(counted_output(result, spec), slot)
        return result

    counted._myops_counted = True  # type: ignore[attr-defined]
    return counted


def install_native_counting(ir_ops: Any, specs: tuple[ops.OpSpec, ...]) -> None:
    """Wraps vLLM's native impls of `specs` with a tick (idempotent; only
    while counting is on)."""
    if not counters.ENABLED:
        return
    counters.enable()
    for spec in specs:
        impl = getattr(ir_ops, spec.hook.target).impls[ops.NATIVE]
        if getattr(impl.impl_fn, "_myops_counted", False):
            continue
        orig_uuid = impl.uuid
        impl.impl_fn = _counted(
            impl.impl_fn, spec, counters.slot(spec.name, ops.NATIVE)
        )
        # Compiled graphs of the counted native path differ from vLLM's:
        # keep them apart in vLLM's compile cache.
        impl.uuid = lambda u=orig_uuid: u() + "+myops-count"


def make_uuid(*files: str) -> Callable[[], str]:
    """impl.uuid() replacement: hash of the given source files plus whether
    counting was on when the impl was registered (it changes the graph)."""
    from vllm.ir.util import hash_source

    value = hash_source(*(Path(f) for f in files), f"myops-count={counters.ENABLED}")
    return lambda: value
