# SPDX-License-Identifier: Apache-2.0
"""tools.ci.buildkite.validate_pipeline and triggered_steps: on the real
pipeline of this repo and on small synthetic pipelines that break one rule
each."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tools.ci.buildkite import triggered_steps as ts
from tools.ci.buildkite import validate_pipeline as vp

REPO = Path(__file__).resolve().parents[2]


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    return root


CONFIG = """\
    name: test_ci
    job_dirs:
      - ".buildkite/test_areas"
    run_all_patterns:
      - "csrc/"
      - "CMakeLists.txt"
    run_all_exclude_patterns:
      - "csrc/cpu/"
    """

GOOD_STEPS = """\
    group: Kernels
    depends_on: []
    steps:
    - label: "CPU lint"
      key: lint
      commands:
      - bash tools/lint.sh
    - label: "GPU kernels Shard %N"
      key: gpu-kernels
      device: h100
      num_devices: 1
      timeout_in_minutes: 30
      parallelism: 2
      source_file_dependencies:
      - csrc/
      - "!csrc/cpu/"
      - tests/kernels/
      commands:
      - python3 -m pytest -v tests/kernels --shard-id=$$BUILDKITE_PARALLEL_JOB --num-shards=$$BUILDKITE_PARALLEL_JOB_COUNT
    - label: "CPU kernels"
      key: cpu-kernels
      device: intel_cpu
      source_file_dependencies:
      - csrc/cpu/
      - tests/kernels/test_cpu.py
      commands:
      - python -m pkg.tool --save /tmp/out.json --compare data/old.json
      - cd tests && python -m pytest -v kernels/test_cpu.py::test_one --junitxml=out/j.xml
    - label: "GPU eval (optional)"
      key: gpu-eval
      device: h200
      optional: true
      source_file_dependencies:
      - pkg/
      commands:
      - pytest -s evals/test_eval.py --config-list-file=evals/configs/list.txt
    """

FILES = {
    ".buildkite/ci_config.yaml": CONFIG,
    ".buildkite/test_areas/kernels.yaml": GOOD_STEPS,
    "tools/lint.sh": "#!/bin/sh\n",
    "csrc/ops.h": "",
    "csrc/cpu/k.cpp": "",
    "tests/kernels/test_cpu.py": "",
    "tests/kernels/test_gpu.py": "",
    "pkg/__init__.py": "",
    "pkg/tool.py": "",
    "data/old.json": "{}",
    "evals/test_eval.py": "",
    "evals/configs/list.txt": "# comment\nm.yaml\n",
    "evals/configs/m.yaml": """\
        model_name: "org/model"
        tasks:
        - name: "gsm8k"
          metrics:
          - name: "exact_match,strict-match"
            value: 0.5
        limit: 100
        num_fewshot: 5
        rtol: 0.05
        """,
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return _write(tmp_path, FILES)


def errors(root: Path) -> list[str]:
    return vp.validate(root)[1]


# --------------------------------------------------------------------------
# validator
# --------------------------------------------------------------------------


def test_real_pipeline_is_valid() -> None:
    pipe, errs = vp.validate(REPO)
    assert not errs, "\n".join(errs)
    assert pipe.steps


def test_real_pipeline_validator_cli() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tools.ci.buildkite.validate_pipeline"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "pipeline OK" in out.stdout


def test_synthetic_pipeline_is_valid(repo: Path) -> None:
    assert errors(repo) == []


@pytest.mark.parametrize(
    "old, new, expected",
    [
        ("  key: lint\n", "  key: lint\n  gpus: 2\n", "unknown field 'gpus'"),
        (
            "  key: lint\n",
            "  key: lint\n  timeout_in_minutes: '30'\n",
            "timeout_in_minutes must be int",
        ),
        ("  key: lint\n", "  key: Lint Step\n", "must match"),
        (
            "  - bash tools/lint.sh\n",
            "  - bash tools/missing.sh\n",
            "'tools/missing.sh'",
        ),
        (
            "  - tests/kernels/\n",
            "  - tests/kernelz/\n",
            "'tests/kernelz/' matches no file",
        ),
        ('  - "!csrc/cpu/"\n', '  - "!csrc/gpu/"\n', "'!csrc/gpu/' matches no file"),
        ("device: h100", "device: tpu9000", "unknown device 'tpu9000'"),
        (
            "--shard-id=$$BUILDKITE_PARALLEL_JOB --num-shards=$$BUILDKITE_PARALLEL_JOB_COUNT",
            "",
            "no command uses $$BUILDKITE_PARALLEL_JOB",
        ),
        ("  key: cpu-kernels\n", "  key: lint\n", "duplicate step key 'lint'"),
        (
            "  key: lint\n",
            "  key: lint\n  depends_on: [image-build]\n",
            "depends_on 'image-build'",
        ),
        ("--compare data/old.json", "--compare data/new.json", "'data/new.json'"),
        ("python -m pkg.tool", "python -m pkg.nothing", "`python -m pkg.nothing`"),
        (
            "kernels/test_cpu.py::test_one",
            "kernels/test_gone.py::test_one",
            "kernels/test_gone.py",
        ),
        (
            "  key: lint\n",
            "  key: lint\n  num_nodes: 2\n",
            "'num_devices' must be defined",
        ),
        ("evals/configs/list.txt", "evals/configs/nolist.txt", "nolist.txt"),
    ],
)
def test_validator_catches(repo: Path, old: str, new: str, expected: str) -> None:
    f = repo / ".buildkite/test_areas/kernels.yaml"
    text = f.read_text()
    assert old in text, old
    f.write_text(text.replace(old, new, 1))
    errs = errors(repo)
    assert any(expected in e for e in errs), errs


def test_validator_outputs_and_absolute_paths_not_checked(repo: Path) -> None:
    # --save /tmp/out.json and --junitxml=out/j.xml name files that do not
    # exist yet: outputs are not inputs.
    assert errors(repo) == []


def test_validator_checks_compare_baseline_per_queue(repo: Path) -> None:
    # --compare-baseline NAME needs benchmarks/results/baselines/<queue's GPU>/NAME.json.
    _write(
        repo,
        {
            ".buildkite/test_areas/gate.yaml": """\
                group: Gate
                steps:
                - label: "gate"
                  key: gate
                  device: h200_18gb
                  commands:
                  - python -m pkg.tool --compare-baseline attention_bf16
                """,
            "benchmarks/results/baselines/h200/attention_bf16.json": "{}",
        },
    )
    assert errors(repo) == []
    f = repo / ".buildkite/test_areas/gate.yaml"
    f.write_text(f.read_text().replace("device: h200_18gb", "device: h100"))
    errs = errors(repo)
    assert any(
        "benchmarks/results/baselines/h100/attention_bf16.json" in e
        and "devices with it: h200" in e
        for e in errs
    ), errs
    assert vp.queue_baseline_device("h200_35gb") == "h200"
    assert vp.queue_baseline_device(None) == "cpu"
    assert vp.queue_baseline_device("intel_cpu") == "cpu"


def test_validator_checks_lm_eval_configs(repo: Path) -> None:
    cfg = repo / "evals/configs/m.yaml"
    cfg.write_text(
        cfg.read_text().replace("    value: 0.5\n", "").replace("limit: 100\n", "")
    )
    errs = errors(repo)
    assert any("needs 'name' (str) and 'value'" in e for e in errs), errs
    assert any("missing 'limit'" in e for e in errs), errs


def test_validator_bad_yaml_and_top_level(repo: Path) -> None:
    (repo / ".buildkite/test_areas/bad.yaml").write_text("steps: [\n")
    (repo / ".buildkite/test_areas/extra.yaml").write_text(
        "group: X\nenv: {}\nsteps:\n- label: a\n  key: a\n  commands: [echo]\n"
    )
    errs = errors(repo)
    assert any("bad.yaml: YAML error" in e for e in errs), errs
    assert any("extra.yaml: unknown top-level key 'env'" in e for e in errs), errs


def test_validator_config_keys(repo: Path) -> None:
    cfg = repo / ".buildkite/ci_config.yaml"
    cfg.write_text(cfg.read_text() + "run_everything: true\n")
    assert any("unknown key 'run_everything'" in e for e in errors(repo))


# --------------------------------------------------------------------------
# triggered steps
# --------------------------------------------------------------------------


def triggered(root: Path, *changed: str) -> dict[str, str]:
    pipe = vp.load_pipeline(root)
    return {t.key: t.mode for t in ts.triggered(pipe, list(changed))}


def test_run_all_pattern_triggers_everything(repo: Path) -> None:
    got = triggered(repo, "csrc/ops.h")
    assert got == {
        "lint": "RUN",
        "gpu-kernels": "RUN",
        "cpu-kernels": "RUN",
        "gpu-eval": "MANUAL",
    }
    assert triggered(repo, "CMakeLists.txt").keys() == got.keys()


def test_run_all_exclude_and_negative_dependency(repo: Path) -> None:
    # csrc/cpu/ is excluded from run-all and negated in the GPU step's deps.
    assert triggered(repo, "csrc/cpu/k.cpp") == {"lint": "RUN", "cpu-kernels": "RUN"}


def test_dependency_prefix_match(repo: Path) -> None:
    assert triggered(repo, "tests/kernels/test_gpu.py") == {
        "lint": "RUN",
        "gpu-kernels": "RUN",
    }
    assert triggered(repo, "tests/kernels/test_cpu.py") == {
        "lint": "RUN",
        "gpu-kernels": "RUN",
        "cpu-kernels": "RUN",
    }


def test_unrelated_change_runs_only_steps_without_dependencies(repo: Path) -> None:
    assert triggered(repo, "README.md") == {"lint": "RUN"}
    assert triggered(repo) == {"lint": "RUN"}


def test_optional_step_waits_for_unblock(repo: Path) -> None:
    assert triggered(repo, "pkg/tool.py") == {"lint": "RUN", "gpu-eval": "MANUAL"}


def test_editing_a_job_file_triggers_its_steps(repo: Path) -> None:
    got = triggered(repo, ".buildkite/test_areas/kernels.yaml")
    assert set(got) == {"lint", "gpu-kernels", "cpu-kernels", "gpu-eval"}


def test_run_all_env(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUN_ALL", "1")
    assert len(triggered(repo, "README.md")) == 4


def test_real_pipeline_kernel_change_triggers_all() -> None:
    pipe = vp.load_pipeline(REPO)
    got = {t.key for t in ts.triggered(pipe, ["csrc/layernorm/rms_norm_kernels.cu"])}
    assert got == {s.key for s in pipe.steps}


def test_real_pipeline_cpu_kernel_change_skips_gpu_steps() -> None:
    pipe = vp.load_pipeline(REPO)
    got = {
        t.key for t in ts.triggered(pipe, ["csrc/layernorm/cpu/rms_norm_kernels.cpp"])
    }
    assert got == {t.key for t in ts.triggered(pipe, ["csrc/cpu/isa.cpp"])}
    gpu = {
        s.key
        for s in pipe.steps
        if str(s.data.get("device", "")).startswith(("h1", "h2", "a1"))
    }
    assert gpu and not (got & gpu)
    assert {"cpu-kernels", "lm-eval-tiny-cpu"} <= got


def test_triggered_steps_cli_reads_stdin_and_json() -> None:
    script = [sys.executable, "-m", "tools.ci.buildkite.triggered_steps"]
    out = subprocess.run(
        script,
        cwd=REPO,
        input="README.md\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.splitlines()[0].split("\t")[:2] == ["RUN", "cpu-lint"]
    assert "1 of" in out.splitlines()[-1]
    js = subprocess.run(
        [*script, "--json", "csrc/layernorm/rms_norm_kernels.cu"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    data = json.loads(js)
    assert data["changed"] == ["csrc/layernorm/rms_norm_kernels.cu"]
    assert all(s["reason"].startswith("run_all:") for s in data["steps"])
