#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What CI runs for lint: every pre-commit hook over the whole repo (ruff,
# clang-format, mypy, typos, check-yaml/toml/json, shellcheck, SPDX headers,
# no measurements in csrc/ comments, pipeline validation), then the Buildkite
# pipeline validator on its own so its report is visible even when a hook
# failed earlier.
#   PYTHON=.venv/bin/python (default) is the environment that holds
#   pre-commit; the hooks get their own pinned environments from PyPI,
#   cached under $PRE_COMMIT_HOME (default ~/.cache/pre-commit).
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-.venv/bin/python}"
PRE_COMMIT_VERSION=4.7.0
say() { printf '\n[lint %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

if ! "$PYTHON" -c "import pre_commit" >/dev/null 2>&1; then
  say "installing pre-commit==$PRE_COMMIT_VERSION into $PYTHON's environment"
  "$PYTHON" -m pip install --progress-bar off "pre-commit==$PRE_COMMIT_VERSION"
fi

status=0
say "pre-commit run --all-files (first run builds the hook environments from PyPI)"
"$PYTHON" -m pre_commit run --all-files --show-diff-on-failure || status=$?

say "Buildkite pipeline validator"
"$PYTHON" -m tools.ci.buildkite.validate_pipeline || status=$?

if [[ $status -ne 0 ]]; then
  say "lint FAILED (fix locally: .venv/bin/pre-commit run --all-files)"
fi
exit "$status"
