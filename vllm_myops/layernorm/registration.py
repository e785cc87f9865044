# SPDX-License-Identifier: Apache-2.0
"""The layernorm family's ``register(context)``: its two ops become the
``myops`` provider of ``vllm.ir.ops.rms_norm`` and
``vllm.ir.ops.fused_add_rms_norm`` (called by vllm_myops.plugin)."""

from __future__ import annotations

import os

from vllm_myops import ops, platform, vllm_ir
from vllm_myops.family import FamilyStatus, RegistrationContext

FAMILY = ops.family("layernorm")
SPECS = ops.ops_of(FAMILY.name)


def register(context: RegistrationContext) -> FamilyStatus:
    status = FamilyStatus()
    title = FAMILY.title
    try:
        vllm_ir.check_api(SPECS)
    except Exception as e:
        status.reason = f"vLLM IR API missing ({type(e).__name__}: {e})"
        status.warning = (
            f"vllm-myops: the installed vLLM ({context.vllm_version}) has no "
            f"usable vLLM IR op API ({type(e).__name__}: {e}); the {FAMILY.name} "
            f"family is inactive and vLLM runs {title} with its own kernels. "
            "Supported: vLLM 0.24 to 0.33."
        )
        return status

    from vllm import ir

    from vllm_myops.layernorm import ir_providers
    from vllm_myops.observability import choice_log, ir_impls

    loaded, supported = context.extension_loaded, False
    reason = context.extension_reason
    if loaded:
        supported, reason = platform.platform_support(
            ops.kernel_names(SPECS), context.build_info
        )
        if supported:
            reason = platform.describe_kernels(reason)
    status.supported, status.reason = supported, reason
    choice_log.set_status(
        FAMILY.name, loaded=loaded, supported=supported, reason=reason
    )

    if all(ops.PROVIDER in getattr(ir.ops, s.hook.target).impls for s in SPECS):
        # Registered by an earlier import of this module under another name
        # (or by a test); nothing to add.
        status.registered = True
        return status

    ir_impls.install_native_counting(ir.ops, SPECS)
    ir_providers.register_providers(loaded=loaded, supported=supported)
    choice_log.install_choice_logging(ir.ops, SPECS)
    status.registered = True

    if not supported:
        status.warning = (
            f"vllm-myops: kernels unavailable ({reason}); provider 'myops' is "
            f"registered as unsupported and vLLM runs {title} with its own "
            "kernels (native)."
        )
    elif os.environ.get(vllm_ir.ENV_PRIORITY, "") not in ("", "0"):
        status.default_priority_patched = vllm_ir.prepend_to_platform_default(SPECS)
    return status
