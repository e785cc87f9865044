# SPDX-License-Identifier: Apache-2.0
"""``vllm-myops``: the front door.

vllm-myops serve [--model DIR] [vLLM args...]   the main job (vllm_myops.serve)
vllm-myops doctor [--json] [--ir-op-priority JSON]
vllm-myops stats DIR [--json]                    counters of a server run
vllm-myops pr-body [...]                         (vllm_myops.pr_body)
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
from typing import Any

RECOMMENDED_PRIORITY = {"rms_norm": ["myops"], "fused_add_rms_norm": ["myops"]}


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
    import torch

    from vllm_myops import _extension

    rep: dict[str, Any] = {
        "loaded": _extension.is_available(),
        "error": _extension.load_error(),
        "build_info": _extension.build_info(),
    }
    if rep["loaded"]:
        from vllm_myops import _custom_ops

        rep["cpu_kernel_isa"] = _custom_ops.cpu_kernel_isa()
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        rep["kernels"] = {
            op: [k for k in ("CPU", "CUDA") if has(f"_myops_C::{op}", k)]
            for op in ("rms_norm", "fused_add_rms_norm")
        }
    return rep


def _entry_point_report() -> dict[str, Any]:
    import os
    from importlib.metadata import entry_points

    eps = [e for e in entry_points(group="vllm.general_plugins") if e.name == "myops"]
    allowed = os.environ.get("VLLM_PLUGINS")
    return {
        "entry_point": eps[0].value if eps else None,
        "VLLM_PLUGINS": allowed,
        "loaded_by_vllm": bool(eps)
        and (allowed is None or "myops" in [p.strip() for p in allowed.split(",")]),
    }


def _platform_defaults(ir_ops: Any) -> dict[str, dict[str, Any]]:
    """vLLM's platform default priority for our ops (eager and compiled)."""
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
            out[label] = {
                "rms_norm": list(d.rms_norm),
                "fused_add_rms_norm": list(d.fused_add_rms_norm),
            }
        except Exception as e:
            out[label] = {"error": f"{type(e).__name__}: {e}"}
    return out


def _sample_args(op_name: str, device: str) -> dict[str, tuple[Any, ...]]:
    import torch

    dt = torch.bfloat16
    x = torch.randn(4, 4096, dtype=dt, device=device)
    w = torch.ones(4096, dtype=dt, device=device)
    if op_name == "rms_norm":
        qkv = torch.randn(4, 768, dtype=dt, device=device)
        q = qkv[:, :256].view(4, 4, 64)  # Qwen3-style per-head view, strided
        return {
            "bf16 [4,4096] + weight": (x, w, 1e-6),
            "bf16 q-head view [4,4,64] stride (768,64,1)": (
                q,
                torch.ones(64, dtype=dt, device=device),
                1e-6,
            ),
            "variance_size=2048": (x, w, 1e-6, 2048),
            "weight fp32, x bf16": (x, w.float(), 1e-6),
        }
    r = torch.randn_like(x)
    return {
        "bf16 [4,4096] + weight": (x, r, w, 1e-6),
        "variance_size=2048": (x, r, w, 1e-6, 2048),
    }


def _choice_report(priority: dict[str, list[str]]) -> dict[str, Any]:
    """Which provider vLLM would dispatch to, for the given user priority
    (plus the platform default vLLM appends) and a few typical arguments."""
    from vllm import ir
    from vllm.platforms import current_platform

    import vllm_myops

    vllm_myops.register()
    from vllm_myops.plugin import STATUS

    defaults = _platform_defaults(ir.ops)
    device = "cuda" if current_platform.is_cuda() else "cpu"
    rep: dict[str, Any] = {
        "plugin_status": dict(STATUS),
        "platform": str(current_platform.device_type),
        "platform_default_priority": defaults,
        "ops": {},
    }
    eager_default: dict[str, Any] = defaults.get("eager", {})
    for name in ("rms_norm", "fused_add_rms_norm"):
        op = getattr(ir.ops, name)
        impl = op.impls.get("myops")
        entry: dict[str, Any] = {
            "providers": {p: bool(i.supported) for p, i in op.impls.items()},
            "myops_registered": impl is not None,
        }
        user = list(priority.get(name, []))
        tail = [p for p in eager_default.get(name, ["native"]) if p not in user]
        final = [p for p in user + tail if p in op.impls]
        entry["priority_given"] = user
        entry["priority_final"] = final
        picks = {}
        try:
            with op.set_priority(final):
                entry["priority_effective"] = op.get_priority()
                for label, args in _sample_args(name, device).items():
                    picks[label] = op.dispatch(*args).provider
        except Exception as e:
            picks["error"] = f"{type(e).__name__}: {e}"
        entry["dispatch"] = picks
        rep["ops"][name] = entry
    return rep


def doctor(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="vllm-myops doctor",
        description="Report versions, kernels and vLLM's provider choice.",
    )
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    ap.add_argument(
        "--ir-op-priority",
        default=json.dumps(RECOMMENDED_PRIORITY),
        help="priority to evaluate (JSON, like vLLM's flag); default: myops first",
    )
    args = ap.parse_args(argv)
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
        return 1
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
    return 0


def stats(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="vllm-myops stats",
        description="Sum the counters vLLM's processes wrote to MYOPS_STATS_DIR.",
    )
    ap.add_argument("dir", help="the MYOPS_STATS_DIR the server ran with")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    from vllm_myops.observability import read_stats, verdict

    s = read_stats(args.dir)
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    ok, lines = verdict(s)
    print(f"{len(s['processes'])} process(es) wrote counters to {args.dir}")
    print("\n".join(lines))
    return 0 if ok else 1


def pr_body(argv: list[str]) -> int:
    try:
        mod = importlib.import_module("vllm_myops.pr_body")
    except ModuleNotFoundError as e:
        if e.name in ("vllm_myops.pr_body",):
            print(
                "vllm-myops pr-body: this installation has no vllm_myops.pr_body "
                "module (it is not part of this build)",
                file=sys.stderr,
            )
            return 2
        raise
    rc = mod.main(argv)
    return int(rc or 0)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {
        "serve": "serve a model with our kernels, ask it, show the evidence, stop",
        "doctor": "versions, built kernels, and which provider vLLM will pick",
        "stats": "per-provider RMSNorm call counters of a server (MYOPS_STATS_DIR)",
        "pr-body": "write the pull-request body (vllm_myops.pr_body)",
    }
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: vllm-myops {serve,doctor,stats,pr-body} [args]\n")
        for c, h in commands.items():
            print(f"  {c:<8} {h}")
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "serve":
        from vllm_myops.serve import main as serve_main

        return serve_main(rest)
    if cmd == "doctor":
        return doctor(rest)
    if cmd == "stats":
        return stats(rest)
    if cmd == "pr-body":
        return pr_body(rest)
    print(
        f"vllm-myops: unknown command {cmd!r} (one of: {', '.join(commands)})",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
