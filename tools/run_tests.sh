#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole test suite, from a fresh clone: environment, build, CUDA compile
# check (no GPU needed), lint, pytest. CI runs exactly this (.ci/run).
#   VLLM_MYOPS_TEST_SCOPE=quick|full   (default quick; full is the H200 matrix)
#   extra arguments are passed to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\n[tests %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

bash tools/setup_env.sh
PY="${VLLM_MYOPS_PYTHON:-.venv/bin/python}"

say "CUDA compile check: every csrc/**/*.cu for each default arch, against CUDA torch headers"
bash tools/ci/check_cuda_compile.sh

if [[ -f tools/ci/ci_lint.sh ]]; then
  say "lint: pre-commit hooks and the Buildkite pipeline validator"
  PYTHON="$PY" bash tools/ci/ci_lint.sh
fi

say "pytest (scope: ${VLLM_MYOPS_TEST_SCOPE:-quick}): kernels, plugin, tooling"
"$PY" -m pytest -ra --durations=15 "$@"

if [[ $# -eq 0 ]]; then
  say "lm-eval gate: tiny models (ranking must not change) and SmolLM2 on real text (perplexity), plugin vs native"
  "$PY" -m pytest -ra -s .buildkite/lm-eval-harness/test_lm_eval_correctness.py \
    --config-list-file=.buildkite/lm-eval-harness/configs/models-cpu.txt
fi
