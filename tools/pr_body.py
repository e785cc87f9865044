# SPDX-License-Identifier: Apache-2.0
"""Writes a pull-request body: PR_TEMPLATE.md filled from real result files.

    python -m tools.pr_body \\
        --purpose "Faster <op> ..." --issue 4 \\
        --junit cpu=out/junit-cpu.xml --junit "H200=out/junit-h200.xml" \\
        --bench out/before-h200.json out/after-h200.json \\
        --bench out/before-h100.json out/after-h100.json \\
        --lm-eval out/lm_eval_gate.json \\
        --command "pytest -v -s tests/kernels --junitxml=out/junit-cpu.xml" \\
        --pre-commit-log out/pre-commit.log --dco-range origin/main..HEAD \\
        --ai-assistance "Claude helped write the tests; every line reviewed." \\
        -o PR_BODY.md

Inputs, each optional and repeatable where it makes sense:

- ``--junit [LABEL=]PATH``: pytest ``--junitxml`` files (one per machine);
  ``--pytest-log [LABEL=]PATH``: a pytest console log (its final
  ``N passed, M skipped in Xs`` line) when no XML was written.
- ``--bench BEFORE AFTER``: a ``--compare`` pair of JSON files written by a
  benchmark's ``--save`` (``benchmarks.common.results``, schema
  ``vllm-myops-bench/1``), one pair per GPU/CPU: the table has one row per
  case of the gated implementation (``--impl``, default ``ours``) with the
  time before and after, the speedup, GB/s and % of the copy ceiling measured
  in the same run (and % of the per-shape floor), plus ``--vs IMPL`` columns
  (after-run speedup over a baseline such as ``vllm``). For a new kernel,
  ``--bench RUN RUN --before-impl vllm`` puts vLLM's kernel from the same
  run in the "before" column.
- ``--lm-eval PATH``: the lm-eval gate's ``--gate-report`` JSON (expected
  value, myops and native metric values, top-1 agreement) or a raw lm-eval
  results JSON (``results`` -> task -> metric), then with
  ``--lm-eval-baseline PATH`` for the deltas.
- ``--command CMD``: commands actually run, for the Test Plan (the benchmark
  and gate commands are also read from their files).
- ``--pre-commit-log PATH``, ``--dco-range A..B``, ``--ai-assistance TEXT``:
  evidence for the checklist.

The template's ``<!-- pr-body:NAME -->`` blocks are replaced and the
checklist boxes whose evidence is present and passing are ticked; the rest
stays for the author. Exit status 0, or 2 on unreadable input.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import results, roofline

GATE_SCHEMA = "vllm-myops-lm-eval-gate/1"
BLOCK_RE = re.compile(
    r"<!-- pr-body:(?P<name>[\w-]+) -->\n.*?<!-- /pr-body:(?P=name) -->", re.S
)
CHECK_RE = re.compile(
    r"^- \[ \] (?P<text>.*?)\s*<!-- check:(?P<id>[\w-]+) -->\s*$", re.M
)
COMMENT_RE = re.compile(r"<!--(?!\s*/?pr-body:|\s*check:).*?-->\n?", re.S)


class InputError(Exception):
    pass


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------


@dataclass
class TestSummary:
    label: str
    source: str
    tests: int = 0
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    seconds: float | None = None
    opcheck: int = 0  # test cases with "opcheck" in their id
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.tests > 0 and self.failed == 0 and self.errors == 0


def _label_path(spec: str) -> tuple[str | None, Path]:
    label, sep, path = spec.partition("=")
    if sep and label and not Path(spec).exists():
        return label, Path(path)
    return None, Path(spec)


def parse_junit(spec: str) -> TestSummary:
    label, path = _label_path(spec)
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        raise InputError(f"{path}: not a readable JUnit XML file ({e})") from e
    s = TestSummary(label or path.stem, str(path))
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    total_time = 0.0
    for suite in suites:
        total_time += float(suite.get("time") or 0.0)
        for case in suite.iter("testcase"):
            s.tests += 1
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            if "opcheck" in name.lower():
                s.opcheck += 1
            if case.find("failure") is not None:
                s.failed += 1
                s.failures.append(name)
            elif case.find("error") is not None:
                s.errors += 1
                s.failures.append(name)
            elif case.find("skipped") is not None:
                s.skipped += 1
            else:
                s.passed += 1
    s.seconds = total_time or None
    return s


_SUMMARY_RE = re.compile(
    r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)"
)


def parse_pytest_log(spec: str) -> TestSummary:
    label, path = _label_path(spec)
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e})") from e
    lines = [ln for ln in text.splitlines() if re.search(r"\d+ (passed|failed)", ln)]
    if not lines:
        raise InputError(f"{path}: no pytest summary line ('N passed ...') found")
    last = lines[-1]
    counts: dict[str, int] = {}
    for n, word in _SUMMARY_RE.findall(last):
        key = "errors" if word.startswith("error") else word
        counts[key] = counts.get(key, 0) + int(n)
    s = TestSummary(label or path.stem, str(path))
    s.passed = counts.get("passed", 0) + counts.get("xpassed", 0)
    s.failed = counts.get("failed", 0)
    s.errors = counts.get("errors", 0)
    s.skipped = counts.get("skipped", 0) + counts.get("xfailed", 0)
    s.tests = s.passed + s.failed + s.errors + s.skipped
    m = re.search(r" in ([\d.]+)s", last)
    s.seconds = float(m.group(1)) if m else None
    s.opcheck = len(re.findall(r"opcheck\S*\s+PASSED", text))
    return s


# --------------------------------------------------------------------------
# Benchmarks
# --------------------------------------------------------------------------


def load_bench(path: str | Path) -> dict[str, Any]:
    try:
        doc = results.load_results(path)
        results.case_fields(doc)
    except (OSError, ValueError) as e:
        raise InputError(
            f"{path}: not a benchmark results file ({e}; a file written by a "
            "benchmark's --save)"
        ) from e
    return doc


@dataclass
class BenchRow:
    device: str
    case: dict[str, Any]
    before_us: float | None
    after_us: float | None
    status: str
    gbps: float | None
    pct_ceiling: float | None
    pct_floor: float | None
    vs: dict[str, float | None]

    @property
    def speedup(self) -> float | None:
        if self.before_us and self.after_us:
            return self.before_us / self.after_us
        return None


def _pct_ceiling(rec: dict[str, Any], doc: dict[str, Any]) -> float | None:
    if rec.get("pct_ceiling") is not None:
        return float(rec["pct_ceiling"])
    bw = (doc.get("ceiling") or {}).get("bandwidth_bps")
    if rec.get("bytes") and rec.get("median_us"):
        return roofline.pct_of_ceiling(rec["bytes"], rec["median_us"], bw)
    return None


def bench_rows(
    before: dict[str, Any],
    after: dict[str, Any],
    impl: str = "ours",
    vs: list[str] | None = None,
    before_impl: str | None = None,
) -> list[BenchRow]:
    """One row per case of `impl` in the after-run, matched to the before-run
    by the benchmark's key fields. `before_impl` (default `impl`) picks the
    before-run's implementation: for a new kernel, "before" is what users
    run today, e.g. vLLM's own kernel measured in the same run."""
    fields = results.case_fields(after)
    old = results.records_by_impl(before, fields).get(before_impl or impl, {})
    by_impl = results.records_by_impl(after, fields)
    device = str(after.get("metadata", {}).get("device", "?"))
    rows = []
    for k, r in by_impl.get(impl, {}).items():
        o = old.get(k)
        ok_after = r.get("status") == "ok"
        ok_before = o is not None and o.get("status") == "ok"
        status = "ok" if ok_after else str(r.get("status"))
        if o is None:
            status += " (new case)"
        elif not ok_before:
            status += f" (before: {o.get('status')})"
        speed_vs: dict[str, float | None] = {}
        for other in vs or []:
            b = by_impl.get(other, {}).get(k)
            ok = b is not None and b.get("status") == "ok" and ok_after
            speed_vs[other] = b["median_us"] / r["median_us"] if ok else None  # type: ignore[index]
        rows.append(
            BenchRow(
                device=device,
                case={f: r.get(f) for f in fields},
                before_us=o.get("median_us") if ok_before else None,  # type: ignore[union-attr]
                after_us=r.get("median_us") if ok_after else None,
                status=status,
                gbps=r.get("gbps") if ok_after else None,
                pct_ceiling=_pct_ceiling(r, after) if ok_after else None,
                pct_floor=r.get("pct_floor") if ok_after else None,
                vs=speed_vs,
            )
        )
    rows.sort(key=lambda row: tuple(str(v).zfill(8) for v in row.case.values()))
    return rows


def _fmt(x: float | None, spec: str = ".2f", suffix: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:{spec}}{suffix}"


def _is_size(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def bench_table(rows: list[BenchRow], vs: list[str]) -> str:
    """One line per case. The case's integer fields (rows, hidden; m, n, k)
    form one shape column, its other fields one column each; the timing
    method is shown only when the rows differ in it."""
    fields = list(rows[0].case) if rows else []
    sizes = [f for f in fields if all(_is_size(r.case.get(f)) for r in rows)]
    named = [f for f in fields if f not in sizes and f != "method"]
    methods = {str(r.case.get("method")) for r in rows}
    head = ["device", *named]
    if sizes:
        head.append(f"shape ({'×'.join(sizes)})")
    if len(methods) > 1:
        head.append("timing")
    head += ["before µs", "after µs", "speedup", "GB/s", "% of ceiling", "% of floor"]
    head += [f"vs {v}" for v in vs]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r.device, *(str(r.case.get(f)) for f in named)]
        if sizes:
            cells.append("×".join(str(r.case.get(f)) for f in sizes))
        if len(methods) > 1:
            cells.append(str(r.case.get("method")))
        cells += [
            _fmt(r.before_us),
            _fmt(r.after_us),
            _fmt(r.speedup, ".2f", "×"),
            _fmt(r.gbps, ".1f"),
            _fmt(r.pct_ceiling, ".1f", "%"),
            _fmt(r.pct_floor, ".1f", "%"),
        ]
        cells += [_fmt(r.vs.get(v), ".2f", "×") for v in vs]
        if r.status != "ok":
            cells[head.index("before µs")] += f" ({r.status})"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def bench_context(before: dict[str, Any], after: dict[str, Any]) -> str:
    m_b, m_a = before.get("metadata", {}), after.get("metadata", {})
    cfg = after.get("config", {})
    ceil = after.get("ceiling") or {}
    parts = [
        f"{m_a.get('device', '?')}",
        f"torch {m_a.get('torch', '?')}",
        f"before {str(m_b.get('git', {}).get('commit', '?'))[:12]}"
        f" (sources {m_b.get('source_hash', '?')})",
        f"after {str(m_a.get('git', {}).get('commit', '?'))[:12]}"
        f" (sources {m_a.get('source_hash', '?')})",
    ]
    if ceil.get("bandwidth_bps"):
        parts.append(
            f"ceiling {ceil['bandwidth_bps'] / 1e9:.1f} GB/s measured in the run "
            f"({ceil.get('method', 'copy')})"
        )
    if cfg.get("timer"):
        parts.append(f"timing: {cfg['timer']}")
    if m_b.get("device") != m_a.get("device"):
        parts.append(f"WARNING: before ran on {m_b.get('device')!r}")
    return "; ".join(parts)


# --------------------------------------------------------------------------
# lm-eval
# --------------------------------------------------------------------------


@dataclass
class EvalRow:
    model: str
    task: str
    metric: str
    expected: float | None
    value: float | None  # with our kernels
    baseline: float | None  # native / before
    passed: bool | None
    agreement: str = ""


def _results_metrics(doc: dict[str, Any]) -> dict[tuple[str, str], float]:
    out = {}
    for task, metrics in (doc.get("results") or {}).items():
        for name, v in metrics.items():
            numeric = isinstance(v, (int, float)) and not isinstance(v, bool)
            if numeric and "," in name and "_stderr" not in name:
                out[(task, name)] = float(v)
    return out


def load_lm_eval(path: str, baseline: str | None) -> tuple[list[EvalRow], list[str]]:
    """Rows and the commands recorded in the file (gate reports carry them)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: not a readable JSON file ({e})") from e
    rows: list[EvalRow] = []
    commands: list[str] = []
    if doc.get("schema") == GATE_SCHEMA:
        if doc.get("command"):
            commands.append(str(doc["command"]))
        for c in doc.get("configs", []):
            if c.get("command"):
                commands.append(str(c["command"]))
            ranks = c.get("rankings", {})
            for m in c.get("metrics", []):
                r = ranks.get(m["task"])
                agree = f"{r['agree']}/{r['docs']} top-1 identical" if r else ""
                rows.append(
                    EvalRow(
                        c.get("model_name", "?"),
                        m["task"],
                        m["metric"],
                        m.get("expected"),
                        m.get("myops"),
                        m.get("native"),
                        bool(m.get("passed")) and not c.get("problems"),
                        agree,
                    )
                )
        return rows, commands
    if "results" not in doc:
        raise InputError(
            f"{path}: neither a gate report ({GATE_SCHEMA}) nor lm-eval results"
        )
    base: dict[tuple[str, str], float] = {}
    if baseline:
        try:
            base = _results_metrics(json.loads(Path(baseline).read_text()))
        except (OSError, ValueError) as e:
            raise InputError(f"{baseline}: not a readable JSON file ({e})") from e
    model = str(doc.get("model_name") or doc.get("config", {}).get("model_args") or "?")
    for (task, metric), v in sorted(_results_metrics(doc).items()):
        rows.append(
            EvalRow(model, task, metric, None, v, base.get((task, metric)), None)
        )
    return rows, commands


def eval_table(rows: list[EvalRow]) -> str:
    head = [
        "model",
        "task",
        "metric",
        "expected",
        "myops",
        "native / before",
        "Δ",
        "ranking",
        "gate",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        delta = (
            r.value - r.baseline
            if r.value is not None and r.baseline is not None
            else None
        )
        gate = "–" if r.passed is None else ("pass" if r.passed else "FAIL")
        lines.append(
            "| "
            + " | ".join(
                [
                    r.model,
                    r.task,
                    f"`{r.metric}`",
                    _fmt(r.expected, ".4f"),
                    _fmt(r.value, ".4f"),
                    _fmt(r.baseline, ".4f"),
                    _fmt(delta, "+.4f"),
                    r.agreement or "–",
                    gate,
                ]
            )
            + " |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Lint and DCO evidence
# --------------------------------------------------------------------------


def pre_commit_passed(path: str) -> tuple[bool, str]:
    text = Path(path).read_text(errors="replace")
    results = re.findall(r"^(.+?)\.{3,}.*?(Passed|Failed|Skipped)\s*$", text, re.M)
    failed = [name.strip() for name, st in results if st == "Failed"]
    if not results:
        return False, "no hook results found in the log"
    if failed:
        return False, f"failed hooks: {', '.join(failed)}"
    n = sum(st == "Passed" for _, st in results)
    return (
        True,
        f"{n} hooks passed, {sum(st == 'Skipped' for _, st in results)} skipped",
    )


def dco_signed(rev_range: str) -> tuple[bool, str]:
    try:
        out = subprocess.run(
            ["git", "log", "--no-merges", "--format=%H%x00%B%x01", rev_range],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        return False, f"git log {rev_range} failed: {e}"
    commits = [c for c in out.split("\x01") if c.strip()]
    unsigned = [
        c.strip().split("\x00")[0][:12]
        for c in commits
        if not re.search(r"^Signed-off-by: .+ <[^>]+@[^>]+>\s*$", c, re.M)
    ]
    if not commits:
        return False, f"no commits in {rev_range}"
    if unsigned:
        return (
            False,
            f"{len(unsigned)} of {len(commits)} commits not signed off: {unsigned}",
        )
    return True, f"all {len(commits)} commits in {rev_range} signed off"


# --------------------------------------------------------------------------
# Assembly
# --------------------------------------------------------------------------


def find_template(explicit: str | None) -> Path:
    candidates = [Path(explicit)] if explicit else []
    candidates += [
        Path.cwd() / "PR_TEMPLATE.md",
        Path(__file__).resolve().parents[1] / "PR_TEMPLATE.md",
    ]
    for c in candidates:
        if c.is_file():
            return c
    raise InputError("PR_TEMPLATE.md not found (give --template)")


def _code(commands: list[str]) -> str:
    return "```bash\n" + "\n".join(commands) + "\n```"


def build_body(args: argparse.Namespace) -> str:
    template = find_template(args.template).read_text()
    tests = [parse_junit(s) for s in args.junit] + [
        parse_pytest_log(s) for s in args.pytest_log
    ]
    vs = list(args.vs)
    bench_pairs = [(load_bench(b), load_bench(a)) for b, a in args.bench]
    eval_rows: list[EvalRow] = []
    eval_cmds: list[str] = []
    for p in args.lm_eval:
        rows, cmds = load_lm_eval(p, args.lm_eval_baseline)
        eval_rows += rows
        eval_cmds += cmds

    # Commands actually run: given ones first, then what the files recorded.
    commands = list(args.command)
    for _, after in bench_pairs:
        meta = after.get("metadata", {})
        cmd = meta.get("command")
        if not cmd and meta.get("argv"):  # files written before "command" was recorded
            cmd = "python " + shlex.join(str(a) for a in meta["argv"])
        if cmd and cmd not in commands:
            commands.append(cmd)
    for c in eval_cmds:
        if c not in commands:
            commands.append(c)

    blocks: dict[str, str] = {}
    purpose = []
    if args.issue:
        purpose.append(f"FIX #{args.issue}")
    if args.purpose:
        purpose.append(args.purpose)
    if purpose:
        blocks["purpose"] = "\n\n".join(purpose)
    if commands:
        blocks["test-plan"] = "Commands run for this PR:\n\n" + _code(commands)

    result: list[str] = []
    if tests:
        result.append("### Tests\n")
        result.append(
            "| run | passed | failed | errors | skipped | total | time | source |"
        )
        result.append("|---|---|---|---|---|---|---|---|")
        for t in tests:
            result.append(
                f"| {t.label} | {t.passed} | {t.failed} | {t.errors} | {t.skipped} | "
                f"{t.tests} | {_fmt(t.seconds, '.1f', ' s')} | `{t.source}` |"
            )
        failing = [f for t in tests for f in t.failures]
        if failing:
            result.append("\nFailing: " + ", ".join(f"`{f}`" for f in failing[:20]))
        opcheck = sum(t.opcheck for t in tests)
        if opcheck:
            result.append(f"\n`torch.library.opcheck` cases among them: {opcheck}.")
    if bench_pairs:
        result.append("\n### Performance (before → after)\n")
        all_rows = []
        for before, after in bench_pairs:
            result.append(f"- {bench_context(before, after)}")
            all_rows += bench_rows(before, after, args.impl, vs, args.before_impl)
        result.append("")
        result.append(bench_table(all_rows, vs))
        was = args.before_impl or args.impl
        result.append(
            f"\nBefore: `{was}`, after: `{args.impl}`; median per call; GB/s = bytes the op must move / time; "
            "% of ceiling = of the device-to-device copy bandwidth measured in the same "
            "run; % of floor = of an elementwise pass over the same bytes timed the same "
            "way."
        )
    if eval_rows:
        result.append("\n### Accuracy (lm-eval)\n")
        result.append(eval_table(eval_rows))
        result.append(
            "\nGate: measured ≥ expected × (1 − rtol), as vLLM checks (≤ expected × "
            "(1 + rtol) for lower-is-better metrics such as perplexity); with "
            "compare_native also the same top-1 choice as vLLM's native kernels on every "
            "document, and perplexities within the config's bound of native's."
        )
    if result:
        blocks["test-result"] = "\n".join(result).strip()
    if args.ai_assistance:
        blocks["ai"] = args.ai_assistance

    # Checklist evidence.
    ticks: dict[str, str] = {}
    if tests and all(t.ok for t in tests):
        n = sum(t.passed for t in tests)
        note = f"{n} passed on {', '.join(t.label for t in tests)}"
        if sum(t.opcheck for t in tests):
            ticks["tests"] = note
    devices = {str(a.get("metadata", {}).get("device")) for _, a in bench_pairs}
    if bench_pairs:
        cases = {
            tuple(sorted(r.case.items()))
            for b, a in bench_pairs
            for r in bench_rows(b, a)
        }
        if len(devices) >= 2 and len(cases) >= 2:
            ticks["bench"] = f"{len(cases)} cases on {len(devices)} devices"
    gated = [r.passed for r in eval_rows if r.passed is not None]
    if gated and all(gated):
        ticks["lm-eval"] = f"gate passed ({len(gated)} metrics)"
    if args.pre_commit_log:
        ok, why = pre_commit_passed(args.pre_commit_log)
        if ok:
            ticks["pre-commit"] = why
    if args.dco_range:
        ok, why = dco_signed(args.dco_range)
        if ok:
            ticks["dco"] = why
    if args.ai_assistance:
        ticks["ai"] = "disclosed"

    body = BLOCK_RE.sub(lambda m: blocks.get(m.group("name"), m.group(0)), template)

    def tick(m: re.Match[str]) -> str:
        why = ticks.get(m.group("id"))
        if why is None:
            return f"- [ ] {m.group('text')}"
        return f"- [x] {m.group('text')} ({why})"

    body = CHECK_RE.sub(tick, body)
    # Drop the template's guidance comments and markers; keep it readable.
    body = COMMENT_RE.sub("", body)
    body = re.sub(r"<!-- /?pr-body:[\w-]+ -->\n?", "", body)
    body = re.sub(r"^# PR description template.*\n+", "", body)
    body = re.sub(r"\n+(#{1,6} )", r"\n\n\1", body)
    return re.sub(r"\n{3,}", "\n\n", body).strip() + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m tools.pr_body",
        description="Fill PR_TEMPLATE.md from test, benchmark and lm-eval result files.",
    )
    ap.add_argument(
        "--template", help="PR template (default: PR_TEMPLATE.md of the repo)"
    )
    ap.add_argument("-o", "--output", help="write the body here (default: stdout)")
    ap.add_argument("--purpose", help="Purpose text (what changed and why)")
    ap.add_argument("--issue", help="issue number the PR fixes")
    ap.add_argument("--junit", action="append", default=[], metavar="[LABEL=]XML")
    ap.add_argument("--pytest-log", action="append", default=[], metavar="[LABEL=]LOG")
    ap.add_argument(
        "--bench", nargs=2, action="append", default=[], metavar=("BEFORE", "AFTER")
    )
    ap.add_argument("--impl", default="ours", help="implementation the table is about")
    ap.add_argument(
        "--before-impl",
        help="implementation of the before-file's rows (default: --impl); e.g. "
        "vllm to compare against vLLM's kernel measured in the same run",
    )
    ap.add_argument(
        "--vs",
        action="append",
        default=[],
        metavar="IMPL",
        help="baseline speedup column",
    )
    ap.add_argument("--lm-eval", action="append", default=[], metavar="JSON")
    ap.add_argument("--lm-eval-baseline", metavar="JSON")
    ap.add_argument("--command", action="append", default=[], metavar="CMD")
    ap.add_argument("--pre-commit-log")
    ap.add_argument("--dco-range", metavar="A..B")
    ap.add_argument("--ai-assistance", metavar="TEXT")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        body = build_body(args)
    except InputError as e:
        print(f"tools.pr_body: {e}", file=sys.stderr)
        return 2
    if args.output:
        Path(args.output).write_text(body)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
