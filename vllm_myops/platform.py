# SPDX-License-Identifier: Apache-2.0
"""Whether the loaded extension has kernels that run here, for any family:
which devices the dispatcher has kernels for, whether the CUDA archs it was
built for run on this GPU, and vLLM's current platform."""

from __future__ import annotations

from typing import Any

from vllm_myops._extension import EXTENSION_NAME

_DEVICE_KEYS = (("CPU", "cpu"), ("CUDA", "cuda"))


def kernel_dispatch_keys(kernel: str) -> list[str]:
    """Dispatch keys ("CPU", "CUDA") with a registered kernel for the
    _myops_C op `kernel`."""
    import torch

    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return [key for key, _ in _DEVICE_KEYS if has(f"{EXTENSION_NAME}::{kernel}", key)]


def kernel_devices(kernels: tuple[str, ...]) -> frozenset[str]:
    """Device types with a registered kernel for every op in `kernels` (the
    dispatcher is the authority, not the build metadata)."""
    per_kernel = [kernel_dispatch_keys(k) for k in kernels]
    return frozenset(
        device
        for key, device in _DEVICE_KEYS
        if per_kernel and all(key in keys for keys in per_kernel)
    )


def _parse_archs(archs: str) -> list[tuple[int, int, bool]]:
    """'8.0;8.6;9.0a;9.0+PTX' -> [(8, 0, False), (8, 6, False), ...]; the
    bool says whether PTX is embedded. Arch-specific ('a') builds are skipped:
    they only run on exactly that arch and the common kernels cover it."""
    out = []
    for a in archs.replace(",", ";").split(";"):
        a = a.strip()
        ptx = a.endswith("+PTX")
        base = a.removesuffix("+PTX")
        if not base or base.endswith(("a", "f")):
            continue
        major, _, minor = base.partition(".")
        try:
            out.append((int(major), int(minor or 0), ptx))
        except ValueError:
            continue
    return out


def cuda_arch_runs(archs: str, capability: tuple[int, int]) -> bool | None:
    """Whether code built for `archs` runs on a GPU of `capability`: SASS runs
    on the same major with an equal or higher minor; PTX JIT-compiles for any
    newer arch. None when the build recorded no archs (cannot tell)."""
    parsed = _parse_archs(archs)
    if not parsed:
        return None
    major, minor = capability
    return any(
        (a_major == major and a_minor <= minor)
        or (ptx and (a_major, a_minor) <= (major, minor))
        for a_major, a_minor, ptx in parsed
    )


def platform_support(
    kernels: tuple[str, ...], build_info: dict[str, Any]
) -> tuple[bool, str]:
    """(supported, why) of the ops in `kernels` on vLLM's current platform."""
    from vllm.platforms import current_platform

    devices = kernel_devices(kernels)
    if current_platform.is_cpu():
        if "cpu" in devices:
            return True, "cpu kernels"
        return False, "the extension has no CPU kernels registered"
    if current_platform.is_cuda():  # NVIDIA only; ROCm is a different platform
        if "cuda" not in devices:
            return False, (
                "the extension was built without CUDA kernels (target_device="
                f"{build_info.get('target_device', '?')}); rebuild on a CUDA "
                "machine: pip install --no-build-isolation ."
            )
        try:
            # NVML-based on vLLM's CUDA platform: does not initialise CUDA in
            # the API-server process.
            cap = current_platform.get_device_capability()
        except Exception:
            cap = None
        if cap is None:
            return True, "cuda kernels (device capability unknown)"
        archs = build_info.get("cuda_archs", "")
        runs = cuda_arch_runs(archs, (cap.major, cap.minor))
        if runs is False:
            return False, (
                f"the CUDA kernels were built for {archs}, the GPU is "
                f"sm_{cap.major}{cap.minor}; rebuild with "
                f"CUDA_ARCHS={cap.major}.{cap.minor}"
            )
        return True, f"cuda kernels for sm_{cap.major}{cap.minor} (built: {archs})"
    return False, (
        f"platform {getattr(current_platform, 'device_name', '?')!r} has no "
        "vllm_myops kernels (CPU and NVIDIA CUDA only)"
    )


def describe_kernels(platform_reason: str) -> str:
    """platform_support's reason, with the CPU kernels' vector ISA added."""
    try:
        from vllm_myops import _custom_ops

        if platform_reason.startswith("cpu"):
            return f"cpu kernels, {_custom_ops.cpu_kernel_isa()}"
    except Exception:
        pass
    return platform_reason
