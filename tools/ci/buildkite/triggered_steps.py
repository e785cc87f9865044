#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Prints which Buildkite steps a set of changed files triggers.

The rules are those of vLLM's ci-infra pipeline generator:

1. run-all: if a changed file matches one of ``run_all_patterns`` in
   .buildkite/ci_config.yaml (``re.match``, from the start of the path) and
   none of ``run_all_exclude_patterns``, every step runs. ``RUN_ALL=1`` or
   ``--run-all`` forces it (vLLM's ``ready-run-all-tests`` label).
2. otherwise a step without ``source_file_dependencies`` runs on every change;
   a step with them runs when a changed file starts with one of its entries
   (an entry with a leading ``!`` excludes the files it matches), or when its
   own job file (test_areas/*.yaml) changed.
3. ``optional: true`` steps are not started automatically even when
   triggered: they wait for a manual unblock (reported as MANUAL).

    git diff --name-only origin/main... | python -m tools.ci.buildkite.triggered_steps
    python -m tools.ci.buildkite.triggered_steps csrc/ops.h tests/kernels/test_x.py
    python -m tools.ci.buildkite.triggered_steps --json FILE...

Output (text): one line per triggered step, tab-separated:
``RUN|MANUAL  <key>  <label>  <reason>``, then a summary line.
Exit status 0 (also when nothing triggers).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from tools.ci.buildkite.validate_pipeline import Pipeline, Step, load_pipeline


@dataclass
class Trigger:
    key: str
    label: str
    file: str
    mode: str  # "RUN" or "MANUAL" (optional step: needs an unblock)
    reason: str


def run_all_reason(config: dict, changed: list[str]) -> str | None:
    """Why every step runs, or None."""
    if os.environ.get("RUN_ALL") == "1":
        return "RUN_ALL=1"
    include = [str(p) for p in config.get("run_all_patterns") or []]
    exclude = [str(p) for p in config.get("run_all_exclude_patterns") or []]
    for path in changed:
        hit = next((p for p in include if re.match(p, path)), None)
        if hit is None:
            continue
        if any(re.match(x, path) for x in exclude):
            continue
        return f"run_all: {path} matches run_all_patterns {hit!r}"
    return None


def step_reason(step: Step, changed: list[str]) -> str | None:
    """Why this step runs for these changes (without run-all), or None."""
    deps = step.data.get("source_file_dependencies")
    if not deps:
        return "no source_file_dependencies: runs on every change"
    include = [d for d in deps if not d.startswith("!")]
    exclude = [d[1:] for d in deps if d.startswith("!")]
    for path in changed:
        if path == step.file:
            return f"its job file {path} changed"
        if any(path.startswith(x) for x in exclude):
            continue
        hit = next((d for d in include if path.startswith(d)), None)
        if hit is not None:
            return f"{path} matches source_file_dependencies {hit!r}"
    return None


def triggered(
    pipe: Pipeline, changed: list[str], force_all: bool = False
) -> list[Trigger]:
    changed = [c.strip().removeprefix("./") for c in changed if c.strip()]
    everything = "--run-all" if force_all else run_all_reason(pipe.config, changed)
    out = []
    for step in pipe.steps:
        reason = everything or step_reason(step, changed)
        if reason is None:
            continue
        mode = "MANUAL" if step.optional else "RUN"
        out.append(Trigger(step.key, step.label, step.file, mode, reason))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="changed files (default: read stdin)")
    ap.add_argument(
        "--root", default=None, help="repo root (default: this script's repo)"
    )
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument("--run-all", action="store_true", help="force every step")
    args = ap.parse_args(argv)
    root = Path(args.root) if args.root else Path(__file__).resolve().parents[3]
    changed = list(args.files)
    if not changed and not sys.stdin.isatty():
        changed = [ln for ln in sys.stdin.read().splitlines() if ln.strip()]
    pipe = load_pipeline(root)
    if pipe.errors:
        for e in pipe.errors:
            print(f"ERROR {e}", file=sys.stderr)
        return 2
    steps = triggered(pipe, changed, args.run_all)
    if args.json:
        print(
            json.dumps(
                {"changed": changed, "steps": [asdict(s) for s in steps]}, indent=1
            )
        )
        return 0
    for s in steps:
        print(f"{s.mode}\t{s.key}\t{s.label}\t{s.reason}")
    manual = sum(s.mode == "MANUAL" for s in steps)
    print(
        f"{len(steps)} of {len(pipe.steps)} steps triggered by {len(changed)} changed "
        f"file(s) ({len(steps) - manual} run, {manual} optional waiting for unblock)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
