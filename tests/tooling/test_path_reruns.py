# SPDX-License-Identifier: Apache-2.0
"""tests.kernels.path_reruns: the forced-path reruns it builds from the test
files, how it reads a pytest log, and a real run on the CPU (one process
that passes, one stopped by the timeout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kernels import path_reruns as pr
from tests.kernels.attention import test_paged_attention_cuda as attn
from tests.kernels.quantization import test_w4a16_gemm as w4a16


def test_one_rerun_per_forced_value_with_every_named_test():
    runs = {r.name: r for r in pr.reruns()}
    expected = [f"w4a16_{p}" for p in w4a16.CUDA_PATHS]
    expected += [f"prefill_{p}" for p in attn.PREFILL_PATHS]
    assert sorted(runs) == sorted(expected)
    for p in w4a16.CUDA_PATHS:
        r = runs[f"w4a16_{p}"]
        assert r.env == {w4a16.CUDA_PATH_ENV: p}
        assert r.selection.startswith("cuda and (")
        names = w4a16.CUDA_PATH_TESTS + w4a16.CUDA_PATH_GRAPH_TESTS
        assert all(name in r.selection for name in names)
    for p in attn.PREFILL_PATHS:
        r = runs[f"prefill_{p}"]
        assert r.env == {attn.PREFILL_PATH_ENV: p}
        names = attn.PREFILL_PATH_TESTS + attn.PREFILL_PATH_TESTS_COMMON
        names += attn.PREFILL_PATH_GRAPH_TESTS
        assert all(name in r.selection for name in names)
        assert len(r.files) == 2 and all(
            Path(pr.REPO_ROOT, f).is_file() for f in r.files
        )


def test_only_selects_reruns_and_refuses_unknown_names(capsys):
    assert pr.main(["--dry-run", "--only", "w4a16_wgmma_tma,prefill_m64"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["w4a16_wgmma_tma", "prefill_m64"]
    with pytest.raises(SystemExit) as e:
        pr.main(["--dry-run", "--only", "w4a16_nope"])
    assert e.value.code == 2
    assert "unknown rerun(s) ['w4a16_nope']" in capsys.readouterr().err


@pytest.mark.parametrize(
    "log,code,ok,text",
    [
        ("x PASSED\n===== 3 passed, 2 deselected in 1.2s =====\n", 0, True,
         "3 passed, 2 deselected"),
        ("== 1 skipped, 9 deselected in 65.02s (0:01:05) ==\n", 0, True,
         "1 skipped, 9 deselected"),
        ("FAILED t.py::test_a[cuda] - assert\n== 1 failed, 2 passed in 3.0s ==\n", 1,
         False, "1 failed, 2 passed; first: FAILED t.py::test_a[cuda] - assert"),
        ("x PASSED\n!!! KeyboardInterrupt !!!\n== 1 passed in 9.0s ==\n", None, False,
         "stopped at the timeout; 1 passed"),
        ("collecting ...\n", 2, False, "no pytest summary"),
    ],
)  # fmt: skip
def test_outcome(log, code, ok, text):
    assert pr.outcome(log, code) == (ok, text)


def test_real_run_one_passes_one_stopped(tmp_path, monkeypatch, capsys):
    quick = pr.Rerun(
        "quick",
        {},
        ("tests/kernels/quantization/test_w4a16_gemm.py",),
        "test_cpu_path_env_rejects_unknown",
    )
    monkeypatch.setattr(pr, "reruns", lambda: [quick])
    assert pr.main(["--out", str(tmp_path), "--timeout", "300"]) == 0
    assert "path-rerun quick: ok: 1 passed" in capsys.readouterr().out
    assert (tmp_path / "quick.log").is_file()

    slow = pr.Rerun("slow", {}, quick.files, quick.selection)
    monkeypatch.setattr(pr, "reruns", lambda: [slow])
    assert pr.main(["--out", str(tmp_path), "--timeout", "0.2"]) == 1
    assert "path-rerun slow: NOT OK: stopped at the timeout" in capsys.readouterr().out
