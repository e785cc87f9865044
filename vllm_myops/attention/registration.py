# SPDX-License-Identifier: Apache-2.0
"""The attention family's ``register(context)``: our backend becomes
``--attention-backend CUSTOM`` (called by vllm_myops.plugin in every vLLM
process; idempotent).

- ``register_backend(AttentionBackendEnum.CUSTOM, CLASS_PATH)``. Not 0.32's
  named backends: the engine process unpickles its config before plugins
  load and fails with "... is not a valid AttentionBackendEnum".
- The CPU platform ignores CUSTOM (it logs "Cannot use
  AttentionBackendEnum.CUSTOM backend on CPU" and picks CPU_ATTN), so its
  ``get_attn_backend_cls`` is wrapped: CUSTOM registered to us -> ours,
  after the validate_configuration check the CUDA platform does; anything
  else -> the original, untouched. A user who did not ask for CUSTOM never
  gets our backend.

The backend is registered even when the kernels are unavailable, so that
``--attention-backend CUSTOM`` then fails at model build with the reason
(backend.kernels) instead of silently running vLLM's own attention.
"""

from __future__ import annotations

import logging
from typing import Any

from vllm_myops import ops, platform
from vllm_myops.family import FamilyStatus, RegistrationContext

FAMILY = ops.family("attention")
SPECS = ops.ops_of(FAMILY.name)

logger = logging.getLogger("vllm.myops")

# Marks our wrapper; holds the wrapped classmethod so unwrap can restore it.
_WRAPPED = "_myops_original_get_attn_backend_cls"


def _kernel_support(context: RegistrationContext) -> tuple[bool, str]:
    kernels = ops.kernel_names(SPECS)
    if not context.extension_loaded:
        return False, context.extension_reason
    try:
        supported, reason = platform.platform_support(kernels, context.build_info)
    except RuntimeError as e:  # "operator _myops_C::... does not exist"
        return False, (
            f"the extension has no paged attention ops ({', '.join(kernels)}): "
            f"rebuild it ({e})"
        )
    if supported:
        return True, platform.describe_kernels(reason)
    return False, f"{reason} ({', '.join(kernels)})"


def register(context: RegistrationContext) -> FamilyStatus:
    from vllm_myops.attention import backend, vllm_compat

    status = FamilyStatus()
    status.supported, status.reason = _kernel_support(context)
    backend.KERNELS.update(supported=status.supported, reason=status.reason)

    vllm_compat.register_custom_backend(backend.CLASS_PATH)
    if vllm_compat.current_platform().is_cpu():
        wrap_cpu_platform(vllm_compat.cpu_platform_class())
    status.registered = True
    # No start-up warning when unsupported: most runs do not ask for CUSTOM;
    # those that do fail with the reason.
    return status


def _selects_ours(selected_backend: Any) -> bool:
    from vllm_myops.attention import backend, vllm_compat

    return (
        selected_backend is not None
        and selected_backend == vllm_compat.backend_enum().CUSTOM
        and vllm_compat.custom_backend_path() == backend.CLASS_PATH
    )


def wrap_cpu_platform(platform_cls: Any) -> bool:
    """Wraps ``platform_cls.get_attn_backend_cls`` (once: False when already
    wrapped)."""
    if _WRAPPED in platform_cls.__dict__:
        return False
    original = platform_cls.__dict__["get_attn_backend_cls"]

    def get_attn_backend_cls(
        cls: Any,
        selected_backend: Any,
        attn_selector_config: Any,
        num_heads: int | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> str:
        if not _selects_ours(selected_backend):
            return original.__get__(None, cls)(
                selected_backend, attn_selector_config, num_heads, *args, **kwargs
            )
        from vllm_myops.attention import backend, vllm_compat

        cls_ = backend.MyopsAttentionBackend
        invalid = cls_.validate_configuration(
            **vllm_compat.validate_kwargs(
                cls_.validate_configuration,
                attn_selector_config,
                cls.get_device_capability(),
            )
        )
        if invalid:
            raise ValueError(
                f"Selected backend {selected_backend} (vllm-myops paged "
                f"attention) is not valid for this configuration. Reason: {invalid}"
            )
        logger.info("Using %s backend (vllm-myops) on CPU.", selected_backend)
        return backend.CLASS_PATH

    get_attn_backend_cls.__doc__ = (
        "vllm-myops: CUSTOM -> vllm_myops' backend, else the CPU platform's own "
        "selection.\n\n" + (original.__func__.__doc__ or "")
    )
    platform_cls.get_attn_backend_cls = classmethod(get_attn_backend_cls)
    setattr(platform_cls, _WRAPPED, original)
    return True


def unwrap_cpu_platform(platform_cls: Any) -> bool:
    """Restores the original selector (False when it was not wrapped)."""
    original = platform_cls.__dict__.get(_WRAPPED)
    if original is None:
        return False
    platform_cls.get_attn_backend_cls = original
    delattr(platform_cls, _WRAPPED)
    return True
