# SPDX-License-Identifier: Apache-2.0
"""Nsight Compute input for the triage: read a raw CSV (``ncu --import R
--page raw --csv``), turn a .ncu-rep into one when ncu exists, or build the
ncu command that profiles a benchmark's cases (the sections the decision
tree reads, ``--clock-control none`` as everywhere in this project).

Units are scaled as tools/gpu/ncu_table.py scales them (its UNIT_SCALE:
time to ns, sizes to bytes); a "%" or ratio stays as it is.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tools.gpu.ncu_table import CASE, UNIT_SCALE

# What the tree reads: device_session.sh's profile stages' sections plus
# ComputeWorkloadAnalysis (pipe utilisation, tensor cores) for the
# compute-bound branch, and the metrics those sections leave out.
SECTIONS = (
    "SpeedOfLight", "Occupancy", "LaunchStats", "MemoryWorkloadAnalysis",
    "WarpStateStats", "ComputeWorkloadAnalysis",
)  # fmt: skip
METRICS = (
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_sector_hit_rate.pct",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
)


@dataclass
class Kernel:
    index: int
    name: str
    metrics: dict[str, float] = field(default_factory=dict)
    label: str | None = None  # the profiled program's `profile case K: LABEL`

    def get(self, *names: str) -> float | None:
        for n in names:
            if n in self.metrics:
                return self.metrics[n]
        return None


def _number(text: str, unit: str) -> float | None:
    try:
        return float(text.replace(",", "")) * UNIT_SCALE.get(unit.strip(), 1.0)
    except ValueError:
        return None


def parse_raw_csv(text: str) -> list[Kernel]:
    """Kernels of an ncu raw-page CSV (lines before the header, e.g. ==PROF==
    noise, are skipped; the row after the header holds the units)."""
    rows = list(csv.reader(io.StringIO(text)))
    hdr_i = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if hdr_i is None:
        raise ValueError("not an ncu raw csv: no 'Kernel Name' column")
    hdr = rows[hdr_i]
    units = rows[hdr_i + 1] if len(rows) > hdr_i + 1 else [""] * len(hdr)
    if units and units[0].strip().isdigit():  # no unit row
        units = [""] * len(hdr)
    name_i = hdr.index("Kernel Name")
    out = []
    for r in rows[hdr_i + 1 :]:
        if len(r) != len(hdr) or not r[0].strip().isdigit():
            continue
        k = Kernel(index=len(out), name=r[name_i])
        for h, u, v in zip(hdr, units, r):
            if h in ("ID", "Kernel Name"):
                continue
            x = _number(v, u)
            if x is not None:
                k.metrics[h] = x
        out.append(k)
    return out


def labels_of_log(path: str | Path) -> list[str]:
    with open(path, errors="replace") as f:
        return [m.group(2) for line in f if (m := CASE.match(line.strip()))]


# ncu's line for each kernel it profiles; the program prints its
# `profile case K: LABEL` after the call, so the kernels named since the
# previous case line are that case's (an op can launch several kernels).
PROFILED = re.compile(r'^==PROF== Profiling ".*" - (\d+):')


def kernel_labels_of_log(path: str | Path) -> dict[int, str]:
    """Kernel index -> case label, from the interleaved ncu + program log."""
    out: dict[int, str] = {}
    pending: list[int] = []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            if m := PROFILED.match(line):
                pending.append(int(m.group(1)))
            elif m := CASE.match(line):
                for i in pending:
                    out[i] = m.group(2)
                pending = []
    return out


def import_report(report: str | Path) -> str:
    """The raw CSV of a .ncu-rep (needs ncu on PATH)."""
    ncu = shutil.which("ncu")
    if ncu is None:
        raise RuntimeError(
            f"{report}: reading a .ncu-rep needs ncu on PATH; on a machine with ncu "
            f"run `ncu --import {report} --page raw --csv > raw.csv` and pass raw.csv"
        )
    return subprocess.run(
        [ncu, "--import", str(report), "--page", "raw", "--csv"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def load(path: str | Path, log: str | Path | None = None) -> list[Kernel]:
    path = Path(path)
    text = (
        import_report(path)
        if path.suffix == ".ncu-rep"
        else path.read_text(errors="replace")
    )
    kernels = parse_raw_csv(text)
    if log is not None:
        by_index = kernel_labels_of_log(log)
        labels = labels_of_log(log)
        if by_index:
            for k in kernels:
                k.label = by_index.get(k.index)
        elif len(labels) == len(kernels):  # a log without ncu's own lines
            for k, lbl in zip(kernels, labels):
                k.label = lbl
    return kernels


def profile_command(export: str, program: Sequence[str]) -> list[str]:
    """ncu over a program that brackets its launches with cudaProfilerStart/Stop."""
    return [
        "ncu", "--clock-control", "none", "--profile-from-start", "off",
        "--target-processes", "all",
        *(a for s in SECTIONS for a in ("--section", s)),
        "--metrics", ",".join(METRICS), "--export", export, "--force-overwrite",
        *program,
    ]  # fmt: skip


def benchmark_program(
    module: str, bench_args: Sequence[str], python: str = sys.executable
) -> list[str]:
    """benchmarks/kernels/profile_cases.py over a benchmark's cases."""
    return [python, "-m", "benchmarks.kernels.profile_cases", module, *bench_args]


def run_profile(export: str, program: Sequence[str]) -> tuple[Path, Path]:
    """Profile `program` under ncu: (raw csv, program log)."""
    if shutil.which("ncu") is None:
        raise RuntimeError(
            "ncu not on PATH: profile on the GPU machine, then triage the saved CSV here"
        )
    log = Path(export + ".log")
    with open(log, "w") as f:
        subprocess.run(
            profile_command(export, program),
            stdout=f,
            stderr=subprocess.STDOUT,
            check=False,
        )
    raw = Path(export + ".csv")
    raw.write_text(import_report(export + ".ncu-rep"))
    return raw, log
