# SPDX-License-Identifier: Apache-2.0
"""benchmarks.common.history: results JSON -> rows of
benchmarks/results/history/<device>.csv (the case key, the exact median,
records without a number left out), append-only appends, the check, the
other schemas (layout sweeps, serving, system profiles), and the committed
CSVs themselves."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from benchmarks.common import history

REPO = Path(__file__).resolve().parents[2]
MEDIAN = 33.663999289274216  # 17 significant digits: must come back exactly


def _bench_doc() -> dict:
    rec = {"op": "w4a16_gemm", "dtype": "bf16", "zp": "sym", "group": 128, "n": 28672,
           "k": 4096, "m": 1, "method": "cuda_graph", "bytes": 1}  # fmt: skip
    return {
        "schema": "vllm-myops-bench/1",
        "benchmark": "w4a16",
        "metadata": {
            "date": "2026-12-02T06:20:25+00:00",
            "device": "NVIDIA H200",
            "git": {"commit": "7c8389e9c37bb32a7f40bd8f3b13bc47c04ce218", "dirty": True},
        },
        "config": {"key_fields": ["op", "dtype", "zp", "group", "n", "k", "m", "impl", "method"]},
        "records": [
            {**rec, "impl": "ours", "status": "ok", "median_us": MEDIAN, "p90_us": 34.104800596,
             "min_us": 33.2879982, "pct_floor": 48.788024, "pct_ceiling": 42.35924,
             "pct_roofline": 42.35924, "bound": "memory"},
            {**rec, "impl": "floor", "status": "ok", "median_us": 16.42400026321411},
            {**rec, "impl": "marlin", "status": "missing", "reason": "not installed"},
            {**rec, "impl": "machete", "status": "failed", "reason": "boom"},
        ],
    }  # fmt: skip


def test_rows_of_a_bench_file(tmp_path: Path) -> None:
    f = tmp_path / "run.json"
    f.write_text(json.dumps(_bench_doc()))
    rows = history.rows_for_file(f, "h200_w4a16_run")
    assert [r["impl"] for r in rows] == ["ours", "floor", "machete"]  # missing dropped
    ours = rows[0]
    assert ours["case"] == "w4a16_gemm bf16 zp=sym group=128 n=28672 k=4096 m=1"
    assert float(ours["median_us"]) == MEDIAN
    assert ours["p90_us"] == "34.1048" and ours["bound"] == "memory"
    assert (
        ours["commit"] == "7c8389e9c37b+dirty"
        and ours["date"] == "2026-12-02T06:20:25Z"
    )
    assert ours["family"] == "w4a16" and ours["device"] == "NVIDIA H200"
    assert rows[2]["status"] == "failed" and rows[2]["median_us"] == ""
    assert set(ours) == set(history.COLUMNS)


def test_append_check_and_refuse_duplicates(tmp_path: Path, capsys) -> None:
    f = tmp_path / "run.json"
    f.write_text(json.dumps(_bench_doc()))
    d = tmp_path / "history"
    argv = ["--device", "h200", "--source", "run1", "--dir", str(d), str(f)]
    assert history.main(["append", *argv]) == 0
    assert history.main(["check", *argv]) == 0
    # Append-only: a second source goes below; the same source again is refused.
    argv2 = ["--device", "h200", "--source", "run2", "--dir", str(d), str(f)]
    assert history.main(["append", *argv2]) == 0
    assert history.main(["append", *argv]) == 1
    assert "already has source ['run1']" in capsys.readouterr().err
    rows = history.read_csv(d / "h200.csv")
    assert [r["source"] for r in rows] == ["run1"] * 3 + ["run2"] * 3
    assert (d / "h200.csv").read_text().count("source,date") == 1
    # The check sees a changed median.
    text = (d / "h200.csv").read_text().replace(repr(MEDIAN), "33.66", 1)
    (d / "h200.csv").write_text(text)
    assert history.main(["check", *argv]) == 1


def test_date_from_the_command_line_when_the_file_has_none(tmp_path: Path) -> None:
    doc = _bench_doc()
    del doc["metadata"]["date"]
    f = tmp_path / "untracked.json"
    f.write_text(json.dumps(doc))
    rows = history.rows_for_file(f, "x", date="2026-12-03")
    assert {r["date"] for r in rows} == {"2026-12-03"}


def test_layout_sweep_serving_and_system_files() -> None:
    rec = {"op": "rms_norm", "dtype": "bf16", "rows": 16, "hidden": 5120,
           "method": "cuda_graph", "status": "ok"}  # fmt: skip
    sweep = {"configs": ["0", "1"], "records": {
        "0": [{**rec, "impl": "ours", "median_us": 2.5}],
        "1": [{**rec, "impl": "ours", "median_us": 2.25}]}}  # fmt: skip
    rows = history.rows_from_doc(sweep)
    assert [(r["case"], r["median_us"]) for r in rows] == [
        ("rms_norm bf16 rows=16 hidden=5120 cfg=0", "2.5"),
        ("rms_norm bf16 rows=16 hidden=5120 cfg=1", "2.25"),
    ]
    assert {r["family"] for r in rows} == {"layernorm"}
    serving = {
        "schema": "vllm-myops-bench-serving/2", "config": {"preset": "tiny", "max_tokens": 64},
        "summary": {"bf16": {"ctx2048_c16": {
            "output_tok_per_s": 2775.0, "req_per_s": 43.4, "latency_p50_s": 0.25,
            "latency_p95_s": 0.3, "ttft_p50_s": 0.05, "tpot_p50_s": 0.003}}},
    }  # fmt: skip
    (row,) = history.rows_from_doc(serving)
    assert row["family"] == "e2e" and row["impl"] == "bf16"
    assert row["case"] == "tiny ctx=2048 c=16 max_tokens=64"
    assert row["median_us"] == "250000.0"
    assert "tok_s=2775;" in row["extra"] and "tpot_ms=3" in row["extra"]
    system = {"run": {"model": "m", "provider": "myops", "concurrency": 1, "prompt_len": 32,
                      "decode_steps": 16},
              "kinds": {"decode": {"steps": 16, "wall_us": 6087.9, "families": {
                  "ours RMSNorm": {"us_per_step": 174.9, "launches_per_step": 65.0,
                                   "share": 0.04}}}}}  # fmt: skip
    rows = history.rows_from_doc(system)
    assert [(r["case"].split()[-1], r["median_us"]) for r in rows] == [
        ("part=step", "6087.9"), ("part=ours_RMSNorm", "174.9")]  # fmt: skip
    with pytest.raises(ValueError, match="unknown results shape"):
        history.rows_from_doc({"something": 1})


def test_device_of_archived_names() -> None:
    assert history.device_of("h200_w4a16_bf16_swap_global.json") == "h200"
    assert (
        history.device_of("h200_dequant_pipe_ab_2026-12-02/ab_dequant.json") == "h200"
    )
    assert history.device_of("cpu_attention_bf16_epyc_2t_run1.json") == "cpu"


@pytest.mark.parametrize("device", ["h200", "cpu"])
def test_committed_history_csvs(device: str) -> None:
    path = REPO / "benchmarks/results/history" / f"{device}.csv"
    assert path.stat().st_size < 1_500_000
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == history.COLUMNS
        rows = list(reader)
    assert rows
    seen = set()
    for r in rows:
        key = (r["source"], r["case"], r["impl"], r["method"])
        assert key not in seen, key  # one row per (run, case, impl, method)
        seen.add(key)
        assert r["status"] in history.KEPT_STATUS
        if r["status"] == "ok":
            float(r["median_us"])
        assert r["source"].startswith(device + "_"), r["source"]
    assert "/work/" not in path.read_text() and "/tmp/" not in path.read_text()


def test_no_committed_pngs_and_no_archive() -> None:
    results = REPO / "benchmarks/results"
    assert not (results / "archive").exists()
    ignore = (REPO / ".gitignore").read_text().splitlines()
    assert "benchmarks/results/**/*.png" in ignore
