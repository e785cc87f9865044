# SPDX-License-Identifier: Apache-2.0
"""Compact table of an ncu report: one row per profiled kernel.

  ncu --import REPORT --page raw --csv > raw.csv
  python -m tools.gpu.ncu_table raw.csv PROFILE_LOG

PROFILE_LOG is the profiled program's output; its lines
`profile case K: LABEL` name the launches in order (tools/sanitize_layernorm.py
--profile prints `OP DTYPE ROWSxHIDDEN`, benchmarks/kernels/profile_anchors.py
`IMPL OP DTYPE ROWSxHIDDEN`). With one kernel per case the rows carry those
labels and DRAM bytes over the op's fewest possible bytes; otherwise the
kernel names. Columns: time, SOL memory %, DRAM %, achieved occupancy,
registers, grid, block, sectors per global load / store request, DRAM bytes
/ ideal, the two largest stall reasons (cycles per issued instruction).
"""

from __future__ import annotations

import csv
import re
import sys

ELEMENT_SIZE = {"bf16": 2, "fp16": 2, "fp32": 4}
# ncu's unit row: scale to the base unit (ns for time, bytes for sizes).
UNIT_SCALE = {
    "nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
    "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9,
    "KB": 1e3, "MB": 1e6, "GB": 1e9,
}  # fmt: skip
STALL = re.compile(
    r"smsp__average_warps?_(?:latency_)?issue_stalled_([a-z_]+?)_per_(?:issue|warp)_active\.ratio$"
    r"|smsp__pcsamp_warps_issue_stalled_([a-z_]+)$"
)
CASE = re.compile(r"profile case (\d+): (.+)$")
SHAPE = re.compile(r"(rms_norm|fused) (bf16|fp16|fp32) (\d+)x(\d+)")


def ideal_bytes(label: str) -> int | None:
    m = SHAPE.search(label)
    if not m:
        return None
    op, dtype, rows, hidden = m.group(1), m.group(2), int(m.group(3)), int(m.group(4))
    return ELEMENT_SIZE[dtype] * (
        (2 if op == "rms_norm" else 4) * rows * hidden + hidden
    )


def table(raw_csv: str, profile_log: str) -> list[str]:
    with open(profile_log, errors="replace") as f:
        labels = [
            m.group(2).replace("fused_add_rms_norm", "fused")
            for line in f
            if (m := CASE.match(line.strip()))
        ]
    with open(raw_csv, errors="replace", newline="") as f:
        rows = list(csv.reader(f))
    hdr_i = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if hdr_i is None:
        return ["  (could not parse the ncu raw csv)"]
    hdr = rows[hdr_i]
    units = rows[hdr_i + 1] if len(rows) > hdr_i + 1 else [""] * len(hdr)
    data = [
        r for r in rows[hdr_i + 1 :] if len(r) == len(hdr) and r[0].strip().isdigit()
    ]
    col = {h: i for i, h in enumerate(hdr)}
    stalls = [(m.group(1) or m.group(2), h) for h in hdr if (m := STALL.match(h))]
    stalls = [(n, h) for n, h in stalls if n not in ("selected", "not_selected")]

    def num(r: list[str], *names: str) -> float | None:
        for name in names:
            i = col.get(name)
            if i is None:
                continue
            try:
                return float(r[i].replace(",", "")) * UNIT_SCALE.get(
                    units[i].strip(), 1.0
                )
            except ValueError:
                continue
        return None

    def ratio(a: float | None, b: float | None) -> float:
        return (a or 0.0) / max(1.0, b or 0.0)

    def fmt(v: float | None, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    one_per_case = len(data) == len(labels)
    width = max([30, *(len(lbl) for lbl in labels)]) if one_per_case else 30
    out = [
        f"  {'#':>2} {'case':<{width}} {'us':>8} {'SOL mem%':>8} {'DRAM%':>6} {'occ%':>5} "
        f"{'regs':>4} {'grid':>9} {'blk':>5} {'ld sec/req':>10} {'st sec/req':>10} "
        f"{'bytes/ideal':>11}  top stalls"
    ]
    for k, r in enumerate(data):
        label = labels[k] if one_per_case else r[col.get("Kernel Name", 0)][:width]
        ns = num(r, "gpu__time_duration.sum")
        moved = (num(r, "dram__bytes_read.sum") or 0.0) + (
            num(r, "dram__bytes_write.sum") or 0.0
        )
        ideal = ideal_bytes(label) if one_per_case else None
        top = sorted(((num(r, h) or 0.0, n) for n, h in stalls), reverse=True)[:2]
        out.append(
            f"  {k:>2} {label:<{width}} {fmt(None if ns is None else ns / 1e3, '.2f'):>8} "
            f"{fmt(num(r, 'gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed'), '.1f'):>8} "
            f"{fmt(num(r, 'dram__throughput.avg.pct_of_peak_sustained_elapsed', 'gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed'), '.1f'):>6} "
            f"{fmt(num(r, 'sm__warps_active.avg.pct_of_peak_sustained_active'), '.1f'):>5} "
            f"{fmt(num(r, 'launch__registers_per_thread'), '.0f'):>4} "
            f"{fmt(num(r, 'launch__grid_size'), '.0f'):>9} {fmt(num(r, 'launch__block_size'), '.0f'):>5} "
            f"{ratio(num(r, 'l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum'), num(r, 'l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum')):>10.2f} "
            f"{ratio(num(r, 'l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum'), num(r, 'l1tex__t_requests_pipe_lsu_mem_global_op_st.sum')):>10.2f} "
            f"{(f'{moved / ideal:.3f}' if ideal and moved else '-'):>11}  "
            + ", ".join(f"{n} {v:.2f}" for v, n in top if v > 0)
        )
    if not one_per_case:
        out.append(
            f"  note: {len(data)} kernels for {len(labels)} cases; rows are in launch order"
        )
    return out


if __name__ == "__main__":
    print("\n".join(table(sys.argv[1], sys.argv[2])))
