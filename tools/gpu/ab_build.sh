#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# A/B of the working tree against an earlier revision on a GPU machine, for a
# change that must not alter the kernels (a refactor) or to measure one that
# does; more revisions make it an A/B/C... All trees are built side by side
# (in parallel) and used in place (no install, so none shadows another):
#
#   here:  git archive --format=tar.gz -o .devcarry/base.tar.gz REV   (carry .devcarry)
#          git archive --format=tar.gz -o .devcarry/variant-NAME.tar.gz REV2   (any number;
#                                                # with variants the base is optional)
#   there: bash tools/gpu/ab_build.sh build      # /tmp/ab/base, /tmp/ab/NAME.. + this tree,
#                                                # CUDA_ARCHS (default 9.0)
#          bash tools/gpu/ab_build.sh regs       # register table of base and tree, and their diff
#          bash tools/gpu/ab_build.sh bench N ARGS...
#                                                # N rounds, each base, the variants, then the tree, of
#                                                # the benchmark AB_BENCH (default benchmark_layernorm;
#                                                # e.g. benchmark_w4a16, benchmark_attention) with ARGS,
#                                                # ours and the floor -> $OUT/ab.tar.gz (a JSON per
#                                                # tree and round, NAME_ROUND.json, and bench.log;
#                                                # rewritten after each run); AB_TREE_TIMEOUT_S per run;
#                                                # AB_ONLY=name,..: only those trees (base, tree, NAME)
#   here:  python -m benchmarks.common.ab_table ab.tar.gz [--impl ours] [--ref tree]
#                                                # the Markdown table: medians per tree and round,
#                                                # ratios against the reference tree (bench also
#                                                # prints it, for each impl of AB_TABLE_IMPLS)
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
# Absolute: bench runs each tree's benchmark from that tree's folder.
OUT="$(cd "$OUT" && pwd)"
[[ $PY == */* ]] && PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"

# The variants carried beside the base: .devcarry/variant-NAME.tar.gz -> NAME.
variants() {
  local f
  for f in .devcarry/variant-*.tar.gz; do
    [[ -f $f ]] || continue
    f=${f#.devcarry/variant-}
    echo "${f%.tar.gz}"
  done
}

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
    [[ -f .devcarry/base.tar.gz || -n "$(variants)" ]] || {
      echo "no .devcarry/base.tar.gz or variant-*.tar.gz (see the header)" >&2; exit 2; }
    declare -A pids=()
    rm -rf "$BASE"
    if [[ -f .devcarry/base.tar.gz ]]; then
      mkdir -p "$BASE" && tar xzf .devcarry/base.tar.gz -C "$BASE"
      build_in_place "$BASE" base & pids[base]=$!
    fi
    for v in $(variants); do
      rm -rf "/tmp/ab/$v" && mkdir -p "/tmp/ab/$v" && tar xzf ".devcarry/variant-$v.tar.gz" -C "/tmp/ab/$v"
      build_in_place "/tmp/ab/$v" "$v" & pids[$v]=$!
    done
    build_in_place "$repo_root" tree & pids[tree]=$!
    ok=1
    for name in "${!pids[@]}"; do
      wait "${pids[$name]}"; rc=$?
      echo "ab build: $name rc=$rc"
      [[ $rc == 0 ]] || ok=0
    done
    [[ $ok == 1 ]]
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
    trees=()
    [[ -d $BASE ]] && trees+=("base:$BASE")
    for v in $(variants); do trees+=("$v:/tmp/ab/$v"); done
    trees+=("tree:$repo_root")
    if [[ -n ${AB_ONLY:-} ]]; then  # AB_ONLY=name,name: bench those trees only
      kept=()
      for t in "${trees[@]}"; do [[ ",$AB_ONLY," == *",${t%%:*},"* ]] && kept+=("$t"); done
      trees=("${kept[@]}")
    fi
    # Each tree must import its own build (an editable install of another
    # tree would shadow it): checked once, before any timing.
    for t in "${trees[@]}"; do
      got=$(cd "${t#*:}" && "$PY" -c 'import os, vllm_myops; print(os.path.dirname(vllm_myops.__file__))' 2>&1 | tail -n 1)
      [[ $got == "$(cd "${t#*:}" && pwd -P)/vllm_myops" ]] || { echo "ab bench: ${t%%:*} imports $got" >&2; exit 1; }
    done
    # Results go to /tmp/ab/out and the archive is rewritten after every
    # run: a call that hits its limit still returns what finished. Each run
    # has its own limit (AB_TREE_TIMEOUT_S, default 150 s): a tree whose
    # kernel hangs costs that, not the rest of the call.
    res=/tmp/ab/out
    rm -rf "$res" && mkdir -p "$res/ab"
    for ((i = 1; i <= rounds; i++)); do
      for t in "${trees[@]}"; do
        name=${t%%:*} t0=$SECONDS
        { echo "== $name round $i"
          (cd "${t#*:}" && timeout "${AB_TREE_TIMEOUT_S:-150}" "$PY" -m "benchmarks.kernels.$mod" \
            --device cuda --impls floor,ours "$@" --save "$res/ab/${name}_$i.json") 2>&1 | tail -n 40
          echo "== $name round $i: rc=${PIPESTATUS[0]} in $((SECONDS - t0)) s"
        } >>"$res/ab/bench.log"
        grep "^== $name round $i:" "$res/ab/bench.log"
        tar czf "$OUT/ab.tar.gz" -C "$res" ab
      done
    done
    echo "ab bench: $rounds rounds of ${trees[*]%%:*} -> ab.tar.gz"
    # The A/B tables in the call's output (AB_TABLE_IMPLS, default ours),
    # against `tree` when it ran, else the first tree.
    ref=${trees[0]%%:*}
    for t in "${trees[@]}"; do [[ ${t%%:*} == tree ]] && ref=tree; done
    for impl in ${AB_TABLE_IMPLS:-ours}; do
      "$PY" -m benchmarks.common.ab_table "$OUT/ab.tar.gz" --impl "$impl" --ref "$ref" || true
    done
    ;;
  *) sed -n '2,22p' "$0"; exit 2 ;;
esac
