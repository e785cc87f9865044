# SPDX-License-Identifier: Apache-2.0
"""``vllm-myops doctor``: versions, built kernels, and which provider vLLM
will pick for each op of the registry."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
from typing import Any

from vllm_myops import ops


def _versions() -> dict[str, Any]:
    import torch

    from vllm_myops import __version__
    from vllm_myops.plugin import MAX_VLLM, MIN_VLLM, version_message, vllm_version

    v = vllm_version()
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}",
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "vllm": v,
        "vllm_supported_range": f"{MIN_VLLM[0]}.{MIN_VLLM[1]}-{MAX_VLLM[0]}.{MAX_VLLM[1]}",
        "vllm_version_note": version_message(v) or "supported",
        "vllm_myops": __version__,
    }
    try:
        if torch.cuda.is_available():
            info["gpus"] = [
                f"{torch.cuda.get_device_name(i)} (sm_{''.join(map(str, torch.cuda.get_device_capability(i)))})"
                for i in range(torch.cuda.device_count())
            ]
    except Exception as e:
        info["gpus"] = f"query failed: {e}"
    return info


def _extension_report() -> dict[str, Any]:
    from vllm_myops import _extension

    rep: dict[str, Any] = {
        "loaded": _extension.is_available(),
        "error": _extension.load_error(),
        "build_info": _extension.build_info(),
    }
    if rep["loaded"]:
        from vllm_myops import _custom_ops
        from vllm_myops.platform import kernel_dispatch_keys

        rep["cpu_kernel_isa"] = _custom_ops.cpu_kernel_isa()
        rep["kernels"] = {k: kernel_dispatch_keys(k) for k in ops.kernel_names()}
    return rep


def _entry_point_report() -> dict[str, Any]:
    from importlib.metadata import entry_points

    eps = [e for e in entry_points(group="vllm.general_plugins") if e.name == "myops"]
    allowed = os.environ.get("VLLM_PLUGINS")
    return {
        "entry_point": eps[0].value if eps else None,
        "VLLM_PLUGINS": allowed,
        "loaded_by_vllm": bool(eps)
        and (allowed is None or "myops" in [p.strip() for p in allowed.split(",")]),
    }


def _platform_defaults(specs: tuple[ops.OpSpec, ...]) -> dict[str, dict[str, Any]]:
    """vLLM's platform default priority for our IR ops (eager and compiled)."""
    from types import SimpleNamespace

    from vllm.config.compilation import CompilationMode
    from vllm.platforms import current_platform

    out: dict[str, dict[str, Any]] = {}
    for label, mode in (
        ("eager", CompilationMode.NONE),
        ("compiled", CompilationMode.VLLM_COMPILE),
    ):
        cfg = SimpleNamespace(
            compilation_config=SimpleNamespace(backend="inductor", mode=mode)
        )
        try:
            d = current_platform.get_default_ir_op_priority(cfg)
            out[label] = {s.hook.target: list(getattr(d, s.hook.target)) for s in specs}
        except Exception as e:
            out[label] = {"error": f"{type(e).__name__}: {e}"}
    return out


def _sample_calls(spec: ops.OpSpec, device: str) -> dict[str, tuple[Any, ...]]:
    module = ops.family(spec.family).doctor_calls
    if module is None:
        return {}
    calls: dict[str, tuple[Any, ...]] = importlib.import_module(module).sample_calls(
        spec.name, device
    )
    return calls


def _choice_report(priority: dict[str, list[str]]) -> dict[str, Any]:
    """Which provider vLLM would dispatch to, for the given user priority
    (plus the platform default vLLM appends) and a few typical arguments."""
    from vllm import ir
    from vllm.platforms import current_platform

    import vllm_myops

    vllm_myops.register()
    from vllm_myops.plugin import STATUS

    specs = ops.ops_with_hook(ops.HOOK_VLLM_IR)
    defaults = _platform_defaults(specs)
    device = "cuda" if current_platform.is_cuda() else "cpu"
    rep: dict[str, Any] = {
        "plugin_status": dict(STATUS),
        "platform": str(current_platform.device_type),
        "platform_default_priority": defaults,
        "ops": {},
    }
    eager_default: dict[str, Any] = defaults.get("eager", {})
    for spec in specs:
        name = spec.hook.target
        op = getattr(ir.ops, name)
        impl = op.impls.get(ops.PROVIDER)
        entry: dict[str, Any] = {
            "providers": {p: bool(i.supported) for p, i in op.impls.items()},
            "myops_registered": impl is not None,
        }
        user = list(priority.get(name, []))
        tail = [p for p in eager_default.get(name, [ops.NATIVE]) if p not in user]
        final = [p for p in user + tail if p in op.impls]
        entry["priority_given"] = user
        entry["priority_final"] = final
        picks = {}
        try:
            with op.set_priority(final):
                entry["priority_effective"] = op.get_priority()
                for label, args in _sample_calls(spec, device).items():
                    picks[label] = op.dispatch(*args).provider
        except Exception as e:
            picks["error"] = f"{type(e).__name__}: {e}"
        entry["dispatch"] = picks
        rep["ops"][name] = entry
    return rep


def add_parser(subparsers: Any) -> None:
    ap = subparsers.add_parser(
        "doctor",
        help="versions, built kernels, and which provider vLLM will pick",
        description="Report versions, kernels and vLLM's provider choice.",
    )
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    ap.add_argument(
        "--ir-op-priority",
        default=json.dumps(ops.ir_op_priority(ops.PROVIDER)),
        help="priority to evaluate (JSON, like vLLM's flag); default: myops first",
    )
    ap.set_defaults(run=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    report: dict[str, Any] = {
        "versions": _versions(),
        "extension": _extension_report(),
        "plugin": _entry_point_report(),
    }
    try:
        report["vllm_ir"] = _choice_report(json.loads(args.ir_op_priority))
    except Exception as e:
        report["vllm_ir"] = {"error": f"{type(e).__name__}: {e}"}
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return 0
    _print_report(report)
    return 1 if "error" in report["vllm_ir"] else 0


def _print_report(report: dict[str, Any]) -> None:
    v, ext, plug, irr = (
        report["versions"],
        report["extension"],
        report["plugin"],
        report["vllm_ir"],
    )
    print("vllm-myops doctor")
    print(
        f"  python {v['python']} ({v['machine']}), torch {v['torch']} (CUDA {v['torch_cuda']})"
    )
    if v.get("gpus"):
        print(f"  GPUs: {v['gpus']}")
    print(
        f"  vLLM {v['vllm']}: {v['vllm_version_note']} (supported {v['vllm_supported_range']})"
    )
    print(f"  vllm-myops {v['vllm_myops']}")
    print("extension vllm_myops._myops_C")
    if ext["loaded"]:
        bi = ext["build_info"]
        print(
            f"  loaded; built for target={bi.get('target_device')}, cuda_archs="
            f"{bi.get('cuda_archs') or '-'}, sm90a={bi.get('sm90a_archs') or '-'}, "
            f"cpu_isas={bi.get('cpu_isas') or '-'}"
        )
        print(f"  CPU kernels run with ISA: {ext.get('cpu_kernel_isa')}")
        for op, keys in ext.get("kernels", {}).items():
            print(f"  {op}: kernels for {', '.join(keys) or 'nothing'}")
    else:
        print(f"  NOT loaded: {ext['error']}")
    print("plugin")
    print(
        f"  entry point vllm.general_plugins:myops -> {plug['entry_point']}; "
        f"VLLM_PLUGINS={plug['VLLM_PLUGINS']!r}; loaded by vLLM: {plug['loaded_by_vllm']}"
    )
    if "error" in irr:
        print(f"vLLM IR: {irr['error']}")
        return
    st = irr["plugin_status"]
    print(
        f"  register(): registered={st['registered']}, supported={st['supported']} ({st['reason']})"
    )
    print(
        f"vLLM IR on platform {irr['platform']} (platform default priority: "
        f"{irr['platform_default_priority']})"
    )
    for name, op_rep in irr["ops"].items():
        used = op_rep.get("priority_effective", op_rep["priority_final"])
        print(f"  {name}: providers {op_rep['providers']}")
        print(f"    priority {op_rep['priority_given']} -> vLLM uses {used}")
        for label, prov in op_rep["dispatch"].items():
            print(f"    {label:<46} -> {prov}")
