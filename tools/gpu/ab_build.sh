#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# A/B of the working tree against an earlier revision on a GPU machine, for a
# change that must not alter the kernels (a refactor) or to measure one that
# does. Both trees are built side by side and used in place (no install, so
# neither shadows the other):
#
#   here:  git archive --format=tar.gz -o .devcarry/base.tar.gz REV   (carry .devcarry)
#   there: bash tools/gpu/ab_build.sh build      # /tmp/ab/base + this tree, CUDA_ARCHS (default 9.0)
#          bash tools/gpu/ab_build.sh regs       # register table of each build, and their diff
#          bash tools/gpu/ab_build.sh bench N ARGS...
#                                                # N alternating rounds base/tree of the benchmark
#                                                # AB_BENCH (default benchmark_layernorm; e.g.
#                                                # benchmark_w4a16, benchmark_attention) with ARGS,
#                                                # ours and the floor; JSON per run under $OUT
#
# Each tree runs its own benchmark harness (the base from its checkout), so the
# base needs no code from this tree; the results share one JSON schema.
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root" || exit 1
PY="${PYTHON:-python3}"
OUT="${OUT:-$repo_root/out}"
BASE=/tmp/ab/base
mkdir -p "$OUT" /tmp/ab

# Builds the wheel of $1 and puts its compiled files into $1/vllm_myops/.
build_in_place() {
  local src=$1 name=$2
  rm -rf "/tmp/ab/whl-$name"
  (cd "$src" && CUDA_ARCHS="${CUDA_ARCHS:-9.0}" "$PY" -m pip wheel -v --no-build-isolation \
    --no-deps -w "/tmp/ab/whl-$name" . >"$OUT/build_$name.log" 2>&1) || {
    tail -n 40 "$OUT/build_$name.log"; return 1; }
  "$PY" - "$src" /tmp/ab/whl-"$name"/*.whl <<'EOF'
import sys, zipfile
src, wheel = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for n in z.namelist():
        if n.startswith("vllm_myops/_myops_C") or n == "vllm_myops/_build_info.json":
            z.extract(n, src)
            print("built", n)
EOF
}

case "${1:-}" in
  build)
    [[ -f .devcarry/base.tar.gz ]] || { echo "no .devcarry/base.tar.gz (see the header)" >&2; exit 2; }
    rm -rf "$BASE" && mkdir -p "$BASE" && tar xzf .devcarry/base.tar.gz -C "$BASE"
    build_in_place "$BASE" base & pb=$!
    build_in_place "$repo_root" tree & pt=$!
    wait $pb; rb=$?; wait $pt; rt=$?
    echo "ab build: base rc=$rb tree rc=$rt"
    [[ $rb == 0 && $rt == 0 ]]
    ;;
  regs)
    bash tools/gpu/ptxas_registers.sh "$BASE"/vllm_myops/_myops_C*.so >"$OUT/regs_base.txt"
    bash tools/gpu/ptxas_registers.sh vllm_myops/_myops_C*.so >"$OUT/regs_tree.txt"
    echo "ab regs: $(wc -l <"$OUT/regs_base.txt") base rows, $(wc -l <"$OUT/regs_tree.txt") tree rows"
    if diff "$OUT/regs_base.txt" "$OUT/regs_tree.txt"; then echo "ab regs: identical"; else echo "ab regs: DIFFER"; exit 1; fi
    ;;
  bench)
    rounds=${2:-2}; shift 2
    mod=${AB_BENCH:-benchmark_layernorm}
    for ((i = 1; i <= rounds; i++)); do
      (cd "$BASE" && "$PY" "benchmarks/kernels/$mod.py" --device cuda --impls floor,ours \
        "$@" --save "$OUT/ab_base_$i.json" >"$OUT/ab_base_$i.log" 2>&1) || tail -n 20 "$OUT/ab_base_$i.log"
      "$PY" -m "benchmarks.kernels.$mod" --device cuda --impls floor,ours \
        "$@" --save "$OUT/ab_tree_$i.json" >"$OUT/ab_tree_$i.log" 2>&1 || tail -n 20 "$OUT/ab_tree_$i.log"
    done
    ;;
  *) sed -n '2,19p' "$0"; exit 2 ;;
esac
