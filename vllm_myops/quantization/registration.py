# SPDX-License-Identifier: Apache-2.0
"""The quantization family's ``register(context)``: ``myops_w4a16`` becomes
a vLLM quantization method (called by vllm_myops.plugin).

The name is registered even when the kernels are unavailable, so that
``--quantization myops_w4a16`` then fails at model load with the reason
(config.get_quant_method) instead of "unknown quantization method"; there
is no fallback to another kernel.
"""

from __future__ import annotations

from vllm_myops import ops, platform
from vllm_myops.family import FamilyStatus, RegistrationContext

FAMILY = ops.family("quantization")
SPECS = ops.ops_of(FAMILY.name)


def register(context: RegistrationContext) -> FamilyStatus:
    from vllm_myops.quantization import config, vllm_compat

    status = FamilyStatus()
    supported, reason = False, context.extension_reason
    if context.extension_loaded:
        supported, reason = platform.platform_support(
            ops.kernel_names(SPECS), context.build_info
        )
        if supported:
            reason = platform.describe_kernels(reason)
        else:
            reason = f"{reason} ({', '.join(ops.kernel_names(SPECS))})"
    status.supported, status.reason = supported, reason
    config.KERNELS.update(supported=supported, reason=reason)

    for spec in SPECS:
        vllm_compat.register_quantization_config(
            spec.hook.target, config.MyopsW4A16Config
        )
    status.registered = True
    # No start-up warning when unsupported: most runs do not quantize. The
    # reason is in `vllm-myops doctor` and in the error a --quantization
    # myops_w4a16 load raises.
    return status
