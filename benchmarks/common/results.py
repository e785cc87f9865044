# SPDX-License-Identifier: Apache-2.0
"""Benchmark results as JSON, with metadata, and the regression gate.

File layout (schema "vllm-myops-bench/1"):
    {"schema": ..., "benchmark": "layernorm", "metadata": {...},
     "config": {..., "key_fields": [...]}, "ceiling": {...},
     "records": [{<key fields>, "status": "ok", "median_us": ..., ...}, ...],
     "verdicts": [...]}

A record is one (case, implementation, timing method). `status` is "ok",
"wrong" (timed but failed the correctness check), "failed" (raised),
"missing" (not installed / not loadable) or "skipped"; `reason` says why.

Gate: `compare(old, new, threshold_pct)` matches records by key fields and
flags the gated implementation ("ours") when its median got slower by more
than threshold_pct, or when it was ok before and is not now. Run from the
command line on two saved files:
    python -m benchmarks.common.results old.json new.json --threshold 3
(exit 1 on a regression). One run's median jitters by 1-2%, so a threshold
under ~3% flags noise; for CI, re-run and require two consecutive failures.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

SCHEMA = "vllm-myops-bench/1"
REPO_ROOT = Path(__file__).resolve().parents[2]


def _command_output(cmd: list[str]) -> str | None:
    """stdout of cmd (run in the repo, stripped), or None if it fails."""
    try:
        out = subprocess.run(
            cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _git(*args: str) -> str | None:
    return _command_output(["git", *args])


def git_commit() -> dict[str, Any]:
    """HEAD and whether the tree is dirty. Env VLLM_MYOPS_GIT_COMMIT, when set,
    wins: a device machine's copy of the working tree may carry a .git that is
    older than the tree (the session's starting checkout), whose HEAD would
    name the wrong commit; the caller who knows the commit says it (dirty is
    then unknown, None)."""
    stated = os.environ.get("VLLM_MYOPS_GIT_COMMIT")
    if stated:
        return {"commit": stated, "dirty": None}
    commit = _git("rev-parse", "HEAD")
    dirty = None
    if commit:
        status = _git("status", "--porcelain", "--untracked-files=no")
        dirty = bool(status) if status is not None else None
    return {"commit": commit or "unknown", "dirty": dirty}


def source_hash(paths: Iterable[str] = ("csrc", "CMakeLists.txt")) -> str:
    """sha256 over the kernel sources (names + contents): identifies the
    version measured even where git is absent or the tree is dirty."""
    h = hashlib.sha256()
    files: list[Path] = []
    for p in paths:
        path = REPO_ROOT / p
        if path.is_dir():
            files.extend(sorted(f for f in path.rglob("*") if f.is_file()))
        elif path.is_file():
            files.append(path)
    for f in files:
        h.update(str(f.relative_to(REPO_ROOT)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def portable_arg(arg: str | os.PathLike[str]) -> str:
    """A command-line argument as it may be committed: an absolute path
    becomes repo-relative inside the repository and its file name outside
    it (an output folder, a cache), so results name no machine's layout."""
    arg = os.fspath(arg)
    if not arg.startswith("/"):
        return arg
    path = Path(arg)
    try:
        return str(path.resolve().relative_to(REPO_ROOT.resolve()))
    except ValueError:
        return path.name


def portable_argv(argv: list[str] | None = None) -> list[str]:
    return [portable_arg(a) for a in (sys.argv if argv is None else argv)]


def command_line() -> str:
    """The command that ran this process, as one would type it again
    (`python -m package.module ARGS` for a module run with -m)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    argv = portable_argv()
    head = ["-m", spec.name] if spec is not None and spec.name else argv[:1]
    return "python " + shlex.join([*head, *argv[1:]])


def metadata(device: torch.device | str | None = None) -> dict[str, Any]:
    device = torch.device(device) if device is not None else None
    meta: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"
        ),
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "git": git_commit(),
        "source_hash": source_hash(),
        "argv": portable_argv(),
        "command": command_line(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_threads": torch.get_num_threads(),
    }
    try:
        import triton  # noqa: PLC0415

        meta["triton"] = triton.__version__
    except Exception:  # noqa: BLE001  (optional)
        meta["triton"] = None
    if device is not None and device.type == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(device)
        meta.update(
            device=torch.cuda.get_device_name(device),
            compute_capability=f"{props.major}.{props.minor}",
            sm_count=props.multi_processor_count,
            l2_bytes=getattr(props, "L2_cache_size", None),
            total_memory=props.total_memory,
            driver=_nvidia_smi_field("driver_version"),
            clocks_sm_mhz=_nvidia_smi_field("clocks.sm"),
            clocks_max_sm_mhz=_nvidia_smi_field("clocks.max.sm"),
        )
    else:
        meta["device"] = _cpu_model_name()
    return meta


def _nvidia_smi_field(field: str) -> str | None:
    out = _command_output(
        ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"]
    )
    return out.splitlines()[0] if out else None


def _cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


# ---------------------------------------------------------------------------
# Save / load
# ---------------------------------------------------------------------------


def _jsonable(x: Any) -> Any:
    if isinstance(x, torch.dtype):
        return str(x).replace("torch.", "")
    if isinstance(x, (set, tuple)):
        return list(x)
    if isinstance(x, float) and x != x:  # NaN -> null (valid JSON)
        return None
    if hasattr(x, "to_dict"):
        return x.to_dict()
    return str(x)


def _clean(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return _clean(_jsonable(obj))


def save_results(
    path: str | os.PathLike[str],
    benchmark: str,
    records: Sequence[dict[str, Any]],
    *,
    meta: dict[str, Any],
    config: dict[str, Any],
    **extra: Any,
) -> None:
    doc = {
        "schema": SCHEMA,
        "benchmark": benchmark,
        "metadata": meta,
        "config": config,
        **extra,
        "records": list(records),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(_clean(doc), indent=1) + "\n")
    tmp.replace(path)


def load_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    doc = json.loads(Path(path).read_text())
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {doc.get('schema')!r}, expected {SCHEMA!r}")
    return doc


# ---------------------------------------------------------------------------
# Regression gate
# ---------------------------------------------------------------------------


def case_fields(doc: dict[str, Any]) -> list[str]:
    """The fields that name a case (the benchmark's config.key_fields, "impl"
    left out): records of different implementations of one case share them."""
    fields = [f for f in doc.get("config", {}).get("key_fields") or [] if f != "impl"]
    if not fields:
        raise ValueError("no key_fields to match records on")
    return fields


def records_by_impl(
    doc: dict[str, Any], fields: Sequence[str]
) -> dict[str, dict[tuple[Any, ...], dict[str, Any]]]:
    """{impl: {case key: record}}, the case key being the values of `fields`."""
    out: dict[str, dict[tuple[Any, ...], dict[str, Any]]] = {}
    for r in doc.get("records", []):
        out.setdefault(str(r.get("impl")), {})[tuple(r.get(f) for f in fields)] = r
    return out


def compare(
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    threshold_pct: float = 3.0,
    gate_impl: str = "ours",
    key_fields: Sequence[str] | None = None,
    value: str = "median_us",
    out: Any = sys.stdout,
) -> list[tuple[Any, ...]]:
    """Prints per-case deltas of `gate_impl` and returns the regressed keys.

    key_fields default to new["config"]["key_fields"]; records of other
    implementations are ignored (baselines may move with their own versions).
    """
    fields = [f for f in key_fields if f != "impl"] if key_fields else case_fields(new)
    old_i = records_by_impl(old, fields).get(gate_impl, {})
    new_i = records_by_impl(new, fields).get(gate_impl, {})
    regressed: list[tuple[Any, ...]] = []
    print(
        f"regression gate: {gate_impl} {value}, threshold +{threshold_pct:.1f}% "
        f"(old {old['metadata'].get('git', {}).get('commit', '?')[:12]} "
        f"{old['metadata'].get('date', '?')}; new {new['metadata'].get('git', {}).get('commit', '?')[:12]} "
        f"{new['metadata'].get('date', '?')})",
        file=out,
    )
    if old["metadata"].get("device") != new["metadata"].get("device"):
        print(
            f"  WARNING: different devices: {old['metadata'].get('device')!r} vs "
            f"{new['metadata'].get('device')!r}",
            file=out,
        )
    for key, nr in new_i.items():
        label = " ".join(f"{f}={v}" for f, v in zip(fields, key))
        orr = old_i.get(key)
        if orr is None:
            print(f"  {label}: new case (no baseline)", file=out)
            continue
        ok_old, ok_new = orr.get("status") == "ok", nr.get("status") == "ok"
        if ok_old and not ok_new:
            print(
                f"  {label}: was ok, now {nr.get('status')}: {nr.get('reason')}  <-- REGRESSION",
                file=out,
            )
            regressed.append(key)
            continue
        if not (ok_old and ok_new) or orr.get(value) is None or nr.get(value) is None:
            print(
                f"  {label}: not comparable ({orr.get('status')} -> {nr.get('status')})",
                file=out,
            )
            continue
        delta = (nr[value] / orr[value] - 1.0) * 100.0
        flag = "  <-- REGRESSION" if delta > threshold_pct else ""
        print(
            f"  {label}: {orr[value]:.2f} -> {nr[value]:.2f} us ({delta:+.1f}%){flag}",
            file=out,
        )
        if delta > threshold_pct:
            regressed.append(key)
    for key in sorted(old_i.keys() - new_i.keys(), key=str):
        label = " ".join(f"{f}={v}" for f, v in zip(fields, key))
        print(f"  {label}: in old only (not measured now)", file=out)
    n = len(regressed)
    print(
        f"regression gate: {'FAIL' if n else 'PASS'} ({n} regression{'s' if n != 1 else ''} "
        f"over {len(new_i)} cases)",
        file=out,
    )
    return regressed


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Compare two saved benchmark JSON files.")
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument(
        "--threshold", type=float, default=3.0, help="percent slowdown allowed"
    )
    ap.add_argument("--impl", default="ours", help="implementation to gate on")
    args = ap.parse_args(argv)
    regressed = compare(
        load_results(args.old),
        load_results(args.new),
        threshold_pct=args.threshold,
        gate_impl=args.impl,
    )
    return 1 if regressed else 0


if __name__ == "__main__":
    sys.exit(main())
