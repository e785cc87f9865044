# SPDX-License-Identifier: Apache-2.0
"""What every family whose ops are vLLM IR providers shares: the check that
the installed vLLM has the IR op API for them, and ``MYOPS_PRIORITY=1``.

``MYOPS_PRIORITY=1`` puts ``myops`` at the front of the *platform default*
priority list of our IR ops. Because vLLM appends platform defaults after the
user's list, an explicit ``--ir-op-priority`` still wins (``["native"]``
stays native-only), and ``native`` still follows ``myops`` for the calls we
do not support. This is the mechanism vLLM itself uses for
``VLLM_USE_OINK_OPS`` on CUDA (``CudaPlatform.get_default_ir_op_priority``);
we wrap that classmethod of the current platform. It matters in the process
that builds the ``VllmConfig`` (API server / ``LLM()``); workers receive the
resolved list.
"""

from __future__ import annotations

import logging
from typing import Any

from vllm_myops import ops

logger = logging.getLogger("vllm.myops")

ENV_PRIORITY = "MYOPS_PRIORITY"

# IR ops (hook targets) that MYOPS_PRIORITY=1 puts myops first for, filled
# by each family that asks; read by the one wrapper installed.
_prepended: list[str] = []


def check_api(specs: tuple[ops.OpSpec, ...]) -> None:
    """Raises when the installed vLLM lacks vllm.ir or one of the ops."""
    from vllm import ir

    for spec in specs:
        if not hasattr(getattr(ir.ops, spec.hook.target), "register_impl"):
            raise AttributeError(f"vllm.ir.ops.{spec.hook.target}.register_impl")


def prepend_to_platform_default(specs: tuple[ops.OpSpec, ...]) -> bool:
    """myops first in the platform default priority of `specs` (see the
    module docstring for why this is safe)."""
    from vllm.platforms import current_platform

    targets = [s.hook.target for s in specs if s.hook.target not in _prepended]
    _prepended.extend(targets)
    cls = type(current_platform)
    current = cls.get_default_ir_op_priority
    if not getattr(current, "_myops_prepended", False):

        def get_default_ir_op_priority(klass: Any, vllm_config: Any) -> Any:
            cfg = current(vllm_config)
            for name in _prepended:
                lst = list(getattr(cfg, name, None) or [])
                if ops.PROVIDER not in lst:
                    setattr(cfg, name, [ops.PROVIDER, *lst])
            return cfg

        get_default_ir_op_priority._myops_prepended = True  # type: ignore[attr-defined]
        cls.get_default_ir_op_priority = classmethod(get_default_ir_op_priority)  # type: ignore[method-assign]
    if targets:
        logger.info(
            "vllm-myops: %s=1: 'myops' leads the default IR op priority of "
            "%s (an explicit --ir-op-priority still comes first)",
            ENV_PRIORITY,
            " and ".join(targets),
        )
    return True
