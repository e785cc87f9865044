# SPDX-License-Identifier: Apache-2.0
"""tools.pr_body on result files written by the project's own tools.

- pytest JUnit XML: made here, by running pytest on a small test module.
- benchmark JSON (before/after): made here, by running
  ``python -m benchmarks.kernels.benchmark_layernorm`` on the CPU twice with a narrow
  sweep (1x64, ours only: ~15 s a run).
- lm-eval gate report and raw lm-eval results: fixtures under
  tests/tooling/data/, written by a real run of
  ``pytest .buildkite/lm-eval-harness/test_lm_eval_correctness.py
  --config-list-file=.buildkite/lm-eval-harness/configs/models-cpu.txt
  --gate-report=tests/tooling/data/lm_eval_gate.json`` (about 5 minutes on two
  cores, too long to repeat here; CI runs that gate as its own step).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tools import pr_body

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
GATE = DATA / "lm_eval_gate.json"
BENCH = "benchmarks.kernels.benchmark_layernorm"

SAMPLE_TESTS = """\
    import pytest

    def test_reference():
        assert 1 + 1 == 2

    @pytest.mark.parametrize("rows", [0, 1, 83])
    def test_opcheck_rms_norm(rows):
        assert rows >= 0

    @pytest.mark.skip(reason="needs a GPU")
    def test_cuda_graph():
        pass
    """


def _pytest_junit(tmp: Path, name: str, extra: str = "") -> Path:
    mod = tmp / f"test_{name}_sample.py"
    mod.write_text(textwrap.dedent(SAMPLE_TESTS) + textwrap.dedent(extra))
    xml = tmp / f"{name}.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(mod),
         f"--junitxml={xml}", f"--rootdir={tmp}"],
        cwd=tmp,
        capture_output=True,
        check=False,
    )  # fmt: skip
    assert xml.is_file()
    return xml


@pytest.fixture(scope="module")
def junit_ok(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _pytest_junit(tmp_path_factory.mktemp("junit"), "ok")


@pytest.fixture(scope="module")
def junit_failing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    extra = "\n\ndef test_broken():\n    assert 2 + 2 == 5\n"
    return _pytest_junit(tmp_path_factory.mktemp("junit"), "bad", extra)


def _record(results: dict, impl: str, op: str) -> dict:
    """The benchmark JSON record of `impl` for `op`."""
    return next(r for r in results["records"] if r["impl"] == impl and r["op"] == op)


def _table_row_cells(body: str, op: str) -> list[str]:
    """Cells of the before/after table row of `op` in a PR body."""
    row = next(
        ln for ln in body.splitlines() if ln.startswith("| ") and f"| {op} |" in ln
    )
    return [c.strip() for c in row.strip("|").split("|")]


def _run_bench(out: Path) -> Path:
    cmd = [
        sys.executable, "-m", BENCH, "--device", "cpu", "--rows", "1", "--hidden", "64",
        "--impls", "ours", "--target-s", "0.05", "--max-sets", "256", "--save", str(out),
    ]  # fmt: skip
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and out.is_file(), (
        run.stdout[-3000:] + run.stderr[-3000:]
    )
    return out


@pytest.fixture(scope="module")
def bench_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("bench")
    return _run_bench(tmp / "before.json"), _run_bench(tmp / "after.json")


def _body(tmp_path: Path, *args: str) -> str:
    out = tmp_path / "PR_BODY.md"
    rc = pr_body.main(
        [*args, "-o", str(out), "--template", str(REPO / "PR_TEMPLATE.md")]
    )
    assert rc == 0
    return out.read_text()


def _checked(body: str, check_id: str) -> bool:
    line = {
        "tests": "- [{}] Tests:",
        "bench": "- [{}] Benchmark:",
        "lm-eval": "- [{}] Numerics:",
        "pre-commit": "- [{}] `pre-commit run",
        "dco": "- [{}] Every commit",
        "ai": "- [{}] AI assistance",
    }[check_id]
    if line.format("x") in body:
        return True
    assert line.format(" ") in body, (check_id, body)
    return False


def test_body_from_real_result_files(
    tmp_path: Path, junit_ok: Path, bench_pair: tuple[Path, Path]
) -> None:
    before, after = bench_pair
    body = _body(
        tmp_path,
        "--purpose", "RMSNorm kernels at the memory ceiling.",
        "--issue", "4",
        "--junit", f"cpu={junit_ok}",
        "--bench", str(before), str(after),
        "--lm-eval", str(GATE),
        "--command", "pytest -v -s tests/kernels",
        "--ai-assistance", "An AI assistant drafted the tests; reviewed line by line.",
    )  # fmt: skip

    # Sections in vLLM's order, template guidance and markers gone.
    heads = [h for h in re.findall(r"^## (.+)$", body, re.M)]
    assert heads == [
        "Purpose",
        "Test Plan",
        "Test Result",
        "Checklist",
        "AI assistance",
    ]
    assert "<!--" not in body and "FIX #xxxx" not in body
    assert "FIX #4" in body and "memory ceiling" in body

    # Test Plan: the commands given and those the files recorded.
    plan = body.split("## Test Plan")[1].split("## Test Result")[0]
    assert "pytest -v -s tests/kernels" in plan
    assert f"python -m {BENCH} --device cpu" in plan and f"--save {after.name}" in plan
    assert "test_lm_eval_correctness.py" in plan

    # Tests: counts equal the XML's.
    cases = list(ET.parse(junit_ok).getroot().iter("testcase"))
    skipped = sum(c.find("skipped") is not None for c in cases)
    assert (
        f"| cpu | {len(cases) - skipped} | 0 | 0 | {skipped} | {len(cases)} |" in body
    )
    assert "`torch.library.opcheck` cases among them: 3." in body

    # Before/after table: one row per op, numbers from the JSON files.
    b, a = json.loads(before.read_text()), json.loads(after.read_text())
    for op in ("rms_norm", "fused_add_rms_norm"):
        rb, ra = _record(b, "ours", op), _record(a, "ours", op)
        cells = _table_row_cells(body, op)
        assert cells[3] == "1×64"
        assert (
            cells[4] == f"{rb['median_us']:.2f}"
            and cells[5] == f"{ra['median_us']:.2f}"
        )
        assert cells[6] == f"{rb['median_us'] / ra['median_us']:.2f}×"
        assert cells[8] == f"{ra['pct_ceiling']:.1f}%"
    assert "GB/s measured in the run" in body

    # Accuracy: the gate report's values.
    gate = json.loads(GATE.read_text())["configs"][0]
    m = gate["metrics"][0]
    rank = gate["rankings"][m["task"]]
    row = next(ln for ln in body.splitlines() if f"| {m['task']} |" in ln)
    assert f"{m['myops']:.4f}" in row and f"{m['native']:.4f}" in row
    assert f"{rank['agree']}/{rank['docs']} top-1 identical" in row and row.endswith(
        "pass |"
    )

    # Checklist: ticked where the evidence proves it, not elsewhere.
    assert _checked(body, "tests")
    assert _checked(body, "lm-eval")
    assert _checked(body, "ai")
    assert not _checked(body, "bench")  # one device only: several GPUs are required
    assert not _checked(body, "pre-commit") and not _checked(body, "dco")


def test_failing_tests_are_listed_and_not_ticked(
    tmp_path: Path, junit_failing: Path
) -> None:
    body = _body(tmp_path, "--junit", str(junit_failing))
    assert re.search(r"\| bad \| \d+ \| 1 \| 0 \|", body)
    assert "test_broken" in body
    assert not _checked(body, "tests")
    # Blocks without input keep the template's guidance for the author.
    assert "FIX #xxxx" in body


def test_raw_lm_eval_results_with_baseline(tmp_path: Path) -> None:
    gate = json.loads(GATE.read_text())["configs"][0]
    mine = DATA / gate["results_files"]["myops"]
    native = DATA / gate["results_files"]["native"]
    body = _body(tmp_path, "--lm-eval", str(mine), "--lm-eval-baseline", str(native))
    row = next(
        ln for ln in body.splitlines() if "| myops_tiny_mc |" in ln and "acc,none" in ln
    )
    assert "+0.0000" in row  # identical accuracy with both providers


def test_several_devices_tick_the_benchmark_box(
    tmp_path: Path, bench_pair: tuple[Path, Path]
) -> None:
    before, after = bench_pair
    # A second device's pair: the same files relabelled (the logic under test
    # is the per-device grouping, not the measurement).
    b2, a2 = tmp_path / "b2.json", tmp_path / "a2.json"
    for src, dst in ((before, b2), (after, a2)):
        doc = json.loads(src.read_text())
        doc["metadata"]["device"] = "second device"
        dst.write_text(json.dumps(doc))
    body = _body(
        tmp_path,
        "--bench",
        str(before),
        str(after),
        "--bench",
        str(b2),
        str(a2),
        "--vs",
        "floor",
    )
    assert _checked(body, "bench")
    assert "| vs floor |" in body
    assert sum("| second device |" in ln for ln in body.splitlines()) == 2


def test_before_impl_from_the_same_run(
    tmp_path: Path, bench_pair: tuple[Path, Path]
) -> None:
    _, after = bench_pair
    body = _body(tmp_path, "--bench", str(after), str(after), "--before-impl", "floor")
    a = json.loads(after.read_text())
    for op in ("rms_norm", "fused_add_rms_norm"):
        fl, ours = _record(a, "floor", op), _record(a, "ours", op)
        cells = _table_row_cells(body, op)
        assert (
            cells[4] == f"{fl['median_us']:.2f}"
            and cells[5] == f"{ours['median_us']:.2f}"
        )
    assert "Before: `floor`, after: `ours`" in body


def test_pre_commit_log_and_dco_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "pre-commit.log"
    log.write_text(
        "ruff check (lint, autofix)...............................................Passed\n"
        "clang-format (csrc, vLLM style)..........................................Passed\n"
        "check json..........................................(no files to check)Skipped\n"
    )
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "T", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "T", "GIT_COMMITTER_EMAIL": "t@example.org",
           "HOME": str(repo), "PATH": "/usr/bin:/bin:/usr/local/bin"}  # fmt: skip
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "base"],
                 ["commit", "-q", "--allow-empty", "-s", "-m", "kernel"]):  # fmt: skip
        subprocess.run(
            ["git", *args], cwd=repo, env=env, check=True, capture_output=True
        )
    monkeypatch.chdir(repo)
    body = _body(tmp_path, "--pre-commit-log", str(log), "--dco-range", "HEAD~1..HEAD")
    assert _checked(body, "pre-commit") and "2 hooks passed" in body
    assert _checked(body, "dco")
    log.write_text(log.read_text().replace("Passed\nclang", "Failed\nclang", 1))
    body = _body(tmp_path, "--pre-commit-log", str(log), "--dco-range", "HEAD~2..HEAD")
    assert not _checked(body, "pre-commit") and not _checked(body, "dco")


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "something-else"}')
    assert pr_body.main(["--bench", str(bad), str(bad)]) == 2
    assert "expected 'vllm-myops-bench/1'" in capsys.readouterr().err
    assert pr_body.main(["--junit", str(tmp_path / "missing.xml")]) == 2


def test_module_command_line(tmp_path: Path, junit_ok: Path) -> None:
    out = tmp_path / "body.md"
    template = tmp_path / "PR_TEMPLATE.md"
    shutil.copy(REPO / "PR_TEMPLATE.md", template)
    run = subprocess.run(
        [sys.executable, "-m", "tools.pr_body", "--template", str(template),
         "--junit", str(junit_ok), "-o", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert "## Test Result" in out.read_text()
