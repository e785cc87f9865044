# SPDX-License-Identifier: Apache-2.0
"""Where a kernel's warps wait, per SASS instruction: the source page of an
ncu report (``ncu --import R --page source --csv --print-source sass``, from
a profile with the SourceCounters section), its warp-state samples summed
per instruction and per opcode, the hottest instructions printed with their
neighbours.

The triage's WarpStateStats say *why* warps stall (long scoreboard, barrier,
wait, ...); this says *at which instruction*, which is what separates "the
mbarrier wait of the pipeline" from "the dependent load feeding the
dequant" when both show as the same stall reason.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

# ncu's column names (2023.x-2025.x); matched by prefix, case-insensitively.
SAMPLES = "warp stall sampling (all samples)"
NOT_ISSUED = "warp stall sampling (not-issued samples)"
SOURCE = "source"
ADDRESS = "address"
EXECUTED = "instructions executed"

_PRED = re.compile(r"^@!?U?P[T0-9]+\s+")


@dataclass
class Instruction:
    address: str
    sass: str
    samples: float
    not_issued: float
    executed: float

    @property
    def opcode(self) -> str:
        """The opcode with its modifiers (``SYNCS.PHASECHK.TRANS64.TRYWAIT``),
        predicate dropped."""
        text = _PRED.sub("", self.sass.strip())
        return text.split(" ", 1)[0].rstrip(";") if text else "?"


def _num(text: str) -> float:
    text = text.replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return 0.0


def _column(header: list[str], name: str) -> int | None:
    for i, h in enumerate(header):
        if h.strip().strip("#").strip().lower().startswith(name):
            return i
    return None


@dataclass
class SourceTable:
    kernel: str  # the "Kernel Name" row before the table ("?" without one)
    instructions: list[Instruction]


def parse_source_csv(text: str) -> list[SourceTable]:
    """One table of instructions per profiled kernel in the CSV (ncu prints
    a "Kernel Name" row and a header row per kernel)."""
    tables: list[SourceTable] = []
    cols: dict[str, int | None] | None = None
    kernel = "?"
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if row[0].strip() == "Kernel Name" and len(row) > 1:
            kernel = row[1].strip()
            continue
        if _column(row, SOURCE) is not None and _column(row, SAMPLES) is not None:
            cols = {
                k: _column(row, k)
                for k in (SOURCE, SAMPLES, NOT_ISSUED, ADDRESS, EXECUTED)
            }
            tables.append(SourceTable(kernel, []))
            kernel = "?"
            continue
        if cols is None:
            continue

        def get(key: str, row: list[str] = row, cols: dict = cols) -> str:
            i = cols[key]
            return row[i] if i is not None and i < len(row) else ""

        tables[-1].instructions.append(
            Instruction(
                address=get(ADDRESS),
                sass=get(SOURCE),
                samples=_num(get(SAMPLES)),
                not_issued=_num(get(NOT_ISSUED)),
                executed=_num(get(EXECUTED)),
            )
        )
    return [t for t in tables if t.instructions]


def import_source(report: str | Path, extra: list[str] | None = None) -> str:
    """The SASS source page of a .ncu-rep as CSV (needs ncu on PATH)."""
    ncu = shutil.which("ncu")
    if ncu is None:
        raise RuntimeError(
            f"{report}: reading a .ncu-rep needs ncu; on the GPU machine run "
            f"`ncu --import {report} --page source --csv --print-source sass "
            "> source.csv` and pass source.csv"
        )
    return subprocess.run(
        [ncu, "--import", str(report), "--page", "source", "--csv",
         "--print-source", "sass", *(extra or [])],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


def report_lines(
    table: list[Instruction], *, top: int = 15, context: int = 2
) -> list[str]:
    """The hottest opcodes, then the `top` hottest instructions, each with
    `context` instructions either side (the loop around it)."""
    total = sum(i.samples for i in table) or 1.0
    lines = [
        f"{len(table)} instructions, {total:.0f} warp-state samples "
        f"({sum(i.not_issued for i in table):.0f} not issued)",
        "by opcode (share of samples):",
    ]
    by_op: Counter[str] = Counter()
    for i in table:
        by_op[i.opcode] += i.samples
    for op, n in by_op.most_common(10):
        lines.append(f"  {100 * n / total:5.1f}%  {op}")
    lines.append(f"hottest {top} instructions (share, executed, address, SASS):")
    order = sorted(range(len(table)), key=lambda k: -table[k].samples)[:top]
    shown: set[int] = set()
    for k in sorted(order):
        lo, hi = max(0, k - context), min(len(table), k + context + 1)
        if lo > 0 and lo - 1 not in shown:
            lines.append("  ...")
        for j in range(lo, hi):
            if j in shown:
                continue
            shown.add(j)
            ins = table[j]
            mark = ">" if j in order else " "
            lines.append(
                f" {mark}{100 * ins.samples / total:5.1f}% {ins.executed:10.0f} "
                f"{ins.address:>8} {ins.sass.strip()}"
            )
    return lines
