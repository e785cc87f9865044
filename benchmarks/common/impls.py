# SPDX-License-Identifier: Apache-2.0
"""Implementation building blocks shared by the families' benchmarks:
loading our own extension's kernels, and an implementation whose operand
lives in its own layout, converted once per buffer set before timing."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import torch

from benchmarks.common.sweep import Case, Impl, Unavailable


def load_our_kernels(device: torch.device, ops: Sequence[str]) -> tuple[Any, str]:
    """vllm_myops._custom_ops and a build note, or Unavailable naming what is
    missing: the extension, or an op's kernel for this device."""
    from vllm_myops import _extension  # noqa: PLC0415

    if not _extension.is_available():
        raise Unavailable(
            f"vllm_myops extension not loadable: {_extension.load_error()}"
        )
    module = importlib.import_module("vllm_myops._custom_ops")
    key = "CUDA" if device.type == "cuda" else "CPU"
    for op in ops:
        try:
            has = torch._C._dispatch_has_kernel_for_dispatch_key(f"_myops_C::{op}", key)
        except RuntimeError:  # not registered at all
            has = False
        if not has:
            raise Unavailable(
                f"_myops_C::{op} has no {key} kernel (built for {_extension.build_info()})"
            )
    return module, f"build {_extension.build_info()}"


def copy_operand(x: Any) -> Any:
    """A deep copy of the tensors inside tuples (other values shared)."""
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, tuple):
        return tuple(copy_operand(v) for v in x)
    return x


class ConvertingImpl(Impl):
    """An implementation whose operand (a weight, a KV cache) lives in its own
    layout: `convert(s, case)` builds it from the set's tensors, attached to
    the set by prepare() before timing (or on first use, e.g. the check's
    set); `call(s, w, case)` runs on it."""

    # Converting can be slow (Python packing) and a cold-cache CPU sweep has
    # thousands of sets of a small case: by default the first set is
    # converted once and every other set gets its own copy (own memory, so
    # still cold). An implementation whose operand depends on each set's
    # values (a view of its bytes, the set's own cache) converts per set.
    convert_each = False

    def convert(self, s: Any, case: Case) -> Any:
        return None

    def call(self, s: Any, w: Any, case: Case) -> Any:
        raise NotImplementedError

    def supports(self, case: Case) -> None:
        """Raise Unavailable for a case this implementation cannot run."""

    @property
    def key(self) -> str:
        return f"_operand_{self.name}"

    def make(self, case):
        self.supports(case)
        key, call, convert = self.key, self.call, self.convert

        def fn(s):
            w = s.__dict__.get(key)
            if w is None:
                w = convert(s, case)
                setattr(s, key, w)
            return call(s, w, case)

        return fn

    def prepare(self, case, sets):
        first = None
        for s in sets:
            if self.key in s.__dict__:
                continue
            if self.convert_each or first is None:
                w = self.convert(s, case)
                first = first if first is not None else w
            else:
                w = copy_operand(first)
            setattr(s, self.key, w)

    def release(self, sets):
        for s in sets:
            s.__dict__.pop(self.key, None)


class BytesPassFloor(ConvertingImpl):
    """The floor of a memory-bound case: one pass over the bytes of the set's
    `operand` tensor (its first half read, its second half written), timed
    like the op: CUDA torch.neg (an SM pass), CPU Tensor.copy_ (memcpy)."""

    name = "floor"
    is_anchor = False
    checked = False
    convert_each = True  # a view of each set's own bytes
    operand = ""  # the buffer-set tensor whose bytes the case must stream

    def convert(self, s, case):
        # The values change; the other implementations' time does not
        # depend on them.
        flat = getattr(s, self.operand).view(-1)
        half = flat.numel() // 2
        return flat[:half], flat[half : 2 * half]

    def call(self, s, w, case):
        src, dst = w
        if self.device.type == "cuda":
            torch.neg(src, out=dst)
        else:
            dst.copy_(src)
        return dst
