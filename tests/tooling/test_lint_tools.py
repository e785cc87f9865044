# SPDX-License-Identifier: Apache-2.0
"""The lint set-up: tools.ci.check_spdx, tools.ci.check_dco and the shape of
.pre-commit-config.yaml (every hook local, installable from PyPI, pinned)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tools.ci import check_dco as dco
from tools.ci import check_spdx as spdx

REPO = Path(__file__).resolve().parents[2]

TAG = "SPDX-License-Identifier: Apache-2.0"


# --------------------------------------------------------------------------
# SPDX
# --------------------------------------------------------------------------


def test_spdx_reports_missing_and_accepts_present(tmp_path: Path) -> None:
    good = tmp_path / "good.py"
    good.write_text(f"#!/usr/bin/env python3\n# {TAG}\nprint(1)\n")
    bad_py = tmp_path / "bad.py"
    bad_py.write_text('"""doc"""\n')
    bad_cu = tmp_path / "k.cu"
    bad_cu.write_text("__global__ void k() {}\n")
    late = tmp_path / "late.sh"
    late.write_text("\n" * 10 + f"# {TAG}\n")
    empty = tmp_path / "__init__.py"
    empty.write_text("")
    other = tmp_path / "notes.md"
    other.write_text("no header needed\n")
    files = [str(p) for p in (good, bad_py, bad_cu, late, empty, other)]
    assert spdx.main(files) == 1
    missing = {p.name for p in spdx.check([Path(f) for f in files], fix=False)}
    assert missing == {"bad.py", "k.cu", "late.sh"}


def test_spdx_fix_inserts_with_the_right_comment(tmp_path: Path) -> None:
    py = tmp_path / "tool.py"
    py.write_text("#!/usr/bin/env python3\n# -*- coding: utf-8 -*-\nx = 1\n")
    cuh = tmp_path / "vec.cuh"
    cuh.write_text("#pragma once\n")
    yml = tmp_path / "c.yaml"
    yml.write_text("a: 1\n")
    assert spdx.main(["--fix", str(py), str(cuh), str(yml)]) == 0
    assert py.read_text().splitlines()[:3] == [
        "#!/usr/bin/env python3",
        "# -*- coding: utf-8 -*-",
        f"# {TAG}",
    ]
    assert cuh.read_text().splitlines()[0] == f"// {TAG}"
    assert yml.read_text() == f"# {TAG}\na: 1\n"
    assert spdx.main([str(py), str(cuh), str(yml)]) == 0


def test_spdx_walks_a_repo_and_skips_build_dirs(tmp_path: Path) -> None:
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "gen.py").write_text("x = 1\n")
    (tmp_path / ".venv" / "lib").mkdir(parents=True)
    (tmp_path / ".venv" / "lib" / "m.py").write_text("x = 1\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text("x = 1\n")
    paths = {p.relative_to(tmp_path).as_posix() for p in spdx.repo_files(tmp_path)}
    assert "src/m.py" in paths
    assert not any(p.startswith(("build/", ".venv/")) for p in paths)


# --------------------------------------------------------------------------
# DCO
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "message, ok",
    [
        ("Add kernel\n\nSigned-off-by: Ada Lovelace <ada@example.org>\n", True),
        ("Add kernel\n\nCo-authored-by: X <x@y.z>\nSigned-off-by: A B <a@b.c>\n", True),
        ("Add kernel\n", False),
        ("Add kernel\n\nSigned-off-by: Ada Lovelace\n", False),  # no email
        ("Add kernel\n# Signed-off-by: A B <a@b.c>\n", False),  # a comment line
        ("Add kernel\n\nsigned-off-by: a <a@b.c>\n", False),  # malformed case
    ],
)
def test_dco_message(tmp_path: Path, message: str, ok: bool) -> None:
    f = tmp_path / "COMMIT_EDITMSG"
    f.write_text(message)
    assert dco.main([str(f)]) == (0 if ok else 1)


def test_dco_scissors_ignores_the_diff(tmp_path: Path) -> None:
    f = tmp_path / "MSG"
    f.write_text(
        "Add kernel\n# ------------------------ >8 ------------------------\n"
        "+Signed-off-by: Fake <f@k.e>\n"
    )
    assert dco.main([str(f)]) == 1


def test_dco_fix_appends_signoff(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        dco, "git_identity", lambda: ("Ada Lovelace", "ada@example.org")
    )
    f = tmp_path / "MSG"
    f.write_text("Add kernel\n\nLonger description.\n")
    assert dco.main(["--fix", str(f)]) == 0
    assert f.read_text() == (
        "Add kernel\n\nLonger description.\n\nSigned-off-by: Ada Lovelace <ada@example.org>\n"
    )
    assert dco.main([str(f)]) == 0
    g = tmp_path / "MSG2"
    g.write_text("Add kernel\n\nCo-authored-by: Bot <bot@example.org>\n")
    dco.main(["--fix", str(g)])
    assert g.read_text().endswith(
        "Co-authored-by: Bot <bot@example.org>\nSigned-off-by: Ada Lovelace <ada@example.org>\n"
    )


def _git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "T",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "T",
        "GIT_COMMITTER_EMAIL": "t@example.org",
        "HOME": str(repo),
        "PATH": "/usr/bin:/bin:/usr/local/bin",
    }
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=env
    ).stdout


def _check_dco_range(repo: Path, rev_range: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.ci.check_dco", "--range", rev_range],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
    )


def test_dco_range_on_a_git_repo(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "a").write_text("1")
    _git(tmp_path, "add", "a")
    _git(tmp_path, "commit", "-q", "-m", "base")
    (tmp_path / "a").write_text("2")
    _git(tmp_path, "commit", "-q", "-a", "-s", "-m", "signed")
    base = _git(tmp_path, "rev-list", "--max-parents=0", "HEAD").strip()
    run = _check_dco_range(tmp_path, f"{base}..HEAD")
    assert run.returncode == 0, run.stdout + run.stderr
    (tmp_path / "a").write_text("3")
    _git(tmp_path, "commit", "-q", "-a", "-m", "unsigned")
    run = _check_dco_range(tmp_path, f"{base}..HEAD")
    assert run.returncode == 1
    assert "'unsigned'" in run.stdout and "'signed'" not in run.stdout


# --------------------------------------------------------------------------
# .pre-commit-config.yaml
# --------------------------------------------------------------------------

CONFIG = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
HOOKS = [h for r in CONFIG["repos"] for h in r["hooks"]]


def test_every_hook_is_local_and_python() -> None:
    # No GitHub clones: hooks install from PyPI into pre-commit's own venvs.
    assert all(r["repo"] == "local" for r in CONFIG["repos"])
    assert all(h["language"] == "python" for h in HOOKS), [h["id"] for h in HOOKS]


def test_hook_dependencies_are_pinned() -> None:
    for h in HOOKS:
        for dep in h.get("additional_dependencies", []):
            assert re.fullmatch(r"[A-Za-z0-9_.\-\[\]]+==[0-9][\w.]*", dep), (
                h["id"],
                dep,
            )
        entry = h["entry"].split()[0]
        if entry != "python":  # a console script must come from a pinned package
            assert h.get("additional_dependencies"), h["id"]


def test_required_hooks_present() -> None:
    ids = {h["id"] for h in HOOKS}
    required = {
        "ruff-check",
        "ruff-format",
        "clang-format",
        "mypy",
        "typos",
        "check-yaml",
        "check-toml",
        "check-json",
        "shellcheck",
        "check-spdx-header",
        "dco-signoff",
    }
    assert required <= ids, required - ids
    dco_hook = next(h for h in HOOKS if h["id"] == "dco-signoff")
    assert dco_hook["stages"] == ["commit-msg"]
    assert "commit-msg" in CONFIG["default_install_hook_types"]
    ruff = next(h for h in HOOKS if h["id"] == "ruff-check")
    assert "--fix" in ruff["args"]


def test_repo_local_hook_scripts_exist() -> None:
    for h in HOOKS:
        parts = h["entry"].split()
        if parts[0] == "python" and len(parts) > 2 and parts[1] == "-m":
            module = REPO / parts[2].replace(".", "/")
            assert module.with_suffix(".py").is_file(), h["id"]
        elif parts[0] == "python" and len(parts) > 1 and not parts[1].startswith("-"):
            assert (REPO / parts[1]).is_file(), h["id"]
    for f in ("ruff.toml", "mypy.ini", ".clang-format", ".typos.toml", "LICENSE"):
        assert (REPO / f).is_file(), f
    assert "Apache License" in (REPO / "LICENSE").read_text()
