# SPDX-License-Identifier: Apache-2.0
"""Writes the ncu fixtures of tests/tooling/test_profile_triage.py:

    .venv/bin/python tests/tooling/data/ncu/make_fixtures.py

No raw ncu CSV of our kernels was ever committed (device_session.sh's
profile stages write theirs to /tmp on the GPU machine; `git log --all
--stat` has none), so these are written in ncu's raw-page CSV form (header
row of metric names, unit row, one row per kernel, ==PROF== noise first)
with the metric names ncu emits and tools/gpu/ncu_table.py parses:

- notes_anchors.csv/.log: the table of
  docs/layernorm/log/2026-11-29-anchors-under-ncu.md rebuilt row by row (time, DRAM %,
  achieved occupancy, registers, block, load sectors per request, the two
  stall values). What the table does not give is filled in and marked here:
  `selected` = 1.0 cycle per issued instruction (a warp that issues spends
  one cycle selected) so the stall shares are value / (top two + 1), an
  upper bound on the true share; DRAM bytes = 0.93 x the model's (the note
  under the table: 0.90-0.96 for every implementation); store sectors per
  request = load sectors per request; "66.5-68.3" is 67.4.
- notes_v4_small.csv/.log: the 1-16-row rows of "Profile of the v4
  kernels" (time, SOL memory %, occupancy, registers, block, sectors; one
  block per row, so grid = rows). That table gives stall names, not values:
  none are written.
- branches.csv: synthetic rows, one per branch of the decision tree
  (tools/profile/tree.py), named by the case the test expects.
"""

from __future__ import annotations

import csv
from pathlib import Path

HERE = Path(__file__).parent
T = "gpu__time_duration.sum"
SOL_MEM = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
SOL_SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
OCC = "sm__warps_active.avg.pct_of_peak_sustained_active"
THEO = "sm__maximum_warps_per_active_cycle_pct"
REGS, BLOCK, GRID = (
    "launch__registers_per_thread",
    "launch__block_size",
    "launch__grid_size",
)
WAVES = "launch__waves_per_multiprocessor"
LIM = {
    "regs": "launch__occupancy_limit_registers",
    "smem": "launch__occupancy_limit_shared_mem",
    "warps": "launch__occupancy_limit_warps",
    "blocks": "launch__occupancy_limit_blocks",
}
LD_SEC, LD_REQ = (
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
)
ST_SEC, ST_REQ = (
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
)
RD, WR = "dram__bytes_read.sum", "dram__bytes_write.sum"
L2HIT, L2 = (
    "lts__t_sector_hit_rate.pct",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed",
)
LAT = "smsp__average_warp_latency_per_inst_issued.ratio"
ISSUE = "smsp__issue_active.avg.pct_of_peak_sustained_active"
TENSOR = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
FMA = "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active"
ALU = "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active"
STALLS = (
    "long_scoreboard", "barrier", "mio_throttle", "short_scoreboard", "lg_throttle", "wait",
    "not_selected", "math_pipe_throttle", "no_instruction", "selected",
)  # fmt: skip


def stall(n: str) -> str:
    return f"smsp__average_warps_issue_stalled_{n}_per_issue_active.ratio"


COLUMNS = [
    T, SOL_MEM, SOL_SM, DRAM, OCC, THEO, REGS, BLOCK, GRID, WAVES, *LIM.values(),
    LD_SEC, LD_REQ, ST_SEC, ST_REQ, RD, WR, L2HIT, L2, LAT, ISSUE, TENSOR, FMA, ALU,
    *(stall(s) for s in STALLS),
]  # fmt: skip
UNIT = {T: "usecond", RD: "Mbyte", WR: "Mbyte", REGS: "register/thread", GRID: "block",
        BLOCK: "thread", LAT: "cycle", **{v: "block" for v in LIM.values()}}  # fmt: skip


def unit(c: str) -> str:
    if c in UNIT:
        return UNIT[c]
    if c.endswith("pct") or "pct_of_peak" in c:
        return "%"
    if c.endswith(".ratio"):
        return "ratio"
    return "sector" if "sectors" in c else "request" if "requests" in c else ""


def write(
    name: str, rows: list[tuple[str, dict[str, float]]], labels: list[str] | None = None
) -> None:
    cols = [c for c in COLUMNS if any(c in r for _, r in rows)]
    with open(HERE / f"{name}.csv", "w", newline="") as f:
        f.write("==PROF== Connected to process 4242 (/usr/bin/python3.12)\n")
        w = csv.writer(f, quoting=csv.QUOTE_ALL)
        w.writerow(["ID", "Process ID", "Process Name", "Kernel Name", *cols])
        w.writerow(["", "", "", "", *(unit(c) for c in cols)])
        for i, (kname, r) in enumerate(rows):
            w.writerow([str(i), "4242", "python3.12", kname, *(
                "" if c not in r else f"{r[c]:,.4f}".rstrip("0").rstrip(".") for c in cols
            )])  # fmt: skip
    if labels is not None:
        (HERE / f"{name}.log").write_text(
            "".join(f"profile case {i}: {lbl}\n" for i, lbl in enumerate(labels))
        )


def rms_bytes(op: str, rows: int, hidden: int) -> int:
    return 2 * ((2 if op == "rms_norm" else 4) * rows * hidden + hidden)


def anchors() -> None:
    # (impl, op, rows, hidden, us, DRAM %, occupancy %, regs, block, ld sectors/req,
    #  (stall, value), (stall, value)) as in docs/layernorm/log/2026-11-29-anchors-under-ncu.md.
    table = [
        ("ours", "rms_norm", 8192, 8192, 66.6, 76.3, 46.6, 59, 256, 16, ("long_scoreboard", 4.7), ("barrier", 1.6)),
        ("compile", "rms_norm", 8192, 8192, 61.2, 82.3, 91.1, 23, 512, 8, ("long_scoreboard", 17.2), ("barrier", 5.6)),
        ("vllm", "rms_norm", 8192, 8192, 69.0, 76.3, 87.9, 28, 256, 16, ("long_scoreboard", 26.5), ("barrier", 4.9)),
        ("liger", "rms_norm", 8192, 8192, 67.7, 75.4, 68.8, 39, 512, 16, ("long_scoreboard", 9.3), ("barrier", 4.1)),
        ("ours", "rms_norm", 32768, 4096, 128.4, 83.1, 47.1, 59, 128, 16, ("long_scoreboard", 5.8), ("barrier", 1.4)),
        ("compile", "rms_norm", 32768, 4096, 140.1, 76.5, 91.5, 28, 512, 16, ("long_scoreboard", 12.8), ("barrier", 7.5)),
        ("ours", "fused_add_rms_norm", 8192, 4096, 67.4, 75.0, 35.0, 80, 128, 16, ("long_scoreboard", 7.2), ("barrier", 1.2)),
        ("compile", "fused_add_rms_norm", 8192, 4096, 66.9, 75.5, 94.8, 25, 512, 8, ("long_scoreboard", 26.0), ("barrier", 9.2)),
        ("vllm", "fused_add_rms_norm", 8192, 4096, 64.3, 78.4, 91.5, 30, 256, 16, ("long_scoreboard", 32.5), ("barrier", 7.6)),
        ("liger", "fused_add_rms_norm", 8192, 4096, 64.2, 78.9, 69.5, 40, 256, 16, ("long_scoreboard", 18.6), ("barrier", 5.2)),
        ("ours", "fused_add_rms_norm", 1024, 8192, 19.3, 43.5, 22.8, 92, 256, 16, ("long_scoreboard", 3.5), ("wait", 1.0)),
        ("vllm", "fused_add_rms_norm", 1024, 8192, 16.7, 50.2, 87.5, 30, 256, 16, ("long_scoreboard", 37.8), ("barrier", 4.1)),
        ("liger", "fused_add_rms_norm", 1024, 8192, 16.9, 54.5, 62.9, 40, 512, 16, ("long_scoreboard", 15.9), ("barrier", 4.1)),
    ]  # fmt: skip
    rows, labels = [], []
    for impl, op, r, h, us, dram, occ, regs, blk, sec, s1, s2 in table:
        mb = rms_bytes(op, r, h) * 0.93 / 1e6
        req = r * h / 8 / 32  # 16-byte lanes of full warps
        rows.append((f"{impl}_{op}_kernel", {
            T: us, DRAM: dram, OCC: occ, REGS: regs, BLOCK: blk,
            LD_SEC: req * sec, LD_REQ: req, ST_SEC: req * sec, ST_REQ: req,
            RD: mb * 0.5, WR: mb * 0.5,
            stall(s1[0]): s1[1], stall(s2[0]): s2[1], stall("selected"): 1.0,
        }))  # fmt: skip
        labels.append(f"{impl} {op} bf16 {r}x{h}")
    write("notes_anchors", rows, labels)


def v4_small() -> None:
    table = [
        ("rms_norm", 16, 5120, 3.84, 1.8, 6.2, 72, 128, 16, 16),
        ("rms_norm", 16, 5125, 5.12, 1.4, 6.1, 72, 128, 14.8, 15.6),
    ]
    rows, labels = [], []
    for op, r, h, us, sol, occ, regs, blk, ld, st in table:
        req = 1000.0
        rows.append((f"ours_{op}_kernel", {
            T: us, SOL_MEM: sol, OCC: occ, REGS: regs, BLOCK: blk, GRID: r,
            LD_SEC: req * ld, LD_REQ: req, ST_SEC: req * st, ST_REQ: req,
        }))  # fmt: skip
        labels.append(f"ours {op} bf16 {r}x{h}")
    write("notes_v4_small", rows, labels)


# Synthetic branch rows. The test gives every row the same ceilings (4.25 TB/s
# copy, 4.8 TB/s datasheet, 790 TFLOP/s) and a model: MEMORY_MODEL (200 MB,
# roof 47.1 us) or COMPUTE_MODEL (1e11 FLOPs, roof 126.6 us of 200; 1 MB).
MEM_BASE = {
    T: 100.0, SOL_MEM: 70.0, SOL_SM: 30.0, DRAM: 45.0, OCC: 80.0, THEO: 100.0, REGS: 32,
    BLOCK: 256, GRID: 10000, WAVES: 9.5, LIM["regs"]: 8, LIM["smem"]: 32, LIM["warps"]: 8,
    LIM["blocks"]: 32, LD_SEC: 16e6, LD_REQ: 1e6, ST_SEC: 16e6, ST_REQ: 1e6, RD: 100.0,
    WR: 100.0, L2HIT: 60.0, L2: 40.0, LAT: 10.0, ISSUE: 30.0, TENSOR: 0.0, FMA: 20.0,
    ALU: 20.0, stall("long_scoreboard"): 2.0, stall("barrier"): 1.0, stall("wait"): 1.0,
    stall("selected"): 1.0,
}  # fmt: skip
LAT_BASE = {**MEM_BASE, SOL_MEM: 30.0, SOL_SM: 20.0}
COMP_BASE = {
    **MEM_BASE,
    T: 200.0,
    SOL_MEM: 30.0,
    SOL_SM: 85.0,
    RD: 0.5,
    WR: 0.5,
    TENSOR: 50.0,
    FMA: 50.0,
    ALU: 50.0,
}


def branches() -> list[tuple[str, dict[str, float]]]:
    def lat(**stalls: float) -> dict[str, float]:
        return {**{stall(k): v for k, v in stalls.items()}}

    rows = [
        ("at_roof", {**MEM_BASE, T: 48.0}),
        # A copy of the op's bytes judged against a compute-bound case's FLOPs.
        ("model_exceeded", {**MEM_BASE, T: 20.0}),
        ("at_roof_dram", {**MEM_BASE, DRAM: 87.0}),  # no model: DRAM 87% x 4.8 / 4.25 = 98%
        ("extra_bytes_l2_miss", {**MEM_BASE, RD: 200.0, WR: 100.0, L2HIT: 30.0}),
        ("extra_bytes", {**MEM_BASE, RD: 200.0, WR: 100.0, L2HIT: 70.0, LD_SEC: 32e6}),
        ("narrow_loads", {**MEM_BASE, LD_SEC: 2e6}),
        ("few_bytes_in_flight_warps", {**MEM_BASE, OCC: 30.0, **lat(long_scoreboard=5.0)}),
        ("few_loads_per_thread", {**MEM_BASE, **lat(long_scoreboard=5.0)}),
        ("l2_bound", {**MEM_BASE, L2: 85.0}),
        ("memory_then_latency_other", dict(MEM_BASE)),
        ("small_grid", {**LAT_BASE, GRID: 16, WAVES: 0.02}),
        # The issue's classic: achieved occupancy 25%, long_scoreboard 60%.
        ("long_scoreboard_few_warps", {**LAT_BASE, OCC: 25.0, THEO: 25.0, LIM["regs"]: 2, **lat(long_scoreboard=6.0)}),
        ("long_scoreboard", {**LAT_BASE, OCC: 70.0, **lat(long_scoreboard=6.0)}),
        ("barrier", {**LAT_BASE, **lat(barrier=4.0)}),
        ("mio_throttle", {**LAT_BASE, **lat(mio_throttle=4.0)}),
        ("short_scoreboard", {**LAT_BASE, **lat(short_scoreboard=4.0)}),
        ("lg_throttle", {**LAT_BASE, **lat(lg_throttle=4.0)}),
        ("wait", {**LAT_BASE, **lat(wait=4.0)}),
        ("math_pipe_then_pipe_saturated", {**LAT_BASE, FMA: 90.0, **lat(math_pipe_throttle=4.0)}),
        ("not_selected", {**LAT_BASE, **lat(not_selected=2.5)}),
        ("instruction_fetch", {**LAT_BASE, **lat(no_instruction=4.0)}),
        ("few_warps", {**LAT_BASE, OCC: 20.0, **lat(long_scoreboard=3.0)}),
        ("latency_other", dict(LAT_BASE)),
        ("no_tensor_cores", {**COMP_BASE, TENSOR: 5.0, FMA: 85.0}),
        ("tensor_saturated", {**COMP_BASE, TENSOR: 85.0}),
        ("pipe_saturated", {**COMP_BASE, ALU: 85.0}),
        ("issue_bound", {**COMP_BASE, ISSUE: 85.0}),
        ("compute_then_wait", {**COMP_BASE, **lat(wait=4.0)}),
        # No SpeedOfLight, no model: the classic from occupancy and stalls alone.
        ("bound_unknown_classic", {T: 50.0, OCC: 25.0, LAT: 10.0, stall("long_scoreboard"): 6.0,
                                   REGS: 128, BLOCK: 256}),
        # No model: SOL decides (SM 85% > memory 30%).
        ("sol_compute_no_model", {**COMP_BASE, TENSOR: 85.0}),
    ]  # fmt: skip
    write("branches", rows)
    return rows


if __name__ == "__main__":
    anchors()
    v4_small()
    branches()
