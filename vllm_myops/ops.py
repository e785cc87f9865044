# SPDX-License-Identifier: Apache-2.0
"""The registry: every op family and op vllm_myops ships, in one place.

Everything that is not a family's own code (the plugin, observability, the
CLI, the test harness) derives its op lists from here, so adding a family
means a ``Family`` entry, its ``OpSpec`` entries and its folder.

Data only: importing this module imports neither torch nor vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass

PROVIDER = "myops"
NATIVE = "native"

# How an op plugs into vLLM (OpSpec.hook.kind).
HOOK_VLLM_IR = "vllm.ir"  # a provider of vllm.ir.ops.<target>
HOOK_QUANTIZATION = "quantization_config"  # register_quantization_config(target)
HOOK_ATTENTION = "attention_backend"  # register_backend(target, ...)


@dataclass(frozen=True)
class Hook:
    kind: str  # one of the HOOK_* names
    target: str  # the name vLLM knows it by within that kind


@dataclass(frozen=True)
class Family:
    name: str  # its folder, vllm_myops/<name>/
    title: str  # what users call its ops in messages
    registration: str  # module whose register(context) plugs the family in
    # Module whose sample_calls(op_name, device) gives `vllm-myops doctor`
    # typical arguments to dispatch, or None.
    doctor_calls: str | None = None
    # Its name on the command line (`vllm-myops serve --families`); default
    # the folder name.
    short: str = ""

    @property
    def cli_name(self) -> str:
        return self.short or self.name


@dataclass(frozen=True)
class OpSpec:
    name: str
    family: str
    hook: Hook
    kernels: tuple[str, ...]  # torch.ops._myops_C names the op calls
    providers: tuple[str, ...] = (PROVIDER, NATIVE)  # counted per call
    # Index, in what the op returns, of the output whose rows are counted
    # (ignored when it returns a single tensor).
    counted_output: int = 0


FAMILIES: tuple[Family, ...] = (
    Family(
        name="layernorm",
        title="RMSNorm",
        short="rmsnorm",
        registration="vllm_myops.layernorm.registration",
        doctor_calls="vllm_myops.layernorm.doctor_calls",
    ),
    Family(
        name="quantization",
        title="W4A16 GEMM",
        short="w4a16",
        registration="vllm_myops.quantization.registration",
    ),
    Family(
        name="attention",
        title="paged attention",
        short="attention",
        registration="vllm_myops.attention.registration",
    ),
)

OPS: tuple[OpSpec, ...] = (
    OpSpec(
        name="rms_norm",
        family="layernorm",
        hook=Hook(HOOK_VLLM_IR, "rms_norm"),
        kernels=("rms_norm",),
    ),
    OpSpec(
        name="fused_add_rms_norm",
        family="layernorm",
        hook=Hook(HOOK_VLLM_IR, "fused_add_rms_norm"),
        kernels=("fused_add_rms_norm",),
    ),
    # Every linear layer of `--quantization myops_w4a16`. Only ours is
    # counted: a layer we claimed has no other path in vLLM to fall back to.
    OpSpec(
        name="w4a16_linear",
        family="quantization",
        hook=Hook(HOOK_QUANTIZATION, "myops_w4a16"),
        kernels=("w4a16_gemm", "w4a16_repack"),
        providers=(PROVIDER,),
    ),
    # Every attention layer's forward of `--attention-backend CUSTOM` (a KV
    # write and the attention over the batch; rows = tokens). Only ours is
    # counted: vLLM's own backends are not ops of ours.
    OpSpec(
        name="paged_attention",
        family="attention",
        hook=Hook(HOOK_ATTENTION, "CUSTOM"),
        kernels=("paged_kv_write", "paged_attention"),
        providers=(PROVIDER,),
    ),
)


def family(name: str) -> Family:
    for f in FAMILIES:
        if f.name == name:
            return f
    raise KeyError(f"no op family {name!r}")


def op(name: str) -> OpSpec:
    for o in OPS:
        if o.name == name:
            return o
    raise KeyError(f"no op {name!r}")


def family_by_cli_name(name: str) -> Family:
    """A family by its command-line name or its folder name."""
    for f in FAMILIES:
        if name in (f.cli_name, f.name):
            return f
    known = ", ".join(f.cli_name for f in FAMILIES)
    raise KeyError(f"no op family {name!r} (known: {known})")


def ops_of(family_name: str) -> tuple[OpSpec, ...]:
    return tuple(o for o in OPS if o.family == family_name)


def ops_with_hook(kind: str) -> tuple[OpSpec, ...]:
    return tuple(o for o in OPS if o.hook.kind == kind)


def kernel_names(specs: tuple[OpSpec, ...] = OPS) -> tuple[str, ...]:
    """The _myops_C ops the given ops call, each once, in registry order."""
    return tuple(dict.fromkeys(k for o in specs for k in o.kernels))


def hook_cli_args(hook: Hook) -> list[str]:
    """The vLLM command-line arguments that select one op's hook. vllm.ir
    ops have none of their own: one --ir-op-priority names them all
    (ir_op_priority)."""
    if hook.kind == HOOK_QUANTIZATION:
        return ["--quantization", hook.target]
    if hook.kind == HOOK_ATTENTION:
        return ["--attention-backend", hook.target]
    return []


def ir_op_priority(provider: str) -> dict[str, list[str]]:
    """A vLLM ``--ir-op-priority`` value naming ``provider`` for every
    vllm.ir op of the registry."""
    return {o.hook.target: [provider] for o in ops_with_hook(HOOK_VLLM_IR)}
