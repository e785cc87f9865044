# SPDX-License-Identifier: Apache-2.0
"""The README describes the tree as it is: its performance tables equal
what tools/readme_tables.py generates from the committed baselines, and
every repository path it names exists."""

from __future__ import annotations

import glob
import re
import subprocess
from pathlib import Path

from tools import readme_tables

ROOT = Path(__file__).resolve().parents[2]


def _tracked_top_level() -> set[str]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return {line.split("/", 1)[0] for line in out.splitlines() if line}


def readme_paths(text: str, top_level: set[str]) -> set[str]:
    """Repository paths named in `text`: `code spans` and link targets that
    start with a tracked top-level file or folder. Placeholders (<family>),
    options and shell words are not paths."""
    candidates = re.findall(r"`([^`\n]+)`", text) + re.findall(
        r"\]\(([^)\s#]+)\)", text
    )
    paths = set()
    for c in candidates:
        c = c.strip()
        if not c or any(ch in c for ch in " <>{}$=\"'") or c.startswith(("http", "-")):
            continue
        if c.split("/", 1)[0] in top_level and ("/" in c or "." in c):
            paths.add(c.rstrip("/"))
    return paths


def test_readme_tables_match_the_baselines():
    readme = readme_tables.README.read_text()
    assert readme_tables.BEGIN in readme and readme_tables.END in readme
    assert readme_tables.splice(readme, readme_tables.render()) == readme, (
        "README.md's performance tables are stale: run `python -m tools.readme_tables`"
    )


def test_every_path_the_readme_names_exists():
    top = _tracked_top_level()
    paths = readme_paths((ROOT / "README.md").read_text(), top)
    assert len(paths) > 40  # the layout table alone names more
    missing = sorted(p for p in paths if not glob.glob(str(ROOT / p)))
    assert not missing, f"README.md names paths that do not exist: {missing}"


def test_path_finder_sees_names_and_skips_placeholders():
    top = {"csrc", "docs", "README.md", "tools"}
    text = (
        "`csrc/ops.h`, [d](docs/README.md), `csrc/<family>/`, `tools/x.py --flag`, "
        "`--csrc`, `README.md`, `pip install`, `csrc/attention/paged_attention*.cu`"
    )
    assert readme_paths(text, top) == {
        "csrc/ops.h",
        "docs/README.md",
        "README.md",
        "csrc/attention/paged_attention*.cu",
    }
    missing = [p for p in ("csrc/nope.h",) if not glob.glob(str(ROOT / p))]
    assert missing == ["csrc/nope.h"]  # the existence check can fail
