# SPDX-License-Identifier: Apache-2.0
"""The A/B table of a `tools/gpu/ab_build.sh bench` run: one row per case,
one column per tree (its medians, round by round), and each tree's time
relative to the reference tree (default `tree`, the working tree), as a
Markdown table for the family's log.

  python -m benchmarks.common.ab_table ab.tar.gz            # or its folder
  python -m benchmarks.common.ab_table ab.tar.gz --impl gather --ref pdlx

The input holds NAME_ROUND.json files (each a benchmark's saved results,
schema vllm-myops-bench/1). A case is named by the fields the file declares
(history.case_fields: config.key_fields), so any benchmark's runs compare
without knowing it. The ratio is the median of a tree's round
medians over the reference's; a case a tree did not time shows `-`.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import statistics
import sys
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common.history import case_fields

_NAME = re.compile(r"(?:^|/)([A-Za-z0-9_.-]+?)_(\d+)\.json$")


def _documents(path: Path) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(tree, round, results) for every NAME_ROUND.json in a folder or tarball."""
    if path.is_dir():
        for f in sorted(path.rglob("*.json")):
            m = _NAME.search(str(f))
            if m:
                yield m.group(1), int(m.group(2)), json.loads(f.read_text())
        return
    with tarfile.open(path) as tar:
        for member in sorted(tar.getmembers(), key=lambda x: x.name):
            m = _NAME.search(member.name)
            f = tar.extractfile(member) if member.isfile() else None
            if m and f is not None:
                yield m.group(1), int(m.group(2)), json.load(io.TextIOWrapper(f))


def collect(
    path: Path, impl: str
) -> tuple[list[str], dict[tuple[tuple[str, Any], ...], dict[str, list[float]]]]:
    """Trees in order of appearance and, per case, each tree's medians by round."""
    trees: list[str] = []
    cases: dict[tuple[tuple[str, Any], ...], dict[str, list[float]]] = {}
    for tree, _round, doc in sorted(_documents(path), key=lambda d: (d[1], d[0])):
        if tree not in trees:
            trees.append(tree)
        records = doc.get("records", [])
        fields = case_fields(doc, records)
        for r in records:
            if r.get("impl") != impl or r.get("status") != "ok":
                continue
            median = r.get("median_us")
            if median is None:
                continue
            key = tuple((f, r.get(f)) for f in fields)
            cases.setdefault(key, {}).setdefault(tree, []).append(float(median))
    return trees, cases


def table(path: Path, impl: str = "ours", ref: str = "tree") -> str:
    trees, cases = collect(path, impl)
    if not cases:
        raise ValueError(f"{path}: no timed records of impl {impl!r}")
    if ref not in trees:
        raise ValueError(f"{path}: no tree {ref!r} (trees: {', '.join(trees)})")
    others = [t for t in trees if t != ref]
    # Columns that vary between cases; the constant ones go to the title.
    first = next(iter(cases))
    names = [n for n, _ in first]
    varying = [
        i
        for i, _ in enumerate(names)
        if len({k[i][1] for k in cases if i < len(k)}) > 1
    ]
    fixed = ", ".join(
        f"{first[i][0]} {first[i][1]}" for i in range(len(first)) if i not in varying
    )
    head = [names[i] for i in varying] + [f"{t} µs" for t in [ref, *others]]
    head += [f"{t} / {ref}" for t in others]
    out = [
        f"{impl}, median µs per round ({fixed})"
        if fixed
        else f"{impl}, median µs per round"
    ]
    out += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, by_tree in cases.items():
        row = [str(key[i][1]) for i in varying]
        for t in [ref, *others]:
            row.append(" / ".join(f"{v:.2f}" for v in by_tree.get(t, [])) or "-")
        base = by_tree.get(ref)
        for t in others:
            mine = by_tree.get(t)
            row.append(
                f"{statistics.median(mine) / statistics.median(base):.3f}"
                if mine and base
                else "-"
            )
        out.append("| " + " | ".join(row) + " |")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "path", type=Path, help="ab.tar.gz of ab_build.sh bench, or its folder"
    )
    ap.add_argument(
        "--impl", default="ours", help="implementation to compare (default ours)"
    )
    ap.add_argument("--ref", default="tree", help="reference tree (default tree)")
    args = ap.parse_args(argv)
    try:
        print(table(args.path, args.impl, args.ref))
    except (ValueError, OSError, tarfile.TarError) as e:
        print(f"ab_table: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
