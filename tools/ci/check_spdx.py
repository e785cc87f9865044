#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that source files carry the SPDX licence header.

Every .py/.pyi/.sh/.c/.cc/.cpp/.cu/.cuh/.h/.hpp/.yaml/.yml file must contain
``SPDX-License-Identifier: Apache-2.0`` within its first lines (after a
shebang or an encoding line, if any).

    python -m tools.ci.check_spdx                 # every such file in the repo
    python -m tools.ci.check_spdx FILE...         # just these (pre-commit)
    python -m tools.ci.check_spdx --fix [FILE...] # insert the header where missing

Files to check come from ``git ls-files`` (tracked plus untracked, not
ignored) when no FILE is given; build outputs and virtualenvs are skipped.
Empty files (e.g. an empty ``__init__.py``) have nothing to license and are
skipped. Exit status: 0 all good (or all fixed), 1 missing headers.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tools.ci.repo_files import repo_files as list_repo_files

LICENSE_ID = "Apache-2.0"
TAG = f"SPDX-License-Identifier: {LICENSE_ID}"
HEAD_LINES = 5  # the tag must appear in this many first lines

HASH_COMMENT = {".py", ".pyi", ".sh", ".yaml", ".yml"}
SLASH_COMMENT = {".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp"}
EXTENSIONS = HASH_COMMENT | SLASH_COMMENT
SKIP_DIRS = {".git", ".venv", "venv", "build", "dist", "__pycache__", ".cache"}


def comment_prefix(path: Path) -> str | None:
    ext = path.suffix.lower()
    if ext in HASH_COMMENT:
        return "#"
    if ext in SLASH_COMMENT:
        return "//"
    return None


def header_line(path: Path) -> str:
    prefix = comment_prefix(path)
    if prefix is None:
        raise ValueError(f"{path}: no comment syntax known for {path.suffix!r}")
    return f"{prefix} {TAG}\n"


def is_skipped(rel: str) -> bool:
    parts = Path(rel).parts
    return any(p in SKIP_DIRS or p.endswith(".egg-info") for p in parts[:-1])


def repo_files(root: Path) -> list[Path]:
    """Tracked and untracked-but-not-ignored files (os.walk without git)."""
    return [root / r for r in list_repo_files(root, SKIP_DIRS) if not is_skipped(r)]


def has_header(text: str) -> bool:
    return any(TAG in line for line in text.splitlines()[:HEAD_LINES])


def insert_header(text: str, path: Path) -> str:
    """The text with the header inserted after a shebang/encoding line."""
    lines = text.splitlines(keepends=True)
    i = 0
    if lines and lines[0].startswith("#!"):
        i = 1
    if (
        comment_prefix(path) == "#"
        and len(lines) > i
        and lines[i].startswith("#")
        and "coding" in lines[i]
    ):
        i += 1
    if i and not lines[i - 1].endswith("\n"):
        lines[i - 1] += "\n"
    lines.insert(i, header_line(path))
    return "".join(lines)


def check(paths: list[Path], fix: bool) -> list[Path]:
    """Paths still missing the header (after fixing, if fix)."""
    missing = []
    for path in paths:
        if path.suffix.lower() not in EXTENSIONS or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if not text.strip() or has_header(text):
            continue
        if fix:
            path.write_text(insert_header(text, path), encoding="utf-8")
            print(f"added SPDX header: {path}")
        else:
            missing.append(path)
    return missing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="files to check (default: the repo)")
    ap.add_argument("--fix", action="store_true", help="insert missing headers")
    ap.add_argument("--root", default=None, help="repo root (default: cwd)")
    args = ap.parse_args(argv)
    root = Path(args.root or os.getcwd()).resolve()
    paths = [Path(f) for f in args.files] if args.files else repo_files(root)
    missing = check(paths, args.fix)
    for path in missing:
        print(f"{path}: missing '{header_line(path).strip()}' in its first lines")
    if missing:
        print(
            f"{len(missing)} file(s) without the SPDX header; "
            "run `python -m tools.ci.check_spdx --fix` to add it."
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
