#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that comments in C/C++/CUDA sources hold no measurement history.

Comments in csrc/ state the contract of the code and the reason for a choice
("two 96 KB CTAs per SM" is a reason). Measurements, predictions and the diary
of how a choice was reached belong in the family's docs (``docs/<family>/
design.md`` and the dated ``docs/<family>/log/``); a comment may point there.

    python -m tools.ci.check_code_comments FILE...   # pre-commit passes files
    python -m tools.ci.check_code_comments           # every C/C++/CUDA file
                                                     # under csrc/

Only comments are read (``//`` and ``/* */``); code and string or character
literals are skipped. A run of comment lines is checked as one text, so a
number and its unit split across two lines are still found. Flagged:

* a number with a time, bandwidth or throughput unit: ``28.9 us``, ``3 µs``,
  ``1.2 ms``, ``40 ns``, ``4.1 TB/s``, ``900 GB/s``, ``600 TFLOP/s``,
  ``277 tok/s``;
* a speedup factor: ``1.3x`` / ``0.55×`` with faster/slower/speedup/vs/than
  on the same line, or an integer factor right before faster/slower/speedup
  (``2x faster``); sizes such as ``16 x 8``, ``128x128 tiles`` or
  ``2x unroll`` are not factors;
* a share of a bound: ``85% of the floor``, ``17% of DRAM bandwidth``,
  ``12% faster``;
* diary words: session, tried, prediction/predicted, "measured on/at",
  "measured slower/faster", "measured <number>", "was slower/faster", an
  "H100/H200 run";
* a pointer to the retired ``benchmarks/NOTES.md`` (``NOTES §8``).

Escape hatch for a rare justified case: put ``lint: allow-measurement`` in a
comment on the same line (``// lint: allow-measurement``); for a finding that
spans lines, on any of them.

Output is ``file:line: reason`` per finding. Exit status: 0 clean, 1 findings.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

EXTENSIONS = {".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp"}
ALLOW_MARKER = "lint: allow-measurement"

_NUM = r"(?<![\w.])\d+(?:\.\d+)?"
# A factor "1.3x" / "2 ×", not a size "16 x 8" / "128x128" / "x4".
_FACTOR = _NUM + r"\s?[x×](?![\w×])(?!\s*\d)"
_DECIMAL_FACTOR = re.compile(r"(?<![\w.])\d+\.\d+\s?[x×](?![\w×])(?!\s*\d)")
_COMPARATIVE = re.compile(
    r"\b(?:faster|slower|speed-?ups?|quicker|vs\.?|versus|than)(?!\w)",
    re.IGNORECASE,
)

# (pattern, reason), each run over a run of comment lines joined into one
# text. Decimal factors next to a comparative word are checked per line in
# check_source (the word may sit on either side of the factor).
RULES: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(_NUM + r"\s?(?:us|µs|μs|ms|ns|usec|msec)(?![\w/])"),
        "a timing (number with a time unit)",
    ),
    (
        re.compile(
            _NUM + r"\s?(?:[KMGTP]i?B/s|[GTP]FLOP/?s|[GTP]FLOPS|"
            r"tok(?:en)?s?/s|requests?/s|reqs?/s)(?!\w)",
            re.IGNORECASE,
        ),
        "a bandwidth or throughput (number with a rate unit)",
    ),
    (
        re.compile(
            _FACTOR + r"\s*(?:faster|slower|speed-?ups?|quicker)\b"
            r"|\bspeed-?up (?:of )?" + _NUM + r"\s?[x×]",
            re.IGNORECASE,
        ),
        "a speedup factor",
    ),
    (
        re.compile(
            _NUM + r"\s?%\s+(?:of\s+(?:the\s+)?(?:[\w-]+\s+)?"
            r"(?:floor|ceiling|peak|roofline|bandwidth|SOL|speed of light)"
            r"|faster|slower)\b",
            re.IGNORECASE,
        ),
        "a share of a floor/ceiling/peak (a measurement)",
    ),
    (
        re.compile(
            r"\b(?:sessions?|tried|predictions?|predicted|predicts)\b"
            r"|\bmeasured\s+(?:on|at|slower|faster)\b|\bmeasured\s+~?\d"
            r"|\bwas\s+(?:slower|faster)\b"
            r"|\b[HAB]\d{2,3}\s+(?:runs?|sessions?|timings?|measurements?)\b",
            re.IGNORECASE,
        ),
        "a diary word (session, tried, prediction, measured on, a GPU run)",
    ),
    (
        re.compile(r"\bbenchmarks/NOTES\.md\b|\bNOTES\s*(?:§|section\b)"),
        "points to benchmarks/NOTES.md; point to docs/<family>/design.md",
    ),
]


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    reason: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}: {self.text.strip()}"


def comment_lines(source: str) -> Iterator[tuple[int, str]]:
    """(1-based line, comment text on that line) for every line that carries
    comment text; code, string and character literals are left out. A line
    with both code and a trailing ``//`` comment yields the comment only."""
    i, n, line = 0, len(source), 1
    buf: list[str] = []

    def flush() -> Iterator[tuple[int, str]]:
        if buf:
            yield line, "".join(buf)
            buf.clear()

    state = "code"
    raw_end = ""
    while i < n:
        c = source[i]
        if c == "\n":
            yield from flush()
            line += 1
            if state == "line":
                state = "code"
            i += 1
            continue
        if state == "code":
            if source.startswith("//", i):
                state = "line"
                i += 2
                continue
            if source.startswith("/*", i):
                state = "block"
                i += 2
                continue
            m = re.match(r'(?:u8|[uUL])?R"([^()\\\s]{0,16})\(', source[i:])
            if m and (i == 0 or not (source[i - 1].isalnum() or source[i - 1] == "_")):
                state = "raw"
                raw_end = ")" + m.group(1) + '"'
                i += m.end()
                continue
            if c == '"':
                state = "string"
            elif c == "'" and not (i > 0 and source[i - 1].isalnum()):
                # A digit separator (1'000'000) follows an alphanumeric.
                state = "char"
            i += 1
            continue
        if state == "line":
            buf.append(c)
            i += 1
            continue
        if state == "block":
            if source.startswith("*/", i):
                state = "code"
                i += 2
                continue
            buf.append(c)
            i += 1
            continue
        if state == "raw":
            if source.startswith(raw_end, i):
                state = "code"
                i += len(raw_end)
                continue
            i += 1
            continue
        # string or char literal
        if c == "\\":
            i += 2  # an escaped quote, or a line continuation (its \n counts)
            if i - 1 < n and source[i - 1] == "\n":
                line += 1
            continue
        if (state == "string" and c == '"') or (state == "char" and c == "'"):
            state = "code"
        i += 1
    yield from flush()


def _blocks(lines: list[tuple[int, str]]) -> Iterator[list[tuple[int, str]]]:
    """Runs of comment lines on consecutive source lines."""
    block: list[tuple[int, str]] = []
    for ln, text in lines:
        if block and ln != block[-1][0] + 1:
            yield block
            block = []
        block.append((ln, text))
    if block:
        yield block


def _check_block(
    block: list[tuple[int, str]],
    path: str,
    findings: list[Finding],
    seen: set[tuple[int, str]],
) -> None:
    """Checks one run of comment lines, joined by spaces into one text."""
    starts: list[int] = []  # where line k begins in the joined text
    parts: list[str] = []
    pos = 0
    for _, text in block:
        starts.append(pos)
        part = text.strip().lstrip("*/").strip() if parts else text
        parts.append(part)
        pos += len(part) + 1
    joined = " ".join(parts)

    def add(a: int, b: int, reason: str) -> None:
        first = max(k for k, s in enumerate(starts) if s <= a)
        last = max(k for k, s in enumerate(starts) if s <= max(a, b - 1))
        if any(ALLOW_MARKER in block[k][1] for k in range(first, last + 1)):
            return
        ln, text = block[first]
        if (ln, reason) not in seen:
            seen.add((ln, reason))
            findings.append(Finding(path, ln, reason, text))

    for pattern, reason in RULES:
        for m in pattern.finditer(joined):
            add(m.start(), m.end(), reason)
    # Decimal factors with a comparative word on the same source line.
    for k, part in enumerate(parts):
        if _COMPARATIVE.search(part):
            for m in _DECIMAL_FACTOR.finditer(part):
                a = starts[k] + m.start()
                add(a, a + len(m.group()), "a speedup factor")


def check_source(source: str, path: str = "<string>") -> list[Finding]:
    """Findings in the comments of one C/C++/CUDA source text."""
    findings: list[Finding] = []
    seen: set[tuple[int, str]] = set()
    for block in _blocks(list(comment_lines(source))):
        _check_block(block, path, findings, seen)
    findings.sort(key=lambda f: f.line)
    return findings


def check_file(path: Path) -> list[Finding]:
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    return check_source(source, str(path))


def default_files(root: Path) -> list[Path]:
    return sorted(
        p
        for p in (root / "csrc").rglob("*")
        if p.is_file() and p.suffix.lower() in EXTENSIONS
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="files to check (default: csrc/)")
    ap.add_argument("--root", default=None, help="repo root (default: cwd)")
    args = ap.parse_args(argv)
    root = Path(args.root or os.getcwd()).resolve()
    paths = [Path(f) for f in args.files] if args.files else default_files(root)
    findings: list[Finding] = []
    for path in paths:
        if path.suffix.lower() in EXTENSIONS and path.is_file():
            findings += check_file(path)
    for f in findings:
        print(f)
    if findings:
        print(
            f"{len(findings)} comment line(s) with measurement history; "
            "state the contract and the reason in csrc/ and move the numbers "
            "to docs/<family>/log/ (or mark a justified line with "
            f"'// {ALLOW_MARKER}')."
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
