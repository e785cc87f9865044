# SPDX-License-Identifier: Apache-2.0
"""pytest options of the lm-eval gate, as in vLLM's
.buildkite/lm-eval-harness/conftest.py (--config-list-file, --tp-size), plus
--gate-report: a JSON summary of every config's results (myops and native
metric values, ranking agreement), the input of `python -m tools.pr_body
--lm-eval`."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--config-list-file",
        action="store",
        default=str(Path(__file__).parent / "configs" / "models-cpu.txt"),
        help="file listing model config YAMLs (one per line, relative to it)",
    )
    parser.addoption(
        "--tp-size",
        action="store",
        default="1",
        help="tensor parallel size for the server",
    )
    parser.addoption(
        "--gate-report",
        action="store",
        default=None,
        help="write a JSON summary of all configs here (for python -m tools.pr_body)",
    )


@pytest.fixture(scope="session")
def tp_size(pytestconfig: pytest.Config) -> str:
    return str(pytestconfig.getoption("--tp-size"))


@pytest.fixture(scope="session")
def gate_report(pytestconfig: pytest.Config):
    """Collects per-config summaries; written once at the end of the session."""
    import json
    import shlex

    entries: list[dict] = []
    yield entries
    path = pytestconfig.getoption("--gate-report")
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        command = shlex.join(["pytest", *pytestconfig.invocation_params.args])
        report = {
            "schema": "vllm-myops-lm-eval-gate/1",
            "command": command,
            "configs": entries,
        }
        Path(path).write_text(json.dumps(report, indent=1) + "\n")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "config_filename" in metafunc.fixturenames:
        list_file = Path(metafunc.config.getoption("--config-list-file")).resolve()
        config_dir = list_file.parent
        configs = [
            config_dir / line.strip()
            for line in list_file.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.strip().startswith("#")
        ]
        metafunc.parametrize("config_filename", configs, ids=[c.stem for c in configs])
