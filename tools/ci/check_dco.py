#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""DCO check: the commit message must carry a ``Signed-off-by:`` trailer.

vLLM (and this project) require the Developer Certificate of Origin sign-off,
``git commit -s``, on every commit.

    python -m tools.ci.check_dco MSGFILE            # commit-msg hook (pre-commit)
    python -m tools.ci.check_dco --range A..B       # every commit in a range (CI)
    python -m tools.ci.check_dco --fix MSGFILE      # append the sign-off of
                                                 # git config user.name/email

A valid trailer is a line ``Signed-off-by: Name <email@host>``. With
``--require-author`` the sign-off must match the commit author (range mode)
or ``git config user.name/user.email`` (message mode).
Exit status: 0 signed, 1 not signed, 2 usage or git error.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

SIGNOFF_RE = re.compile(
    r"^Signed-off-by: (?P<name>[^<>]+?) <(?P<email>[^<>@\s]+@[^<>\s]+)>\s*$"
)


def _strip_comments(message: str) -> list[str]:
    """Lines git would keep (commit-msg files carry '#' comment lines)."""
    lines = []
    for line in message.splitlines():
        if line.startswith("# ------------------------ >8"):
            break  # `git commit -v` scissors: the diff below is not message
        if line.startswith("#"):
            continue
        lines.append(line)
    return lines


def signoffs(message: str) -> list[tuple[str, str]]:
    """(name, email) of every well-formed Signed-off-by line."""
    out = []
    for line in _strip_comments(message):
        m = SIGNOFF_RE.match(line.strip())
        if m:
            out.append((m.group("name").strip(), m.group("email")))
    return out


def check_message(message: str, identity: tuple[str, str] | None = None) -> str | None:
    """None when signed (by identity, if given), else the reason."""
    found = signoffs(message)
    if not found:
        bad = [
            ln
            for ln in _strip_comments(message)
            if ln.lower().startswith("signed-off-by")
        ]
        if bad:
            return (
                f"malformed sign-off {bad[0]!r}: expected 'Signed-off-by: Name <email>'"
            )
        return "no 'Signed-off-by: Name <email>' line"
    if identity and identity not in found:
        return f"no sign-off by {identity[0]} <{identity[1]}> (found: {found})"
    return None


TRAILER_RE = re.compile(r"^[A-Za-z][A-Za-z0-9-]*: \S")


def append_signoff(message: str, ident: tuple[str, str]) -> str:
    """message with a sign-off trailer appended (in the trailer block if the
    message already ends with one, else after a blank line)."""
    body = message.rstrip("\n")
    lines = body.splitlines()
    in_trailers = bool(lines) and bool(TRAILER_RE.match(lines[-1])) and len(lines) > 1
    sep = "\n" if in_trailers else "\n\n"
    return f"{body}{sep}Signed-off-by: {ident[0]} <{ident[1]}>\n"


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], check=True, capture_output=True, text=True
    ).stdout


def git_identity() -> tuple[str, str] | None:
    try:
        name = _git("config", "user.name").strip()
        email = _git("config", "user.email").strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return (name, email) if name and email else None


def check_range(rev_range: str, require_author: bool) -> list[str]:
    """Problems, one line per unsigned commit in rev_range."""
    problems = []
    shas = _git("rev-list", "--no-merges", rev_range).split()
    for sha in shas:
        message = _git("log", "-1", "--format=%B", sha)
        author = None
        if require_author:
            name, email = (
                _git("log", "-1", "--format=%an%x00%ae", sha).strip().split("\0")
            )
            author = (name, email)
        why = check_message(message, author)
        if why:
            subject = message.splitlines()[0] if message else ""
            problems.append(f"{sha[:12]} {subject!r}: {why}")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("msgfile", nargs="?", help="commit message file (commit-msg hook)")
    ap.add_argument("--range", dest="rev_range", help="check every commit in A..B")
    ap.add_argument("--fix", action="store_true", help="append the sign-off to MSGFILE")
    ap.add_argument("--require-author", action="store_true")
    args = ap.parse_args(argv)

    if args.rev_range:
        try:
            problems = check_range(args.rev_range, args.require_author)
        except (OSError, subprocess.CalledProcessError) as e:
            print(f"check_dco: git failed: {e}", file=sys.stderr)
            return 2
        for p in problems:
            print(p)
        if problems:
            print(
                f"{len(problems)} commit(s) without DCO sign-off: "
                "`git commit -s --amend` (or `git rebase --signoff`)."
            )
            return 1
        return 0

    if not args.msgfile:
        ap.error("give a commit message file or --range")
    path = Path(args.msgfile)
    message = path.read_text(encoding="utf-8")
    identity = git_identity() if args.require_author else None
    why = check_message(message, identity)
    if why is None:
        return 0
    if args.fix:
        ident = identity or git_identity()
        if ident is None:
            print("check_dco: set git config user.name and user.email", file=sys.stderr)
            return 2
        path.write_text(append_signoff(message, ident), encoding="utf-8")
        return 0
    print(f"DCO: {why}. Commit with `git commit -s` (Developer Certificate of Origin).")
    return 1


if __name__ == "__main__":
    sys.exit(main())
