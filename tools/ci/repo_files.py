# SPDX-License-Identifier: Apache-2.0
"""The files of a checkout that the lint tools look at: tracked plus untracked
files git does not ignore (``git ls-files --cached --others
--exclude-standard``), repo-relative and sorted. Without git (an exported
tree), every file below the root, not descending into ``skip_dirs``.

Shared by tools.ci.check_spdx and tools.ci.buildkite.validate_pipeline."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Collection
from pathlib import Path


def repo_files(root: Path, skip_dirs: Collection[str] = (".git",)) -> list[str]:
    """Existing files (a tracked file deleted in the working tree is left
    out), as repo-relative POSIX paths."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            check=True,
            capture_output=True,
        ).stdout.decode()
        files = {f for f in out.split("\0") if f and (root / f).is_file()}
        if files:
            return sorted(files)
    except (OSError, subprocess.CalledProcessError):
        pass
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in skip_dirs]
        for name in filenames:
            found.append(
                Path(os.path.relpath(os.path.join(dirpath, name), root)).as_posix()
            )
    return sorted(found)
