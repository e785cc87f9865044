# SPDX-License-Identifier: Apache-2.0
"""``vllm-myops stats DIR``: the counters vLLM's processes wrote to
MYOPS_STATS_DIR, summed, and the verdict."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_parser(subparsers: Any) -> None:
    ap = subparsers.add_parser(
        "stats",
        help="per-provider call counters of a server (MYOPS_STATS_DIR)",
        description="Sum the counters vLLM's processes wrote to MYOPS_STATS_DIR.",
    )
    ap.add_argument("dir", help="the MYOPS_STATS_DIR the server ran with")
    ap.add_argument("--json", action="store_true")
    ap.set_defaults(run=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from vllm_myops.observability.stats_files import read_stats, verdict

    s = read_stats(args.dir)
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    ok, lines = verdict(s)
    print(f"{len(s['processes'])} process(es) wrote counters to {args.dir}")
    print("\n".join(lines))
    return 0 if ok else 1
