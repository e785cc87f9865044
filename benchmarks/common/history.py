# SPDX-License-Identifier: Apache-2.0
"""Benchmark history: one append-only CSV per device,
benchmarks/results/history/<device>.csv, one row per (run, case, impl,
method) with the median and a few compact figures; it replaced the JSON
files of benchmarks/results/archive/ (one row per timed record of each).

    python -m benchmarks.common.history append --device h200 --source NAME FILE.json
    python -m benchmarks.common.history check --device h200 --source NAME FILE.json
    python -m benchmarks.common.history convert ARCHIVE_DIR   # the one-time move

Columns (COLUMNS):
  source       the run's name (the archived file's stem; <folder>/<stem> for
               files of a subfolder)
  date         the run's metadata date (ISO, UTC), else the date of the git
               commit that added the file, else --date
  commit       the recorded git commit (12 hex digits, "+dirty" when the tree
               was dirty), empty when none was recorded
  device       the recorded device name (empty when none was recorded)
  family       layernorm | w4a16 | attention (the benchmark), e2e (serving),
               system (tools.profile system)
  case         the case's key: op and dtype, then field=value of the other
               key fields (e.g. "w4a16_gemm bf16 zp=sym group=128 n=28672
               k=4096 m=1"); layout sweeps add cfg=<layout>
  impl         the implementation (ours, floor, marlin, ...; e2e: the side;
               system: the provider)
  method       the timer (cuda_graph, cpu_loop, do_bench_l2_flush, ...; e2e:
               serving; system: profile_step)
  status       ok | wrong | failed (records without a number, "missing" or
               "skipped", are not carried)
  median_us    the median per call, exact (Python's float repr); e2e: the
               request latency p50; system: the mean us per step of that part
  p90_us, min_us, pct_floor, pct_ceiling, pct_roofline, bound: as in the
               results JSON (6 significant digits)
  extra        family-specific figures, "k=v;k=v" (e2e: tok_s, req_s, p95_s,
               ttft_ms, tpot_ms; system: launches, share, ...)

Every schema "vllm-myops-bench/1" file (benchmarks/common/results.py), the
layout-sweep files ({"configs": [...], "records": {cfg: [records]}}),
"vllm-myops-bench-serving/1|2" files (benchmarks.e2e.benchmark_serving) and
tools.profile system summaries ({"run", "kinds", ...}) convert; `check`
reads the CSV back and verifies every number of the file's rows.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import io
import json
import math
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
HISTORY_DIR = REPO_ROOT / "benchmarks" / "results" / "history"
COLUMNS = [
    "source", "date", "commit", "device", "family", "case", "impl", "method",
    "status", "median_us", "p90_us", "min_us", "pct_floor", "pct_ceiling",
    "pct_roofline", "bound", "extra",
]  # fmt: skip
# Record fields that name a case when a file has no config.key_fields.
CASE_FIELDS = (
    "op", "dtype", "kind", "heads", "block", "batch", "ctx", "zp", "group",
    "n", "k", "m", "rows", "hidden",
)  # fmt: skip
KEPT_STATUS = ("ok", "wrong", "failed")
EXACT = ("median_us",)
SHORT = ("p90_us", "min_us", "pct_floor", "pct_ceiling", "pct_roofline")


def fmt_exact(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return repr(float(v)) if isinstance(v, float) else str(v)


def fmt_short(v: Any) -> str:
    if v is None or isinstance(v, bool):
        return ""
    if isinstance(v, (int, float)):
        return "" if math.isnan(v) else f"{v:.6g}"
    return str(v)


def _extra(pairs: Iterable[tuple[str, Any]]) -> str:
    return ";".join(f"{k}={fmt_short(v)}" for k, v in pairs if v is not None)


def case_key(rec: dict[str, Any], fields: Sequence[str]) -> str:
    parts = []
    for f in fields:
        v = rec.get(f)
        if v is None:
            continue
        parts.append(str(v) if f in ("op", "dtype") else f"{f}={v}")
    return " ".join(parts)


def _commit(meta: dict[str, Any]) -> str:
    git = meta.get("git") or {}
    c = str(git.get("commit") or "")
    if not c or c == "unknown":
        return ""
    return c[:12] + ("+dirty" if git.get("dirty") else "")


def _date(meta: dict[str, Any]) -> str:
    d = str(meta.get("date") or "")
    return d.replace("+00:00", "Z")


def git_added_date(path: Path) -> str:
    """Date of the commit that added path (YYYY-MM-DD), "" when untracked."""
    try:
        out = subprocess.run(
            ["git", "log", "--diff-filter=A", "--format=%ad", "--date=short", "--", str(path)],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=30, check=True,
        ).stdout.split()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""
    return out[-1] if out else ""  # the first add when several


def _bench_rows(
    records: Iterable[dict[str, Any]], fields: Sequence[str], extra_case: str = ""
) -> list[dict[str, str]]:
    rows = []
    for r in records:
        if r.get("status") not in KEPT_STATUS:
            continue
        case = case_key(r, fields) + (f" {extra_case}" if extra_case else "")
        row = {
            "case": case,
            "impl": str(r.get("impl", "")),
            "method": str(r.get("method", "")),
            "status": str(r.get("status")),
            "bound": str(r.get("bound") or ""),
            "extra": "",
        }
        for f in EXACT:
            row[f] = fmt_exact(r.get(f))
        for f in SHORT:
            row[f] = fmt_short(r.get(f))
        rows.append(row)
    return rows


def _family(doc: dict[str, Any], records: Sequence[dict[str, Any]]) -> str:
    if doc.get("benchmark"):
        return str(doc["benchmark"])
    ops = {str(r.get("op", "")) for r in records}
    if ops & {"rms_norm", "fused_add_rms_norm"}:
        return "layernorm"
    if any(o.startswith("w4a16") for o in ops):
        return "w4a16"
    return "attention" if ops else "?"


def case_fields(doc: dict[str, Any], records: Sequence[dict[str, Any]]) -> list[str]:
    """The fields that name a case: the file's config.key_fields (less impl
    and method), else the CASE_FIELDS its records have."""
    kf = (doc.get("config") or {}).get("key_fields")
    if kf:
        return [f for f in kf if f not in ("impl", "method")]
    present = {k for r in records for k in r}
    return [f for f in CASE_FIELDS if f in present]


def rows_from_doc(doc: dict[str, Any]) -> list[dict[str, str]]:
    """Rows (without source/date) of one results file; ValueError when its
    shape is none of the known ones."""
    meta = doc.get("metadata") or {}
    common = {"commit": _commit(meta), "device": str(meta.get("device") or "")}
    schema = str(doc.get("schema") or "")
    recs = doc.get("records")
    rows: list[dict[str, str]]
    if schema == "vllm-myops-bench/1" and isinstance(recs, list):
        rows = _bench_rows(recs, case_fields(doc, recs))
        fam = _family(doc, recs)
    elif isinstance(recs, dict) and "configs" in doc:
        # Layout sweep: one build, several run-time layouts, records per layout.
        flat = [r for v in recs.values() for r in v]
        fields = case_fields(doc, flat)
        rows = []
        for cfg in doc["configs"]:
            rows += _bench_rows(recs.get(str(cfg), []), fields, f"cfg={cfg}")
        fam = _family(doc, flat)
    elif schema.startswith("vllm-myops-bench-serving/"):
        rows, fam = _serving_rows(doc), "e2e"
    elif {"run", "kinds"} <= doc.keys():
        rows, fam = _system_rows(doc), "system"
    else:
        raise ValueError(
            f"unknown results shape (schema {schema!r}, keys {sorted(doc)[:8]})"
        )
    for row in rows:
        row.update(common, family=fam)
    return rows


def _serving_rows(doc: dict[str, Any]) -> list[dict[str, str]]:
    cfg = doc.get("config") or {}
    model = cfg.get("preset") or Path(str(cfg.get("model") or "model")).name
    rows = []
    for side, levels in (doc.get("summary") or {}).items():
        for level, s in levels.items():
            if s.get("output_tok_per_s") is None:
                continue
            lvl = (
                f"c={level}"
                if level.isdigit()
                else level.replace("_c", " c=").replace("ctx", "ctx=")
            )
            lat = s.get("latency_p50_s")
            rows.append({
                "case": f"{model} {lvl} max_tokens={cfg.get('max_tokens')}",
                "impl": side, "method": "serving", "status": "ok",
                "median_us": fmt_exact(lat * 1e6 if lat is not None else None),
                "extra": _extra([
                    ("tok_s", s.get("output_tok_per_s")), ("req_s", s.get("req_per_s")),
                    ("p95_s", s.get("latency_p95_s")),
                    ("ttft_ms", _scale(s.get("ttft_p50_s"), 1e3)),
                    ("tpot_ms", _scale(s.get("tpot_p50_s"), 1e3)),
                ]),
            })  # fmt: skip
    return rows


def _scale(v: float | None, f: float) -> float | None:
    return None if v is None else v * f


def _system_rows(doc: dict[str, Any]) -> list[dict[str, str]]:
    run = doc["run"]
    head = (
        f"{run.get('model')} c={run.get('concurrency')} prompt={run.get('prompt_len')} "
        f"decode_steps={run.get('decode_steps')}"
    )
    rows = []
    for kind, k in doc["kinds"].items():
        rows.append({
            "case": f"{head} {kind} part=step", "impl": str(run.get("provider")),
            "method": "profile_step", "status": "ok",
            "median_us": fmt_exact(k.get("wall_us")),
            "extra": _extra([
                ("steps", k.get("steps")), ("busy_us", k.get("busy_us")),
                ("idle_us", k.get("idle_us")), ("launches", k.get("launches_per_step")),
                ("median_kernel_us", k.get("median_kernel_us")),
                ("median_gap_us", k.get("median_gap_us")),
            ]),
        })  # fmt: skip
        for fam, f in (k.get("families") or {}).items():
            rows.append({
                "case": f"{head} {kind} part={fam.replace(' ', '_')}",
                "impl": str(run.get("provider")), "method": "profile_step",
                "status": "ok", "median_us": fmt_exact(f.get("us_per_step")),
                "extra": _extra([
                    ("launches", f.get("launches_per_step")), ("share", f.get("share")),
                ]),
            })  # fmt: skip
    for row in rows:
        for c in COLUMNS:
            row.setdefault(c, "")
    return rows


def rows_for_file(
    path: Path, source: str, date: str | None = None
) -> list[dict[str, str]]:
    doc = json.loads(Path(path).read_text())
    rows = rows_from_doc(doc)
    when = date or _date(doc.get("metadata") or {}) or git_added_date(path)
    if not when:
        when = datetime.date.today().isoformat()
    for row in rows:
        row["source"] = source
        row["date"] = when
        for c in COLUMNS:
            row.setdefault(c, "")
    return rows


def read_csv(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def write_rows(path: Path, rows: Sequence[dict[str, str]], *, append: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.is_file() or not append
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    if new:
        w.writeheader()
    w.writerows(rows)
    with path.open("w" if new else "a", newline="") as f:
        f.write(buf.getvalue())


def append(path: Path, rows: Sequence[dict[str, str]]) -> None:
    """Append rows of one source; refuses a source already in the file."""
    sources = {r["source"] for r in rows}
    have = {r["source"] for r in read_csv(path)} & sources
    if have:
        raise ValueError(f"{path.name} already has source {sorted(have)}")
    if path.is_file():
        with path.open() as f:
            header = f.readline().strip().split(",")
        if header != COLUMNS:
            raise ValueError(f"{path.name}: columns {header}, expected {COLUMNS}")
    write_rows(path, rows, append=True)


def verify(csv_rows: Sequence[dict[str, str]], path: Path, source: str) -> list[str]:
    """Problems: a record of the file with a number whose row is missing or
    differs in the CSV (median exactly, the others as written)."""
    want = rows_for_file(path, source)
    have: dict[tuple[str, ...], dict[str, str]] = {}
    for r in csv_rows:
        if r["source"] == source:
            have[(r["case"], r["impl"], r["method"])] = r
    problems = []
    if len(want) != sum(1 for r in csv_rows if r["source"] == source):
        problems.append(f"{source}: {len(want)} rows expected")
    doc = json.loads(path.read_text())
    n_numbers = _count_medians(doc)
    if n_numbers != sum(1 for r in want if r["median_us"]):
        problems.append(f"{source}: {n_numbers} medians in the file, {len(want)} rows")
    for w in want:
        h = have.get((w["case"], w["impl"], w["method"]))
        if h is None:
            problems.append(
                f"{source}: no row for {w['case']} {w['impl']} {w['method']}"
            )
            continue
        for c in COLUMNS[2:]:  # source matched; the date may be today's
            if h[c] != w[c]:
                problems.append(
                    f"{source}: {w['case']} {w['impl']}: {c} {h[c]!r} != {w[c]!r}"
                )
        if w["median_us"] and float(h["median_us"]) != float(w["median_us"]):
            problems.append(f"{source}: median differs")
    return problems


def _count_medians(doc: dict[str, Any]) -> int:
    """Numbers the file holds that rows carry as median_us (an independent
    count over the raw JSON)."""
    recs = doc.get("records")
    if isinstance(recs, dict):
        recs = [r for v in recs.values() for r in v]
    if isinstance(recs, list):
        return sum(
            1 for r in recs
            if r.get("status") in KEPT_STATUS and r.get("median_us") is not None
        )  # fmt: skip
    if "summary" in doc:
        return sum(
            1 for lv in doc["summary"].values() for s in lv.values()
            if s.get("output_tok_per_s") is not None and s.get("latency_p50_s") is not None
        )  # fmt: skip
    if "kinds" in doc:
        return sum(
            (k.get("wall_us") is not None) + len(k.get("families") or {})
            for k in doc["kinds"].values()
        )
    return 0


def device_of(rel: str) -> str:
    """The device of an archived file: its name's (or its top folder's)
    prefix before the first '_' (h200_bf16.json -> h200)."""
    return rel.split("/")[0].split("_")[0]


def convert(
    archive: Path, out_dir: Path = HISTORY_DIR
) -> dict[str, list[dict[str, str]]]:
    """Every JSON under archive into out_dir/<device>.csv (rows ordered by
    date, then source), verified by reading the CSVs back."""
    by_dev: dict[str, list[dict[str, str]]] = {}
    files = sorted(p for p in archive.rglob("*.json"))
    for p in files:
        rel = p.relative_to(archive).as_posix()
        source = rel[: -len(".json")]
        by_dev.setdefault(device_of(rel), []).extend(rows_for_file(p, source))
    for dev, rows in by_dev.items():
        rows.sort(key=lambda r: (r["date"][:10], r["source"]))
        write_rows(out_dir / f"{dev}.csv", rows, append=False)
    problems = []
    for p in files:
        rel = p.relative_to(archive).as_posix()
        problems += verify(read_csv(out_dir / f"{device_of(rel)}.csv"), p, rel[:-5])
    if problems:
        raise ValueError("conversion not lossless:\n" + "\n".join(problems[:20]))
    return by_dev


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.common.history",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    sub = ap.add_subparsers(dest="command", required=True)
    for name, help_ in (
        ("append", "append one results JSON to history/<device>.csv"),
        ("check", "verify that history/<device>.csv carries a results JSON"),
    ):
        a = sub.add_parser(name, help=help_)
        a.add_argument(
            "--device", required=True, help="h200, h100, cpu, ... (the CSV's name)"
        )
        a.add_argument(
            "--source", required=True, help="the run's name (e.g. the file's stem)"
        )
        a.add_argument("--date", help="date when the file records none")
        a.add_argument("--dir", type=Path, default=HISTORY_DIR, help=argparse.SUPPRESS)
        a.add_argument("file", type=Path)
    c = sub.add_parser(
        "convert", help="archive folder -> history/<device>.csv (overwrites)"
    )
    c.add_argument("archive", type=Path)
    c.add_argument("--dir", type=Path, default=HISTORY_DIR)
    args = ap.parse_args(argv)
    if args.command == "convert":
        for dev, rows in convert(args.archive, args.dir).items():
            path = args.dir / f"{dev}.csv"
            print(f"{path.name}: {len(rows)} rows, {path.stat().st_size} bytes")
        return 0
    path = args.dir / f"{args.device}.csv"
    if args.command == "check":
        problems = verify(read_csv(path), args.file, args.source)
        print("\n".join(problems) or f"{path.name}: {args.source} carried")
        return 1 if problems else 0
    rows = rows_for_file(args.file, args.source, args.date)
    try:
        append(path, rows)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{path.name}: +{len(rows)} rows ({args.source})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
