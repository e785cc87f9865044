#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# compute-sanitizer over the CUDA kernel tests. The workload is pytest
# tests/kernels itself, so every op family's cases (shapes, layouts, dtypes,
# checked against their references) are covered with nothing written here.
#
#   bash tools/gpu/sanitize.sh                       # memcheck, racecheck, synccheck
#   bash tools/gpu/sanitize.sh memcheck              # any subset of the three
#   SANITIZE_TIMEOUT_S=300 bash tools/gpu/sanitize.sh racecheck
#
#   memcheck              pytest tests/kernels -k "$MEMCHECK_K"
#                         (default "cuda and not 2_31": every CUDA case except the
#                         >2^31-element ones, which take minutes each under the tool)
#   racecheck, synccheck  pytest tests/kernels -k "$QUICK_K" (default: also without
#                         opcheck and torch.compile: these tools are ~10x slower)
#
# Scope: VLLM_MYOPS_TEST_SCOPE (default quick). PYTHON (default python3).
# PYTORCH_NO_CUDA_MEMORY_CACHING=1: without the caching allocator every tensor
# is its own allocation, so an access past a tensor's end falls outside any
# allocation and memcheck sees it.
#
# Prints the tool's output, then one line per tool:
#   sanitize <tool>: rc=N errors=N | <pytest summary line>
# (errors=? when the tool printed no summary, e.g. on a timeout). Exit status 0
# when every tool reported 0 errors and every selected test passed.
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root" || exit 1

PY="${PYTHON:-python3}"
MEMCHECK_K="${MEMCHECK_K:-cuda and not 2_31}"
QUICK_K="${QUICK_K:-cuda and not 2_31 and not opcheck and not compile}"
export VLLM_MYOPS_TEST_SCOPE="${VLLM_MYOPS_TEST_SCOPE:-quick}"
export PYTORCH_NO_CUDA_MEMORY_CACHING=1

tools=("$@")
[[ ${#tools[@]} -gt 0 ]] || tools=(memcheck racecheck synccheck)

command -v compute-sanitizer >/dev/null || { echo "sanitize: compute-sanitizer not on PATH" >&2; exit 2; }

summaries=()
status=0
for tool in "${tools[@]}"; do
  case "$tool" in
    memcheck) k="$MEMCHECK_K" ;;
    racecheck|synccheck) k="$QUICK_K" ;;
    *) echo "sanitize: unknown tool '$tool' (memcheck racecheck synccheck)" >&2; exit 2 ;;
  esac
  log="$(mktemp)"
  limit=()
  [[ -n "${SANITIZE_TIMEOUT_S:-}" ]] && limit=(timeout -s INT "$SANITIZE_TIMEOUT_S")
  echo "===== compute-sanitizer --tool $tool pytest tests/kernels -k \"$k\" (scope $VLLM_MYOPS_TEST_SCOPE) ====="
  "${limit[@]}" compute-sanitizer --tool "$tool" --error-exitcode 9 --print-limit 30 \
    --target-processes all "$PY" -m pytest tests/kernels -q -rfE -p no:cacheprovider -k "$k" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  # memcheck/synccheck: "ERROR SUMMARY: N errors"; racecheck: "RACECHECK SUMMARY: ... (N errors, ...".
  errors="$(grep -E "(ERROR|RACECHECK) SUMMARY" "$log" | tail -n 1 | grep -oE "[0-9]+ errors?" | grep -oE "[0-9]+")"
  tests="$(grep -E "[0-9]+ (passed|failed|errors?|deselected).* in [0-9.]+s" "$log" | tail -n 1)"
  rm -f "$log"
  [[ "$rc" == 0 && "$errors" == 0 ]] || status=1
  summaries+=("sanitize $tool: rc=$rc errors=${errors:-?} | ${tests:-no pytest summary}")
done
printf '%s\n' "${summaries[@]}"
exit "$status"
