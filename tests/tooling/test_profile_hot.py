# SPDX-License-Identifier: Apache-2.0
"""tools.profile hot: per-instruction warp-state samples from ncu's source page."""

from __future__ import annotations

import subprocess
import sys

from tools.profile import hot

HEADER = (
    '"# Address","Source","Warp Stall Sampling (All Samples)",'
    '"Warp Stall Sampling (Not-issued Samples)","Instructions Executed"\n'
)
ROWS = (
    '"0010","MOV R1, c[0x0][0x28]","2","1","288"\n'
    '"0020","@!P0 SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [R3+URZ+0x100], R4","700","690","6,400"\n'
    '"0030","@!P1 BRA 0x20","50","40","6400"\n'
    '"0040","LDS R5, [R6]","100","80","2048"\n'
    '"0050","HGMMA.64x16x16.F32.BF16 R24, R8, gdesc[UR4], R24","148","100","512"\n'
)


# ncu 2025's source page: a "Kernel Name" row, then more columns than read.
NCU_2025 = (
    '"Kernel Name","void k<__nv_bfloat16, (int)16>(CUtensorMap_st, Args)",\n'
    '"Address","Source","Warp Stall Sampling (All Samples)",'
    '"Warp Stall Sampling (Not-issued Samples)","# Samples","Instructions Executed",'
    '"Thread Instructions Executed"\n'
    '"0x7f00","      LDC R1, c[0x0][0x28]","32","32","32","2016","64512"\n'
    '"0x7f10","      @!P0  BRA 0x7f00","7","3","7","1792","57344"\n'
)


def test_parse_two_kernel_tables_and_opcodes() -> None:
    tables = hot.parse_source_csv(
        "==PROF== noise\n" + HEADER + ROWS + HEADER + ROWS[:40]
    )
    assert [len(t.instructions) for t in tables] == [5, 1]
    assert tables[0].kernel == "?"
    t = tables[0].instructions
    assert t[1].opcode == "SYNCS.PHASECHK.TRANS64.TRYWAIT"  # predicate dropped
    assert t[1].executed == 6400.0  # thousands separator
    assert t[4].opcode == "HGMMA.64x16x16.F32.BF16"
    assert sum(i.samples for i in t) == 1000.0


def test_ncu_2025_layout_names_the_kernel() -> None:
    (table,) = hot.parse_source_csv(NCU_2025)
    assert table.kernel == "void k<__nv_bfloat16, (int)16>(CUtensorMap_st, Args)"
    first, branch = table.instructions
    assert (first.samples, first.executed, first.opcode) == (32.0, 2016.0, "LDC")
    assert (branch.not_issued, branch.opcode) == (3.0, "BRA")


def test_report_ranks_by_samples_with_context() -> None:
    table = hot.parse_source_csv(HEADER + ROWS)[0].instructions
    lines = hot.report_lines(table, top=2, context=0)
    assert lines[0].startswith(
        "5 instructions, 1000 warp-state samples (911 not issued)"
    )
    assert lines[2].split() == ["70.0%", "SYNCS.PHASECHK.TRANS64.TRYWAIT"]
    marked = [ln for ln in lines if ln.startswith(" >")]
    assert [m.split()[-1] for m in marked] == ["R4", "R24"]  # address order
    assert "70.0%" in marked[0] and "14.8%" in marked[1]


def test_cli_on_csv_and_on_a_csv_without_samples(tmp_path) -> None:
    good = tmp_path / "s.csv"
    good.write_text(HEADER + ROWS)
    out = subprocess.run(
        [sys.executable, "-m", "tools.profile", "hot", str(good), "--top", "1"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "70.0%  SYNCS.PHASECHK.TRANS64.TRYWAIT" in out
    bad = tmp_path / "b.csv"
    bad.write_text('"Address","Source"\n"0010","MOV R1, R2"\n')
    r = subprocess.run(
        [sys.executable, "-m", "tools.profile", "hot", str(bad)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode != 0 and "SourceCounters" in r.stderr
