# SPDX-License-Identifier: Apache-2.0
"""Per-provider call counters of every op in the registry, counted by an op
inside the executed graph.

Counters are opt-in (they cost a few microseconds per call):

- ``MYOPS_STATS_DIR=DIR``: count, and have every process that runs the model
  write ``DIR/stats-<pid>.json`` (vllm_myops.observability.stats_files).
- ``MYOPS_STATS=1``: count in-process only (``stats_files.snapshot()``).

The names have no ``VLLM_`` prefix on purpose: vLLM warns about (or, with
``--fail-on-environ-validation``, refuses) unknown ``VLLM_*`` variables.

How counting sees real executions, eager and compiled. An IR impl function
runs in Python only when it is traced under torch.compile (Dynamo inlines it
on CPU, where vLLM turns IR torch-wrapping off; on CUDA vLLM's lowering pass
traces it into the Inductor graph). A Python counter in the impl would count
traces, not executions. So counting is an op called by the impl right after
the kernel: it lands in the traced graph like the kernel itself and runs
every time the graph runs. A compiler keeps an op that returns nothing only
if it mutates something, so the op declares a write (and writes nothing).
What it declares as written depends on how the impl is being traced:

- traced by Dynamo (torch-wrapping off, as vLLM compiles on CPU):
  ``myops_obs::tick(Tensor(a!) t, int slot)`` on the op's output ``t``.
  Functionalization turns the call into a new value of ``t`` that the rest
  of the graph uses, so no dead-code pass can drop it. (The sink form below
  becomes an unused functional value there, which dead-code elimination
  drops: seen on torch 2.13 unless the op is registered with
  ``torch.fx.node.has_side_effect``; this form needs no such registration.)
- traced otherwise (vLLM's IR lowering pass inside Inductor, the CUDA
  compiled default; eager calls): ``myops_obs::tick_sink(Tensor(a!) sink,
  Tensor t, int slot)``, reading ``t`` and "writing" a fresh empty tensor of
  its own. The lowered graph is not functional: a mutating op is kept as is.
  A declared write to ``t`` there would break vLLM's clone elimination
  (vllm/compilation/passes/ir/clone_elimination.py asserts that the clone
  made for an in-place provider has at most one writer, the kernel).

Native calls are counted the same way (observability.ir_impls wraps vLLM's
native impls while counting is on), so the count is exact in every mode.

CUDA graphs replay kernels without running any Python: calls made while a
graph is being captured are counted separately as ``graph_captured`` (every
replay re-runs exactly those calls), eager and compiled-without-graph calls
as ``calls``.
"""

from __future__ import annotations

import os

import torch

from vllm_myops import ops

ENV_STATS_DIR = "MYOPS_STATS_DIR"
ENV_STATS = "MYOPS_STATS"
ENV_INTERVAL = "MYOPS_STATS_INTERVAL"

# One slot per (op, provider) of the registry.
SLOTS: tuple[tuple[str, str], ...] = tuple(
    (o.name, p) for o in ops.OPS for p in o.providers
)
PROVIDERS: tuple[str, ...] = tuple(dict.fromkeys(p for _, p in SLOTS))

STATS_DIR: str | None = os.environ.get(ENV_STATS_DIR) or None
ENABLED: bool = bool(STATS_DIR) or os.environ.get(ENV_STATS, "") == "1"
INTERVAL_S: float = float(os.environ.get(ENV_INTERVAL, "0.5") or 0.5)

calls = [0] * len(SLOTS)
rows = [0] * len(SLOTS)
captured = [0] * len(SLOTS)
_lib: torch.library.Library | None = None
_dumping = False


def slot(op_name: str, provider: str) -> int:
    """The counter slot of (op, provider)."""
    return SLOTS.index((op_name, provider))


def enable(stats_dir: str | None = None) -> None:
    """Turns counting on in this process (before vllm_myops registers its
    providers; the providers read ENABLED when traced or called)."""
    global ENABLED, STATS_DIR
    ENABLED = True
    if stats_dir:
        STATS_DIR = stats_dir
    _define_tick_op()


def _count(t: torch.Tensor, slot: int) -> None:
    global _dumping
    width = t.shape[-1] if t.dim() else 1
    n_rows = t.numel() // width if width else 0
    if t.is_cuda and torch.cuda.is_current_stream_capturing():
        captured[slot] += 1
    else:
        calls[slot] += 1
        rows[slot] += n_rows
    if not _dumping and STATS_DIR:
        from vllm_myops.observability import stats_files

        _dumping = True
        stats_files.start_dumper()


def _tick_impl(t: torch.Tensor, slot: int) -> None:
    _count(t, slot)


def _tick_sink_impl(sink: torch.Tensor, t: torch.Tensor, slot: int) -> None:
    _count(t, slot)


def _define_tick_op() -> None:
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("myops_obs", "FRAGMENT")
    # Declared writes that never happen keep the ops alive (module docstring).
    lib.define("tick(Tensor(a!) t, int slot) -> ()")
    lib.define("tick_sink(Tensor(a!) sink, Tensor t, int slot) -> ()")
    for name, fn in (("tick", _tick_impl), ("tick_sink", _tick_sink_impl)):
        lib.impl(name, fn, "CPU")
        lib.impl(name, fn, "CUDA")
        # The fake impl serves fake and meta tensors alike (torch registers it
        # as the Meta kernel); a Meta kernel of our own as well is refused by
        # torch 2.11 ("already has an DispatchKey::Meta implementation").
        lib._register_fake(name, lambda *args: None)
    _lib = lib


def tick(t: torch.Tensor, slot: int) -> None:
    """Counts one call of SLOTS[slot] that produced `t` (in the graph)."""
    if torch.compiler.is_dynamo_compiling():
        torch.ops.myops_obs.tick(t, slot)
    else:
        torch.ops.myops_obs.tick_sink(torch.empty(0, device=t.device), t, slot)


def by_op(values: list[int]) -> dict[str, dict[str, int]]:
    """Slot values as {op: {provider: value}}."""
    out: dict[str, dict[str, int]] = {o.name: {} for o in ops.OPS}
    for (o, p), v in zip(SLOTS, values):
        out[o][p] = v
    return out


def reset() -> None:
    for arr in (calls, rows, captured):
        arr[:] = [0] * len(SLOTS)


def _after_fork_in_child() -> None:
    global _dumping, STATS_DIR, ENABLED
    _dumping = False  # the dumper thread did not survive the fork
    reset()  # the parent's counts are the parent's
    # The child writes where the environment it inherits says, which may have
    # changed since this module was imported (a process that starts one vLLM
    # engine after another, each with its own MYOPS_STATS_DIR, and forks them).
    env_dir = os.environ.get(ENV_STATS_DIR)
    if env_dir:
        STATS_DIR = env_dir
        ENABLED = True
        _define_tick_op()


if ENABLED:
    _define_tick_op()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
