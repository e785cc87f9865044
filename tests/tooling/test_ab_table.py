# SPDX-License-Identifier: Apache-2.0
"""benchmarks.common.ab_table: the A/B table of an ab_build.sh bench run,
from its tarball or folder: cases by the files' declared case fields,
medians per tree and round, ratios against the reference tree; missing
cases shown as such; a missing reference or impl refused."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from benchmarks.common import ab_table


def _record(m: int, impl: str, median: float, status: str = "ok") -> dict:
    return {
        "op": "w4a16_gemm",
        "dtype": "bf16",
        "n": 4096,
        "k": 14336,
        "m": m,
        "bytes": 1,
        "impl": impl,
        "status": status,
        "median_us": median,
    }


def _write(folder: Path, name: str, records: list[dict]) -> None:
    doc = {
        "schema": "vllm-myops-bench/1",
        "config": {"key_fields": ["op", "dtype", "n", "k", "m", "impl", "method"]},
        "records": records,
    }
    (folder / f"{name}.json").write_text(json.dumps(doc))


@pytest.fixture
def run(tmp_path: Path) -> Path:
    d = tmp_path / "ab"
    d.mkdir()
    _write(d, "tree_1", [_record(1, "ours", 20.0), _record(8, "ours", 22.0)])
    _write(d, "tree_2", [_record(1, "ours", 21.0), _record(8, "ours", 22.0)])
    # The variant: faster at M = 1, failed at M = 8 in round 1, absent in 2.
    _write(
        d,
        "var_x_1",
        [
            _record(1, "ours", 18.0),
            _record(8, "ours", 0.0, "error"),
            _record(1, "floor", 9.0),
        ],
    )
    _write(d, "var_x_2", [_record(1, "ours", 18.5)])
    (d / "bench.log").write_text("not a result\n")
    return d


def _rows(text: str) -> list[list[str]]:
    return [
        [c.strip() for c in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| ") and not line.startswith("| m ")
    ]


def test_table_from_folder(run: Path) -> None:
    text = ab_table.table(run)
    # Constant case fields go to the title, varying ones are columns.
    assert "op w4a16_gemm" in text.splitlines()[0] and "n 4096" in text.splitlines()[0]
    assert "| m | tree µs | var_x µs | var_x / tree |" in text
    rows = _rows(text)
    assert rows[0] == ["1", "20.00 / 21.00", "18.00 / 18.50", f"{18.25 / 20.5:.3f}"]
    # The variant's failed and missing rounds leave no ratio.
    assert rows[1] == ["8", "22.00 / 22.00", "-", "-"]


def test_table_from_tarball_other_impl_and_ref(run: Path, tmp_path: Path) -> None:
    tgz = tmp_path / "ab.tar.gz"
    with tarfile.open(tgz, "w:gz") as tar:
        tar.add(run, arcname="ab")
    assert ab_table.table(tgz) == ab_table.table(run)
    text = ab_table.table(tgz, ref="var_x")
    assert "| m | var_x µs | tree µs | tree / var_x |" in text
    assert _rows(text)[0][-1] == f"{20.5 / 18.25:.3f}"


def test_refusals(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="no tree 'base'"):
        ab_table.table(run, ref="base")
    with pytest.raises(ValueError, match="no timed records of impl 'marlin'"):
        ab_table.table(run, impl="marlin")
    assert ab_table.main([str(run), "--ref", "base"]) == 2
    assert "ab_table:" in capsys.readouterr().err
    assert ab_table.main([str(run)]) == 0
