# SPDX-License-Identifier: Apache-2.0
"""Trim a real ncu raw CSV to the columns tools/profile reads, in ncu's form.

    python tests/tooling/data/ncu/trim_report.py FULL.csv FULL.log OUT.csv

Every kernel row is kept (the log names kernels by ncu's index, so a dropped
row would shift the labels of the rest); columns are kept when the triage
reads them: the ones it asks for by name (recorded while it triages the
full report), the stall and pipe families it scans by pattern, and ncu's
leading identification columns. Lines before the header (==PROF== notes)
and the unit row stay as ncu wrote them. The script then checks that the
trimmed report gives the same facts and verdicts as the full one.
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path
from typing import Any

from tools.profile import ncu
from tools.profile import triage as tr

LEADING = 11  # ID .. CC: ncu's identification columns before the metrics
CEILINGS: dict[str, Any] = {
    "bandwidth_bps": 4.25e12,
    "datasheet_bps": 4.8e12,
    "flops_per_s": 7.9e14,
}


def columns_read(kernels: list[ncu.Kernel]) -> set[str]:
    """Metric names the triage reads from these kernels."""
    asked: set[str] = set()
    real_get = ncu.Kernel.get

    def recording_get(self: ncu.Kernel, *names: str) -> float | None:
        asked.update(names)
        return real_get(self, *names)

    ncu.Kernel.get = recording_get  # type: ignore[method-assign]
    try:
        for k in kernels:
            tr.triage_kernel(k, tr.Model(**CEILINGS))
    finally:
        ncu.Kernel.get = real_get  # type: ignore[method-assign]
    scanned = {
        n
        for k in kernels
        for n in k.metrics
        if tr.STALL.match(n) or tr.STALL_PCT.match(n) or tr.PIPE.match(n)
    }
    return asked | scanned


def verdicts(kernels: list[ncu.Kernel]) -> list[dict]:
    return [tr.triage_kernel(k, tr.Model(**CEILINGS)).to_dict() for k in kernels]


def trim(full_csv: Path, log: Path, out_csv: Path) -> None:
    text = full_csv.read_text()
    kernels = ncu.load(full_csv, log)
    keep_names = columns_read(kernels)
    lines = text.splitlines(keepends=True)
    hdr_i = next(i for i, line in enumerate(lines) if '"Kernel Name"' in line)
    rows = list(csv.reader(io.StringIO("".join(lines[hdr_i:]))))
    hdr = rows[0]
    keep = [i for i, h in enumerate(hdr) if i < LEADING or h in keep_names]
    buf = io.StringIO()
    # ncu quotes every field and ends lines with \n.
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    for r in rows:
        w.writerow([r[i] for i in keep])
    out_csv.write_text("".join(lines[:hdr_i]) + buf.getvalue())
    trimmed = ncu.load(out_csv, log)
    if verdicts(trimmed) != verdicts(kernels):
        raise SystemExit("the trimmed report triages differently from the full one")
    print(
        f"{out_csv}: {len(trimmed)} kernels, {len(keep)} of {len(hdr)} columns, "
        f"{out_csv.stat().st_size} bytes; verdicts identical to the full report"
    )


if __name__ == "__main__":
    trim(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
