# SPDX-License-Identifier: Apache-2.0
"""The README's performance tables, generated from the committed gate
baselines (benchmarks/results/baselines/<device>/*.json), so a number in the
README can never disagree with its JSON.

    python -m tools.readme_tables            # rewrite the README's tables
    python -m tools.readme_tables --check    # exit 1 if the README is stale (CI)

The README holds the generated text between ``<!-- perf-tables:begin -->``
and ``<!-- perf-tables:end -->``. Which cases a table shows is data
(TABLES below): a few per family, the ones the family's targets name; every
case is in the JSON and in docs/<family>/design.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BASELINES = ROOT / "benchmarks" / "results" / "baselines"
BEGIN = "<!-- perf-tables:begin -->"
END = "<!-- perf-tables:end -->"

Record = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Table:
    """One README table: the cases of some baseline files of a device."""

    title: str
    files: tuple[str, ...]  # baseline file stems, read in this order
    key: tuple[str, ...]  # the record fields that name a case
    label: Callable[[Record], str]  # a case's first column
    cases: tuple[tuple[Any, ...], ...]  # the key values shown, in order
    anchors: dict[str, str]  # impl -> column name, in column order
    extra: Callable[[Record, Record | None], str] | None = None  # ours, floor
    extra_name: str = ""


def _pct_floor(ours: Record, floor: Record | None) -> str:
    if floor is None or not ours.get("median_us"):
        return ""
    return f"{100.0 * floor['median_us'] / ours['median_us']:.0f}%"


def _tflops(ours: Record, floor: Record | None) -> str:
    return f"{ours['tflops']:.0f}" if ours.get("tflops") else ""


def _gemm_cases(shapes: tuple[tuple[int, int], ...], ms: tuple[int, ...]) -> Any:
    return tuple((n, k, m) for n, k in shapes for m in ms)


TABLES: tuple[Table, ...] = (
    Table(
        title="RMSNorm (bf16)",
        files=("layernorm_bf16",),
        key=("op", "rows", "hidden"),
        label=lambda r: f"{r['op']} {r['rows']} x {r['hidden']}",
        cases=(
            ("rms_norm", 1, 4096),
            ("rms_norm", 1024, 4096),
            ("rms_norm", 32768, 4096),
            ("rms_norm", 8192, 5125),
            ("rms_norm", 32768, 8192),
            ("fused_add_rms_norm", 1, 4096),
            ("fused_add_rms_norm", 8192, 4096),
            ("fused_add_rms_norm", 8192, 5125),
            ("fused_add_rms_norm", 32768, 8192),
        ),
        anchors={
            "compile": "torch.compile",
            "vllm": "vLLM",
            "liger": "Liger",
            "quack": "Quack",
        },
        extra=_pct_floor,
        extra_name="ours % of floor",
    ),
    Table(
        title="W4A16 GEMM (bf16, int4 symmetric, group 128)",
        files=("w4a16_bf16", "w4a16_bf16_large_m"),
        key=("n", "k", "m"),
        label=lambda r: f"{r['n']} x {r['k']}, M = {r['m']}",
        cases=_gemm_cases(
            ((28672, 4096), (4096, 14336)), (1, 4, 16, 64, 256, 1024, 4096)
        ),
        anchors={
            "marlin": "Marlin",
            "machete": "Machete",
            "mm": "cuBLAS bf16",
            "tinygemm": "tinygemm",
        },
        extra=_pct_floor,
        extra_name="ours % of weight floor",
    ),
    Table(
        title="Paged attention (bf16, block 16; heads q/kv x head dim)",
        files=("attention_bf16",),
        key=("kind", "heads", "batch", "ctx"),
        label=lambda r: f"{r['kind']} {r['heads']}, {r['batch']} x {r['ctx']}",
        cases=(
            ("decode", "32/8x128", 1, 1024),
            ("decode", "32/8x128", 1, 8192),
            ("decode", "32/8x128", 32, 1024),
            ("decode", "32/8x128", 32, 8192),
            ("decode", "32/8x128", 128, 8192),
            ("decode", "9/3x64", 32, 8192),
            ("prefill", "32/8x128", 1, 2048),
            ("prefill", "32/8x128", 1, 8192),
            ("prefill", "32/8x128", 4, 16384),
            ("prefill", "9/3x64", 4, 8192),
        ),
        anchors={"fa3": "FA3", "triton": "vLLM Triton", "sdpa": "SDPA (dense)"},
        extra=_tflops,
        extra_name="ours TFLOP/s",
    ),
)


def _us(r: Record | None) -> str:
    if r is None:
        return "—"
    if r.get("status") != "ok" or r.get("median_us") is None:
        return "—"
    v = float(r["median_us"])
    return f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def _load(
    device_dir: Path, t: Table
) -> tuple[dict[tuple[Any, ...], dict[str, Record]], list[str]]:
    """{case: {impl: record}} of the table's files, and their relative paths."""
    by_case: dict[tuple[Any, ...], dict[str, Record]] = {}
    paths = []
    for stem in t.files:
        path = device_dir / f"{stem}.json"
        if not path.is_file():
            continue
        paths.append(path.relative_to(ROOT).as_posix())
        for r in json.loads(path.read_text())["records"]:
            case = tuple(r.get(k) for k in t.key)
            by_case.setdefault(case, {})[r["impl"]] = r
    return by_case, paths


def _meta(path: str) -> str:
    m = json.loads((ROOT / path).read_text()).get("metadata", {})
    commit = (m.get("git") or {}).get("commit", "")[:7]
    date = str(m.get("date", ""))[:10]
    return f"{m.get('device', '?')}, {date}, commit {commit}"


def render_table(device_dir: Path, t: Table) -> list[str]:
    by_case, paths = _load(device_dir, t)
    if not paths:
        return []
    anchors = {
        i: n for i, n in t.anchors.items() if any(i in v for v in by_case.values())
    }
    head = ["case", "floor", "ours", *anchors.values(), "ours vs best anchor"]
    if t.extra:
        head.append(t.extra_name)
    lines = [
        f"**{t.title}** — median µs per call, cold L2; "
        + "; ".join(f"[`{p}`]({p}) ({_meta(p)})" for p in paths),
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for case in t.cases:
        impls = by_case.get(case)
        if not impls or "ours" not in impls:
            continue
        ours = impls["ours"]
        timed = {
            i: impls[i]["median_us"]
            for i in anchors
            if i in impls
            and impls[i].get("status") == "ok"
            and impls[i].get("median_us")
        }
        vs = ""
        if timed and ours.get("status") == "ok":
            best = min(timed, key=lambda i: timed[i])
            vs = f"{timed[best] / ours['median_us']:.2f}x ({anchors[best]})"
        row = [t.label(ours), _us(impls.get("floor")), _us(ours)]
        row += [_us(impls.get(i)) for i in anchors]
        row.append(vs)
        if t.extra:
            row.append(t.extra(ours, impls.get("floor")))
        lines.append("| " + " | ".join(row) + " |")
    return lines


def render() -> str:
    """The generated block (markers excluded)."""
    out = [
        "<!-- generated by `python -m tools.readme_tables` from the baselines; "
        "edit the tool, not this block -->",
        "",
        '"ours vs best anchor" > 1 means ours is faster; "floor" is the same '
        "bytes moved by an SM copy pass (benchmarks/results/README.md).",
    ]
    devices = (
        sorted(p for p in BASELINES.iterdir() if p.is_dir())
        if BASELINES.is_dir()
        else []
    )
    for device_dir in devices:
        out += ["", f"#### {device_dir.name.upper()}"]
        for t in TABLES:
            lines = render_table(device_dir, t)
            if lines:
                out += ["", *lines]
    return "\n".join(out) + "\n"


def splice(readme: str, block: str) -> str:
    try:
        a = readme.index(BEGIN) + len(BEGIN)
        b = readme.index(END, a)
    except ValueError:
        raise SystemExit(
            f"README.md: the markers {BEGIN} ... {END} are missing"
        ) from None
    return readme[:a] + "\n" + block + readme[b:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--check", action="store_true", help="exit 1 if the README is stale"
    )
    args = ap.parse_args(argv)
    old = README.read_text()
    new = splice(old, render())
    if args.check:
        if new != old:
            print(
                "README.md's performance tables differ from the baselines: run "
                "`python -m tools.readme_tables`",
                file=sys.stderr,
            )
            return 1
        return 0
    if new != old:
        README.write_text(new)
        print("README.md: performance tables regenerated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
