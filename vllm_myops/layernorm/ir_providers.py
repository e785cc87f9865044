# SPDX-License-Identifier: Apache-2.0
"""vLLM IR providers named ``myops`` for ``vllm.ir.ops.rms_norm`` and
``vllm.ir.ops.fused_add_rms_norm``.

What vLLM needs from a provider (vllm/ir/op.py):

- an impl function whose inferred schema equals the native one, so every
  parameter and the return carry full annotations. No
  ``from __future__ import annotations`` here: torch's ``infer_schema`` reads
  the annotation objects.
- ``supported``: a static platform check, evaluated once at registration.
  vLLM drops unsupported providers from a priority list
  (``IrOp._filter_priority_impls``), so a list naming ``myops`` stays valid
  where the kernels cannot run (extension missing, platform not built).
- ``supports_args``: a per-call check (on the dispatch hot path, and traced by
  Dynamo when vLLM compiles with torch wrapping off, as on CPU), so it is cheap
  and only reads static tensor metadata. It says exactly what the compiled ops
  accept; everything else falls through to the next provider (``native``,
  which vLLM always appends).

What the compiled ops accept (csrc/layernorm/layernorm_args.cpp):
float32/float16/bfloat16 input with at least one dim; any leading dims and
strided rows (other layouts are handled by a copy inside the op); weight None
or a 1-D tensor of the input's dtype, device and last-dim size; a finite
epsilon >= 0. fused_add_rms_norm also needs a residual of the input's dtype,
device and shape, and neither tensor may have internally overlapping elements
(both are written in place). ``variance_size`` (normalising over a prefix of
the last dim) is not implemented: it must be None.

Numerics versus vLLM's native provider: ``rms_norm`` matches it up to fp32
summation order. ``fused_add_rms_norm`` rounds ``x + residual`` to the dtype
and normalises that rounded residual, like vLLM's CUDA kernel (``vllm_c``);
native normalises the unrounded fp32 sum. For bf16 that is at most one ulp of
the residual (2^-8 relative) entering the normalisation, the same order as
the output rounding itself.
"""

import math

import torch
from torch import Tensor

from vllm_myops import ops, platform
from vllm_myops.observability import counters, ir_impls

SPECS = ops.ops_of("layernorm")
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Device types the loaded extension has kernels for ("cpu", "cuda"); set by
# register_providers(). Empty means "nothing runs" (supports_args -> False).
_KERNEL_DEVICES: frozenset[str] = frozenset()

_SLOT_RMS_NORM = counters.slot("rms_norm", ops.PROVIDER)
_SLOT_FUSED_ADD_RMS_NORM = counters.slot("fused_add_rms_norm", ops.PROVIDER)

# The compiled ops, bound by register_providers() once the extension loaded.
# Called through the module (not a captured function object) so tests can
# wrap vllm_myops._custom_ops.rms_norm with a spy.
_kernels = None


def _ops():
    assert _kernels is not None, "vllm_myops: provider called before registration"
    return _kernels


# --------------------------------------------------------------------------
# supports_args predicates: names and defaults must equal the native
# signature's (vLLM checks them at registration).
# --------------------------------------------------------------------------


def _weight_ok(x: Tensor, weight: Tensor | None) -> bool:
    return weight is None or (
        weight.dtype == x.dtype
        and weight.dim() == 1
        and weight.shape[0] == x.shape[-1]
        and weight.device == x.device
    )


def _input_ok(x: Tensor, epsilon: float) -> bool:
    return (
        x.dtype in SUPPORTED_DTYPES
        and x.dim() >= 1
        and x.device.type in _KERNEL_DEVICES
        and math.isfinite(epsilon)
        and epsilon >= 0.0
    )


def _no_internal_overlap(t: Tensor) -> bool:
    # at::has_internal_overlap() == Yes exactly when some dim of size > 1 has
    # stride 0 (an expanded tensor); such a tensor cannot be written in place.
    return all(s != 0 or n <= 1 for n, s in zip(t.shape, t.stride()))


def rms_norm_supports_args(
    x: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> bool:
    return variance_size is None and _input_ok(x, epsilon) and _weight_ok(x, weight)


def fused_add_rms_norm_supports_args(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> bool:
    return (
        variance_size is None
        and _input_ok(x, epsilon)
        and _weight_ok(x, weight)
        and x_residual.dtype == x.dtype
        and x_residual.shape == x.shape
        and x_residual.device == x.device
        and _no_internal_overlap(x)
        and _no_internal_overlap(x_residual)
    )


# --------------------------------------------------------------------------
# Implementations. Full annotations: vLLM infers the schema from them and
# requires it to equal the native schema.
# --------------------------------------------------------------------------


def rms_norm(
    x: Tensor, weight: Tensor | None, epsilon: float, variance_size: int | None = None
) -> Tensor:
    """vllm.ir.ops.rms_norm on vllm_myops kernels (out-of-place)."""
    if variance_size is not None:
        raise ValueError("vllm_myops rms_norm does not implement variance_size")
    # Contiguous output of x's shape, also for strided x (e.g. Qwen3's q/k
    # head views of the qkv projection): callers .view() the result.
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _ops().rms_norm(out, x, weight, epsilon)
    if counters.ENABLED:
        counters.tick(out, _SLOT_RMS_NORM)
    return out


def fused_add_rms_norm(
    x: Tensor,
    x_residual: Tensor,
    weight: Tensor | None,
    epsilon: float,
    variance_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """vllm.ir.ops.fused_add_rms_norm on vllm_myops kernels, in place:
    x_residual = T(x + x_residual); x = rms_norm(x_residual) * weight."""
    if variance_size is not None:
        raise ValueError(
            "vllm_myops fused_add_rms_norm does not implement variance_size"
        )
    _ops().fused_add_rms_norm(x, x_residual, weight, epsilon)
    if counters.ENABLED:
        counters.tick(x, _SLOT_FUSED_ADD_RMS_NORM)
    return x, x_residual


# --------------------------------------------------------------------------
# Registration (called by vllm_myops.layernorm.registration)
# --------------------------------------------------------------------------


def register_providers(loaded: bool, supported: bool) -> dict[str, object]:
    """Registers provider ``myops`` for both ops (once per process).

    loaded: the extension imported. supported: it also has kernels for this
    platform (vllm_myops.platform.platform_support). When either is false
    the provider is still registered, as unsupported, so that a priority list
    naming ``myops`` (e.g. ``--ir-op-priority``) stays valid: vLLM drops it and
    serves with its own kernels instead of failing on an unknown provider name.

    Returns {op_name: IrOpImpl} for both ops.
    """
    global _KERNEL_DEVICES, _kernels
    from vllm import ir

    if loaded:
        from vllm_myops import _custom_ops

        _kernels = _custom_ops
        _KERNEL_DEVICES = (
            platform.kernel_devices(ops.kernel_names(SPECS))
            if supported
            else frozenset()
        )
    supported = loaded and supported

    impls = {}
    plan = (
        ("rms_norm", rms_norm, rms_norm_supports_args, False),
        (
            "fused_add_rms_norm",
            fused_add_rms_norm,
            fused_add_rms_norm_supports_args,
            True,
        ),
    )
    for name, fn, pred, inplace in plan:
        op = getattr(ir.ops, name)
        if ops.PROVIDER in op.impls:  # registered earlier in this process
            impls[name] = op.impls[ops.PROVIDER]
            continue
        impl = op.register_impl(
            ops.PROVIDER, supported=supported, supports_args=pred, inplace=inplace
        )(fn)
        # vLLM keys its compile caches on impl.uuid() (a hash of the impl's
        # source file). What the traced graph contains also depends on the
        # other modules the impl calls into and on whether counting is on, so
        # hash those too: a cached graph without counters is never reused when
        # counting is enabled, and vice versa.
        impl.uuid = ir_impls.make_uuid(__file__, counters.__file__)
        impls[name] = impl
    return impls
