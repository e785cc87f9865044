# SPDX-License-Identifier: Apache-2.0
"""The counters' snapshots and stats files, and the verdict read from them.

With ``MYOPS_STATS_DIR=DIR`` every process that runs the model writes
``DIR/stats-<pid>.json`` (atomically, at most every ``MYOPS_STATS_INTERVAL``
seconds, default 0.5, when something changed, and at exit). vLLM's engine
core and workers are separate processes, so files are how the API server
user, ``vllm-myops serve`` and the tests read them: ``read_stats(DIR)`` sums
all files.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from vllm_myops import ops
from vllm_myops.observability import choice_log, counters

COUNTS = ("calls", "rows", "graph_captured")

_dumper_pid: int | None = None
_dump_lock = threading.Lock()


def snapshot() -> dict[str, Any]:
    """This process's counters."""
    return {
        "pid": os.getpid(),
        "argv0": os.path.basename(sys.argv[0]) if sys.argv else "",
        "time": time.time(),
        "enabled": counters.ENABLED,
        "status": {f: dict(s) for f, s in choice_log.status.items()},
        "priority": dict(choice_log.priorities),
        "calls": counters.by_op(list(counters.calls)),
        "rows": counters.by_op(list(counters.rows)),
        "graph_captured": counters.by_op(list(counters.captured)),
    }


def dump(stats_dir: str | None = None) -> Path | None:
    """Writes this process's counters to DIR/stats-<pid>.json (atomically)."""
    d = stats_dir or counters.STATS_DIR
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
        state = (
            tuple(counters.calls),
            tuple(counters.captured),
            tuple(sorted(choice_log.priorities)),
        )
        if state != last:
            dump()
            last = state
        time.sleep(counters.INTERVAL_S)


def start_dumper() -> None:
    """Starts this process's stats-file writer (once per process)."""
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


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _zeros() -> dict[str, dict[str, int]]:
    return {o.name: dict.fromkeys(o.providers, 0) for o in ops.OPS}


def _add(a: dict[str, dict[str, int]], b: dict[str, dict[str, int]]) -> None:
    for op, per in b.items():
        for prov, n in per.items():
            a.setdefault(op, {}).setdefault(prov, 0)
            a[op][prov] += int(n)


def read_stats(stats_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Sums the stats files of all processes that wrote into stats_dir."""
    total: dict[str, Any] = {
        "processes": [],
        **{key: _zeros() for key in COUNTS},
        "priority": {},
        "status": {},
    }
    for f in sorted(Path(stats_dir).glob("stats-*.json")):
        try:
            s = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        total["processes"].append(s.get("pid"))
        for key in COUNTS:
            _add(total[key], s.get(key, {}))
        for op, prio in s.get("priority", {}).items():
            total["priority"].setdefault(op, prio)
        total["status"] = total["status"] or s.get("status", {})
    return total


def read_settled(
    stats_dir: str | os.PathLike[str],
    interval_s: float,
    max_wait_s: float,
    settle_s: float | None = None,
) -> dict[str, Any]:
    """read_stats once the files stopped changing: after settle_s (default:
    two write intervals), the first read equal to the one an interval before,
    or the last one after max_wait_s."""
    time.sleep(settle_s if settle_s is not None else interval_s * 2 + 0.2)
    last = read_stats(stats_dir)
    deadline = time.time() + max_wait_s
    while time.time() < deadline:
        time.sleep(interval_s + 0.1)
        cur = read_stats(stats_dir)
        if cur["calls"] == last["calls"]:
            return cur
        last = cur
    return last


def _family_verdict(
    stats: dict[str, Any], family: ops.Family
) -> tuple[int, int, list[str]]:
    """(calls on myops, calls elsewhere, lines) of one family's ops."""
    lines = []
    mine = other = 0
    me = ops.PROVIDER
    for spec in ops.ops_of(family.name):
        op = spec.name
        c = stats["calls"].get(op, {})
        g = stats["graph_captured"].get(op, {})
        r = stats["rows"].get(op, {})
        m = c.get(me, 0) + g.get(me, 0)
        n = sum(c.get(p, 0) + g.get(p, 0) for p in spec.providers if p != me)
        mine += m
        other += n
        g_mine, g_other = g.get(me, 0), sum(v for p, v in g.items() if p != me)
        extra = ""
        if g_mine or g_other:
            extra = (
                f" (of which captured in CUDA graphs: {me} {g_mine}, native {g_other})"
            )
        # An op counted only for us (a layer vLLM has no other path for once
        # we claimed it) has no native column.
        others = f"   native {n:>6} calls" if len(spec.providers) > 1 else ""
        lines.append(
            f"  {op:<20} {me} {m:>8} calls ({r.get(me, 0)} rows){others}{extra}"
        )
        if op in stats.get("priority", {}):
            lines.append(f"  {'':<20} priority in the worker: {stats['priority'][op]}")
    return mine, other, lines


def verdict(
    stats: dict[str, Any], enabled: Collection[str] | None = None
) -> tuple[bool, list[str]]:
    """(every counted call of every family ran on myops, human-readable
    lines).

    enabled=None (a server whose flags we do not know, `vllm-myops stats`):
    a family none of whose calls were counted (the model has none, or
    counting was off) passes only if some other family counted calls.
    enabled=family names (a server we started with those families on): each
    enabled family must have counted calls, all of them on myops (zero calls
    means vLLM sent that work elsewhere); the others read "not enabled"."""
    lines: list[str] = []
    any_mine = False
    all_ok = True
    for family in ops.FAMILIES:
        t = family.title
        if enabled is not None and family.name not in enabled:
            lines.append(f"  => {t}: not enabled")
            continue
        mine, other, fam_lines = _family_verdict(stats, family)
        lines += fam_lines
        if mine > 0 and other == 0:
            lines.append(f"  => {t}: all {mine} calls ran on vllm_myops kernels")
            any_mine = True
        elif mine == 0 and other == 0:
            if enabled is None:
                lines.append(
                    f"  => {t}: no call was counted (stats off, or the model has none)"
                )
            else:
                lines.append(f"  => {t}: enabled, but no call reached our kernels")
                all_ok = False
        else:
            lines.append(
                f"  => {t}: {other} of {mine + other} calls ran on vLLM's native code"
            )
            all_ok = False
    if enabled is not None:
        return all_ok, lines
    return any_mine and all_ok, lines
