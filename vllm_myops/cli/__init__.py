# SPDX-License-Identifier: Apache-2.0
"""``vllm-myops``: the front door.

vllm-myops serve [--model DIR | --tiny ARCH] [--families LIST]
                 [--native | --compare-native] [vLLM args...]
                                  the main job (cli/serve.py; default model SmolLM2,
                                  all three families)
vllm-myops doctor [--json] [--ir-op-priority JSON]
vllm-myops stats DIR [--json]     counters of a server run
vllm-myops quantize MODEL OUT [--group-size N] [--sym|--asym] [--act-order]
                                  a 4-bit GPTQ-format checkpoint (RTN)
"""

from __future__ import annotations

import argparse

from vllm_myops.cli import doctor, quantize, serve, stats


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="vllm-myops", description="vLLM with the vllm-myops kernels."
    )
    sub = ap.add_subparsers(dest="command", metavar="{serve,doctor,stats,quantize}")
    sub.required = True
    for command in (serve, doctor, stats, quantize):
        command.add_parser(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args, extra = ap.parse_known_args(argv)
    if extra and not getattr(args, "passes_extra_args", False):
        ap.error(f"unrecognized arguments: {' '.join(extra)}")
    return int(args.run(args, extra))
