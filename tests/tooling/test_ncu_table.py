# SPDX-License-Identifier: Apache-2.0
"""tools.gpu.ncu_table on a small raw csv shaped like `ncu --page raw --csv`:
labels from the profiled program's log, units scaled (Mbyte, usecond), one
kernel per case or kernel names otherwise."""

from __future__ import annotations

import csv
from pathlib import Path

from tools.gpu import ncu_table as nt

HEADER = [
    "ID", "Kernel Name", "gpu__time_duration.sum", "dram__bytes_read.sum",
    "dram__bytes_write.sum", "launch__registers_per_thread", "launch__block_size",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
]  # fmt: skip
UNITS = ["", "", "usecond", "Mbyte", "Mbyte", "register/thread", "", "ratio", "ratio"]


def _write(
    tmp: Path, kernels: list[list[str]], log_lines: list[str]
) -> tuple[str, str]:
    raw, log = tmp / "raw.csv", tmp / "run.log"
    with open(raw, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["==PROF== noise before the header"])
        w.writerow(HEADER)
        w.writerow(UNITS)
        w.writerows(kernels)
    log.write_text("\n".join(log_lines) + "\n")
    return str(raw), str(log)


def test_one_kernel_per_case_gets_labels_units_and_ideal_ratio(tmp_path: Path) -> None:
    # 8192x4096 bf16 rms_norm moves 2 * 2 * 8192 * 4096 + 2 * 4096 bytes at least.
    ideal_mb = (2 * 2 * 8192 * 4096 + 2 * 4096) / 1e6
    raw, log = _write(
        tmp_path,
        [["0", "rms_norm_block_row_kernel", "34.3", f"{ideal_mb / 2}", f"{ideal_mb / 2}", "59", "128", "5.04", "0.5"]],
        ["profile case 0: ours rms_norm bf16 8192x4096"],
    )  # fmt: skip
    lines = nt.table(raw, log)
    assert len(lines) == 2
    row = lines[1]
    assert "ours rms_norm bf16 8192x4096" in row
    assert " 34.30 " in row  # usecond -> us
    assert " 1.000 " in row  # Mbyte scaled: DRAM bytes == ideal
    assert row.rstrip().endswith("long_scoreboard 5.04, barrier 0.50")


def test_more_kernels_than_cases_fall_back_to_kernel_names(tmp_path: Path) -> None:
    raw, log = _write(
        tmp_path,
        [
            ["0", "add_kernel", "10", "1", "1", "32", "256", "1", "0"],
            ["1", "rms_kernel", "20", "1", "1", "32", "256", "1", "0"],
        ],
        ["profile case 0: eager fused_add_rms_norm bf16 16x4096"],
    )
    lines = nt.table(raw, log)
    assert "add_kernel" in lines[1] and "rms_kernel" in lines[2]
    assert "2 kernels for 1 cases" in lines[-1]
