# SPDX-License-Identifier: Apache-2.0
"""Seeing that our kernels ran: per-provider call counters and a start-up log
line per op naming the provider vLLM chose.

Start-up log (always on, free): when a vLLM worker installs the IR op
priority (``IrOp.set_default`` in worker init), one INFO line per op says
which provider handles it, e.g.::

    vllm-myops: vllm.ir.rms_norm -> myops (cpu kernels); priority ['myops', 'native'] ...

Counters (opt-in, they cost a few microseconds per call):

- ``MYOPS_STATS_DIR=DIR``: count, and have every process that runs the model
  write ``DIR/stats-<pid>.json`` (atomically, at most every
  ``MYOPS_STATS_INTERVAL`` seconds, default 0.5, when something changed, and
  at exit). vLLM's engine core and workers are separate processes, so files
  are how the API server user, ``vllm-myops serve`` and the tests read them:
  ``read_stats(DIR)`` sums all files.
- ``MYOPS_STATS=1``: count in-process only (``snapshot()``).

The names have no ``VLLM_`` prefix on purpose: vLLM warns about (or, with
``--fail-on-environ-validation``, refuses) unknown ``VLLM_*`` variables.

How counting sees real executions, eager and compiled. An IR impl function
runs in Python only when it is traced under torch.compile (Dynamo inlines it
on CPU, where vLLM turns IR torch-wrapping off; on CUDA vLLM's lowering pass
traces it into the Inductor graph). A Python counter in the impl would count
traces, not executions. So counting is an op, ``myops_obs::tick(Tensor(a!) t,
int slot)``, called by the impl right after the kernel: it lands in the traced
graph like the kernel itself and runs every time the graph runs. Its schema
declares a mutation of ``t`` (it writes nothing) so that no compiler pass may
drop it as dead code. Native calls are counted the same way, by wrapping
vLLM's native impl while counting is on; a compiled native path then runs as
Inductor code plus the tick op, so the count is exact in every mode.

CUDA graphs replay kernels without running any Python: calls made while a
graph is being captured are counted separately as ``graph_captured`` (every
replay re-runs exactly those calls), eager and compiled-without-graph calls
as ``calls``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger("vllm.myops")

ENV_STATS_DIR = "MYOPS_STATS_DIR"
ENV_STATS = "MYOPS_STATS"
ENV_INTERVAL = "MYOPS_STATS_INTERVAL"

OPS = ("rms_norm", "fused_add_rms_norm")
PROVIDERS = ("myops", "native")
SLOTS: tuple[tuple[str, str], ...] = tuple((o, p) for o in OPS for p in PROVIDERS)
SLOT_RMS_NORM_MYOPS = SLOTS.index(("rms_norm", "myops"))
SLOT_RMS_NORM_NATIVE = SLOTS.index(("rms_norm", "native"))
SLOT_FUSED_ADD_RMS_NORM_MYOPS = SLOTS.index(("fused_add_rms_norm", "myops"))
SLOT_FUSED_ADD_RMS_NORM_NATIVE = SLOTS.index(("fused_add_rms_norm", "native"))

STATS_DIR: str | None = os.environ.get(ENV_STATS_DIR) or None
ENABLED: bool = bool(STATS_DIR) or os.environ.get(ENV_STATS, "") == "1"
INTERVAL_S: float = float(os.environ.get(ENV_INTERVAL, "0.5") or 0.5)

_calls = [0] * len(SLOTS)
_rows = [0] * len(SLOTS)
_captured = [0] * len(SLOTS)
_priorities: dict[str, list[str]] = {}
_status: dict[str, Any] = {}
_lib: torch.library.Library | None = None
_dumper_pid: int | None = None
_dump_lock = threading.Lock()


def enable(stats_dir: str | None = None) -> None:
    """Turns counting on in this process (before vllm_myops registers its
    providers; the providers read ENABLED when traced or called)."""
    global ENABLED, STATS_DIR
    ENABLED = True
    if stats_dir:
        STATS_DIR = stats_dir
    _define_tick_op()


# --------------------------------------------------------------------------
# The counting op
# --------------------------------------------------------------------------


def _tick_impl(t: torch.Tensor, slot: int) -> None:
    width = t.shape[-1] if t.dim() else 1
    rows = t.numel() // width if width else 0
    if t.is_cuda and torch.cuda.is_current_stream_capturing():
        _captured[slot] += 1
    else:
        _calls[slot] += 1
        _rows[slot] += rows
    if _dumper_pid is None and STATS_DIR:
        _start_dumper()


def _tick_fake(t: torch.Tensor, slot: int) -> None:
    return None


def _define_tick_op() -> None:
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("myops_obs", "FRAGMENT")
    # Tensor(a!): declared as mutating so no pass treats it as dead code.
    lib.define("tick(Tensor(a!) t, int slot) -> ()")
    lib.impl("tick", _tick_impl, "CPU")
    lib.impl("tick", _tick_impl, "CUDA")
    lib.impl("tick", _tick_fake, "Meta")  # meta tensors never ran anything
    lib._register_fake("tick", _tick_fake)
    _lib = lib


def tick(t: torch.Tensor, slot: int) -> None:
    """Counts one call of SLOTS[slot] that produced `t` (in the graph)."""
    torch.ops.myops_obs.tick(t, slot)


if ENABLED:
    _define_tick_op()


# --------------------------------------------------------------------------
# Counting native calls (only while counting is on)
# --------------------------------------------------------------------------


def _counted_native_rms_norm(orig: Callable[..., Any]) -> Callable[..., Any]:
    def native_rms_norm(x, weight, epsilon, variance_size=None):
        out = orig(x, weight, epsilon, variance_size)
        tick(out, SLOT_RMS_NORM_NATIVE)
        return out

    return native_rms_norm


def _counted_native_fused_add_rms_norm(orig: Callable[..., Any]) -> Callable[..., Any]:
    def native_fused_add_rms_norm(x, x_residual, weight, epsilon, variance_size=None):
        out, residual = orig(x, x_residual, weight, epsilon, variance_size)
        tick(out, SLOT_FUSED_ADD_RMS_NORM_NATIVE)
        return out, residual

    return native_fused_add_rms_norm


def install_native_counting(ir_ops: Any) -> None:
    """Wraps vLLM's native impls of our two ops with a tick (idempotent)."""
    if not ENABLED:
        return
    _define_tick_op()
    for name, wrap in (
        ("rms_norm", _counted_native_rms_norm),
        ("fused_add_rms_norm", _counted_native_fused_add_rms_norm),
    ):
        impl = getattr(ir_ops, name).impls["native"]
        if getattr(impl.impl_fn, "_myops_counted", False):
            continue
        orig_uuid = impl.uuid
        impl.impl_fn = wrap(impl.impl_fn)
        impl.impl_fn._myops_counted = True
        # Compiled graphs of the counted native path differ from vLLM's:
        # keep them apart in vLLM's compile cache.
        impl.uuid = lambda u=orig_uuid: u() + "+myops-count"


def make_uuid(*files: str) -> Callable[[], str]:
    """impl.uuid() replacement: hash of the given source files plus whether
    counting was on when the impl was registered (it changes the graph)."""
    from vllm.ir.util import hash_source

    value = hash_source(*(Path(f) for f in files), f"myops-count={ENABLED}")
    return lambda: value


# --------------------------------------------------------------------------
# Start-up log line per op: which provider vLLM chose
# --------------------------------------------------------------------------


def set_status(**status: Any) -> None:
    """Plugin status for the log lines and the stats file (loaded, reason)."""
    _status.update(status)


def describe_choice(op_name: str, priority: list[str]) -> str:
    first = priority[0] if priority else "native"
    supported = _status.get("supported", False)
    reason = _status.get("reason", "")
    hint = f'--ir-op-priority \'{{"{op_name}":["myops"]}}\' or MYOPS_PRIORITY=1'
    if first == "myops":
        rest = priority[1:] or ["native"]
        return (
            f"myops ({reason}); priority {priority}: calls myops does not "
            f"support (e.g. variance_size, mixed dtypes) go to {rest[0]}"
        )
    if "myops" in priority:
        return (
            f"{first}; myops is next for the calls {first} does not take "
            f"(priority {priority})"
        )
    if not supported:
        return f"{first} (myops unavailable: {reason}; priority {priority})"
    return f"{first} (priority {priority}; myops is available, enable it with {hint})"


def record_priority(op_name: str, priority: list[str]) -> None:
    _priorities[op_name] = list(priority)
    logger.info(
        "vllm-myops: vllm.ir.%s -> %s", op_name, describe_choice(op_name, priority)
    )
    if STATS_DIR and _dumper_pid is None:
        _start_dumper()


def install_choice_logging(ir_ops: Any) -> None:
    """Logs the provider choice when a worker installs the op priority.

    vLLM calls ``IrOp.set_default(priority)`` once per op in worker init; an
    instance attribute on our two ops wraps it (no vLLM class is changed).
    """
    for name in OPS:
        op = getattr(ir_ops, name)
        if getattr(op.__dict__.get("set_default"), "_myops_logged", False):
            continue
        orig = op.set_default

        def set_default(priority: list[str], _orig=orig, _op=op) -> None:
            _orig(priority)
            # Logging must never break worker start-up.
            with contextlib.suppress(Exception):
                record_priority(_op.name, _op.get_priority())

        set_default._myops_logged = True  # type: ignore[attr-defined]
        op.set_default = set_default


# --------------------------------------------------------------------------
# Snapshots and the stats files
# --------------------------------------------------------------------------


def _by_op(values: list[int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {o: {} for o in OPS}
    for (o, p), v in zip(SLOTS, values):
        out[o][p] = v
    return out


def snapshot() -> dict[str, Any]:
    """This process's counters."""
    return {
        "pid": os.getpid(),
        "argv0": os.path.basename(sys.argv[0]) if sys.argv else "",
        "time": time.time(),
        "enabled": ENABLED,
        "status": dict(_status),
        "priority": dict(_priorities),
        "calls": _by_op(list(_calls)),
        "rows": _by_op(list(_rows)),
        "graph_captured": _by_op(list(_captured)),
    }


def reset() -> None:
    for arr in (_calls, _rows, _captured):
        arr[:] = [0] * len(SLOTS)


def dump(stats_dir: str | None = None) -> Path | None:
    """Writes this process's counters to DIR/stats-<pid>.json (atomically)."""
    d = stats_dir or STATS_DIR
    if not d:
        return None
    with _dump_lock:
        path = Path(d) / f"stats-{os.getpid()}.json"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{threading.get_ident()}")
            tmp.write_text(json.dumps(snapshot(), indent=1))
            os.replace(tmp, path)
        except OSError:
            return None
        return path


def _dumper_loop(pid: int) -> None:
    last = None
    while _dumper_pid == pid:
        state = (tuple(_calls), tuple(_captured), tuple(sorted(_priorities)))
        if state != last:
            dump()
            last = state
        time.sleep(INTERVAL_S)


def _start_dumper() -> None:
    global _dumper_pid
    with _dump_lock:
        if _dumper_pid is not None:
            return
        _dumper_pid = os.getpid()
    threading.Thread(
        target=_dumper_loop, args=(_dumper_pid,), name="myops-stats", daemon=True
    ).start()
    atexit.register(dump)


def _after_fork_in_child() -> None:
    global _dumper_pid
    _dumper_pid = None  # the thread did not survive the fork
    reset()  # the parent's counts are the parent's


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _add(a: dict[str, dict[str, int]], b: dict[str, dict[str, int]]) -> None:
    for op, per in b.items():
        for prov, n in per.items():
            a.setdefault(op, {}).setdefault(prov, 0)
            a[op][prov] += int(n)


def read_stats(stats_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Sums the stats files of all processes that wrote into stats_dir."""
    total: dict[str, Any] = {
        "processes": [],
        "calls": {o: dict.fromkeys(PROVIDERS, 0) for o in OPS},
        "rows": {o: dict.fromkeys(PROVIDERS, 0) for o in OPS},
        "graph_captured": {o: dict.fromkeys(PROVIDERS, 0) for o in OPS},
        "priority": {},
        "status": {},
    }
    for f in sorted(Path(stats_dir).glob("stats-*.json")):
        try:
            s = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        total["processes"].append(s.get("pid"))
        for key in ("calls", "rows", "graph_captured"):
            _add(total[key], s.get(key, {}))
        for op, prio in s.get("priority", {}).items():
            total["priority"].setdefault(op, prio)
        total["status"] = total["status"] or s.get("status", {})
    return total


def verdict(stats: dict[str, Any]) -> tuple[bool, list[str]]:
    """(all RMSNorm calls ran on myops, human-readable lines)."""
    lines = []
    mine = other = 0
    for op in OPS:
        c = stats["calls"].get(op, {})
        g = stats["graph_captured"].get(op, {})
        r = stats["rows"].get(op, {})
        m, n = (
            c.get("myops", 0) + g.get("myops", 0),
            c.get("native", 0) + g.get("native", 0),
        )
        mine += m
        other += n
        extra = ""
        if g.get("myops", 0) or g.get("native", 0):
            extra = f" (of which captured in CUDA graphs: myops {g.get('myops', 0)}, native {g.get('native', 0)})"
        lines.append(
            f"  {op:<20} myops {m:>8} calls ({r.get('myops', 0)} rows)   "
            f"native {n:>6} calls{extra}"
        )
        if op in stats.get("priority", {}):
            lines.append(f"  {'':<20} priority in the worker: {stats['priority'][op]}")
    ok = mine > 0 and other == 0
    if ok:
        lines.append(f"  => all {mine} RMSNorm calls ran on vllm_myops kernels")
    elif mine == 0 and other == 0:
        lines.append(
            "  => no RMSNorm call was counted (stats off, or the model has none)"
        )
    else:
        lines.append(
            f"  => {other} of {mine + other} RMSNorm calls ran on vLLM's native code"
        )
    return ok, lines
