# SPDX-License-Identifier: Apache-2.0
"""A start-up log line per vllm.ir op of the registry naming the provider
vLLM chose (always on, free).

When a vLLM worker installs the IR op priority (``IrOp.set_default`` in
worker init), one INFO line per op says which provider handles it, e.g.::

    vllm-myops: vllm.ir.rms_norm -> myops (cpu kernels); priority ['myops', 'native'] ...
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from vllm_myops import ops

logger = logging.getLogger("vllm.myops")

# {family: {"loaded", "supported", "reason"}}, from the plugin.
status: dict[str, dict[str, Any]] = {}
# {op: priority vLLM installed in this process}.
priorities: dict[str, list[str]] = {}


def set_status(family: str, **family_status: Any) -> None:
    """A family's plugin status, for the log lines and the stats file."""
    status.setdefault(family, {}).update(family_status)


def describe_choice(op_name: str, priority: list[str]) -> str:
    first = priority[0] if priority else ops.NATIVE
    fam = status.get(ops.op(op_name).family, {})
    supported = fam.get("supported", False)
    reason = fam.get("reason", "")
    mine = ops.PROVIDER
    hint = f'--ir-op-priority \'{{"{op_name}":["{mine}"]}}\' or MYOPS_PRIORITY=1'
    if first == mine:
        rest = priority[1:] or [ops.NATIVE]
        return (
            f"{mine} ({reason}); priority {priority}: calls {mine} does not "
            f"support (e.g. variance_size, mixed dtypes) go to {rest[0]}"
        )
    if mine in priority:
        return (
            f"{first}; {mine} is next for the calls {first} does not take "
            f"(priority {priority})"
        )
    if not supported:
        return f"{first} ({mine} unavailable: {reason}; priority {priority})"
    return f"{first} (priority {priority}; {mine} is available, enable it with {hint})"


def record_priority(op_name: str, priority: list[str]) -> None:
    priorities[op_name] = list(priority)
    logger.info(
        "vllm-myops: vllm.ir.%s -> %s", op_name, describe_choice(op_name, priority)
    )
    from vllm_myops.observability import counters, stats_files

    if counters.STATS_DIR:
        stats_files.start_dumper()


def install_choice_logging(ir_ops: Any, specs: tuple[ops.OpSpec, ...]) -> None:
    """Logs the provider choice when a worker installs the op priority.

    vLLM calls ``IrOp.set_default(priority)`` once per op in worker init; an
    instance attribute on each of `specs`' IR ops wraps it (no vLLM class is
    changed).
    """
    for spec in specs:
        op = getattr(ir_ops, spec.hook.target)
        if getattr(op.__dict__.get("set_default"), "_myops_logged", False):
            continue
        orig = op.set_default

        def set_default(
            priority: list[str],
            _orig: Any = orig,
            _op: Any = op,
            _name: str = spec.name,
        ) -> None:
            _orig(priority)
            # Logging must never break worker start-up.
            with contextlib.suppress(Exception):
                record_priority(_name, _op.get_priority())

        set_default._myops_logged = True  # type: ignore[attr-defined]
        op.set_default = set_default
