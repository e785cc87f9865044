#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# One script for every call on the lent GPU machine. Stages combine in one call:
#
#   bash tools/gpu/device_session.sh stage1 profile sanitize
#   bash tools/gpu/device_session.sh bench2
#   bash tools/gpu/device_session.sh bench
#
# Stages (run in the order given; a failed stage does not stop the next):
#   stage1    = build + test
#   carry     store the carried part and unpack complete bundles, nothing else:
#             the cheap call that moves a part of a set (seconds on a warm machine)
#   build     build and install our extension (editable) with the device's torch:
#             CUDA_ARCHS=${CUDA_ARCHS:-9.0} pip install --no-build-isolation --no-deps -e .
#             Skipped when the sources did not change since the last build on this
#             (warm) machine. Every other stage builds first if needed.
#   test      VLLM_MYOPS_TEST_SCOPE=full pytest ${TEST_PATHS:-tests/kernels} -q $TEST_ARGS
#   paths     python -m tests.kernels.path_reruns: every forced CUDA path (W4A16
#             VLLM_MYOPS_W4A16_CUDA_PATH, attention prefill VLLM_MYOPS_ATTENTION_CUDA_PREFILL)
#             on its value tests, one pytest process per path, all at once
#             (PATHS_THREADS=2 OpenMP threads each; PATHS_ONLY=a,b: those reruns
#             only, names as --dry-run prints them) -> paths.tar.gz (a log per path; a
#             process the budget stops still reports the cases it finished)
#   bench     python -m benchmarks.kernels.benchmark_layernorm, bf16 full sweep, every anchor
#             present (extra args: BENCH_ARGS="...")
#   bench2    fp16 + fp32 on a subset (rows 1,1024,8192,32768 x hidden 4096,5125,8192),
#             anchors without torch.compile (extra args: BENCH2_ARGS="...")
#   bench_w4a16  python -m benchmarks.kernels.benchmark_w4a16 --device cuda, bf16, the GPU
#             preset; Marlin/Machete once vLLM's tree (serve parts 1-3) is unpacked (BENCH_W4A16_ARGS="...")
#   bench_w4a16_paths  the same benchmark once per forced path of BENCH_W4A16_PATHS
#             (default "wgmma_tma"), ours and the floor only, one process each (the path
#             is read once per process) -> bench_w4a16_<path>.json; beside a
#             bench_w4a16 of the same call it is the A/B against auto and the anchors
#   profile   ncu --clock-control none over our kernels for a few shapes; compact table
#             (python -m benchmarks.kernels.profile_anchors --impls ours $PROFILE_ARGS)
#   profile_anchors  the same over ours and the anchors side by side ($PROFILE_ANCHOR_ARGS)
#   profile_w4a16  ncu over the W4A16 GEMM, ours and anchors per case
#             (python -m benchmarks.kernels.profile_cases benchmarks.kernels.benchmark_w4a16
#             ${PROFILE_W4A16_ARGS:---m 1,16,64 --nk 28672x4096,4096x14336 --impls ours,mm,marlin})
#   hot       where the warps wait, per SASS instruction: ncu --section SourceCounters over the
#             first launch of kernels matching HOT_KERNEL (regex, default "wgmma") in
#             $PY $HOT_ARGS (default: benchmarks.kernels.benchmark_w4a16 at M = 16,
#             28672x4096, ours), then python -m tools.profile hot -> hot.txt (+ hot.ncu-rep);
#             HOT_TREE=DIR profiles the program from another built tree (an ab_build
#             variant, /tmp/ab/NAME), HOT_NAME=x names the outputs x.txt, x.ncu-rep, x.log
#   triage    python -m tools.profile triage --run for each family of TRIAGE_SETS (default
#             "layernorm w4a16 attention"; cases from TRIAGE_<FAMILY>_ARGS): ncu, then the
#             decision tree's verdicts -> triage.tar.gz (per family: raw CSV, profiled
#             program's log, verdicts .txt and .json)
#   sanitize  tools/gpu/sanitize.sh: compute-sanitizer memcheck over the CUDA kernel
#             tests, racecheck + synccheck over a quick subset
#   vllm_up   vLLM 0.24 + SmolLM2 on this GPU (needs the "serve" carry set, made by
#             tools/gpu/prepare_device_carry.sh --set serve, all parts received): the
#             model converted from its wheel (python -m vllm_myops.models), then
#             `vllm-myops doctor` and `vllm-myops serve --compare-native` (default mode: torch.compile +
#             CUDA graphs; more vLLM arguments in VLLM_UP_ARGS; VLLM_UP_COMPARE=0: our
#             server alone) -> vllm_up.log
#   vllm_tests  the plugin tests against that vLLM: pytest tests/plugin (PLUGIN_TEST_ARGS)
#             -> vllm_tests.log
#   e2e       benchmarks.e2e.benchmark_serving (E2E_ARGS: --sides, --prompt-tokens ...) per model of
#             E2E_MODELS ("smollm2 llama3-8b-dummy") -> e2e_<model>.*; E2E_RUNS="a=ARGS;b=ARGS" -> e2e_<model>_a.*
#   system    python -m tools.profile system on the Llama-3-8B-shaped dummy model
#             (benchmarks/e2e/presets.py, --load-format dummy), vLLM 0.24 in process, its
#             default mode (torch.compile + CUDA graphs), decode at concurrency 1 and 64,
#             --provider myops then --provider native (one vLLM start each), 4 GiB KV cache,
#             max-model-len 512 (more arguments: SYSTEM_ARGS="...") -> system.log (the
#             side-by-side table, also printed) + system.tar.gz (tables, JSON, PNG plots; the
#             Chrome traces only when the archive stays under 5 MB)
#
# vLLM serving, in four consecutive calls on a fresh machine (one carried part each;
# a call whose set is incomplete just stores its part):
#   bash tools/gpu/device_session.sh carry        carry [".carry/serve/p1"]
#   bash tools/gpu/device_session.sh carry        carry [".carry/serve/p2"]  (and so on)
#   bash tools/gpu/device_session.sh vllm_up      carry [".carry/serve/pN"]  (the last part)
# Only this script stores a carried part (before its first stage): a call that carries
# a part but runs some other command first loses that part (the working tree's copy
# is replaced at the next call). Other commands may follow it in the same call.
#
# Before any stage, carried parts (.carry/pN, made by tools/gpu/prepare_device_carry.sh)
# found in the working tree are copied to /tmp/myops-carry/ and every bundle whose
# parts are all present is unpacked there (kept while the machine stays warm):
#   site-liger/, site-quack/ (+ nvidia_cutlass_dsl/dsl_packages) -> PYTHONPATH
#   vllm/_C_stable_libtorch.abi3.so                              -> VLLM_ANCHOR_LIB
#
# Output under $OUT (at most 8 files come back; this script writes fewer per call):
#   build.log test.log profile.{log,ncu-rep} profile_anchors.{log,ncu-rep} sanitize.log
#   bench_bf16.{log,json,png} bench_fp.{log,json,png} vllm_up.log vllm_tests.log
#   e2e_<model>.{log,json} system.{log,tar.gz} summary.txt
# A short summary table is printed last.
#
# Commit: the device's copy may carry an older .git than its working tree (the
# session's starting checkout); results JSONs record VLLM_MYOPS_GIT_COMMIT when
# it is set, so a call states it: VLLM_MYOPS_GIT_COMMIT=<sha> bash ... (the sha
# of the tree sent, from `git rev-parse --short HEAD` where the call is made).
#
# Time: one device command may run 600 s. CALL_LIMIT_S (default 580) is this
# script's budget; each stage gets what is left minus the estimates of the
# stages after it, and the benchmark stops starting new cases in time
# (--max-seconds), reporting the rest as skipped.
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root" || exit 1

OUT="${OUT:-$repo_root/out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
# Absolute, so that stages that run a program from another tree (hot with
# HOT_TREE) still write to OUT and find the interpreter.
OUT="$(cd "$OUT" && pwd)"
[[ $PY == */* ]] && PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"
CALL_LIMIT_S="${CALL_LIMIT_S:-580}"
CARRY_ROOT="${CARRY_ROOT:-/tmp/myops-carry}"
T0=$SECONDS
SUMMARY=()
EXTRA=()

left() { echo $((CALL_LIMIT_S - (SECONDS - T0))); }
say() { echo "[device_session +$((SECONDS - T0))s] $*"; }
add_summary() { SUMMARY+=("$(printf '%-10s %-6s %5ss  %s' "$1" "$2" "$3" "$4")"); }

# Estimates (s) per stage, for budgeting and for the plan printed at the start.
declare -A EST=([carry]=0 [build]=150 [test]=150 [paths]=300 [bench]=420 [bench2]=300 [bench_w4a16]=420 [bench_w4a16_paths]=240 [profile]=90 [profile_anchors]=90 [profile_w4a16]=90 [hot]=60 [triage]=150 [sanitize]=200
  [vllm_up]=240 [vllm_tests]=500 [e2e]=500 [system]=240)

stages=()
for s in "$@"; do
  case "$s" in
    stage1) stages+=(build test) ;;
    carry|build|test|paths|bench|bench2|bench_w4a16|bench_w4a16_paths|profile|profile_anchors|profile_w4a16|hot|triage|sanitize|vllm_up|vllm_tests|e2e|system) stages+=("$s") ;;
    *) echo "unknown stage '$s' (stage1 carry build test paths bench bench2 bench_w4a16 bench_w4a16_paths profile profile_anchors profile_w4a16 hot triage sanitize vllm_up vllm_tests e2e system)" >&2; exit 2 ;;
  esac
done
[[ ${#stages[@]} -gt 0 ]] || { sed -n '2,75p' "$0"; exit 2; }

# Budget for stage index $1: what is left minus the estimates of later stages.
budget_for() {
  local i=$1 later=0 j
  for ((j = i + 1; j < ${#stages[@]}; j++)); do later=$((later + ${EST[${stages[$j]}]})); done
  local b=$(( $(left) - later - 10 ))
  (( b < 60 )) && b=60
  echo "$b"
}

# ---------------------------------------------------------------------------
# Machine facts
# ---------------------------------------------------------------------------
say "stages: ${stages[*]} (limit ${CALL_LIMIT_S}s)"
plan=0
for s in "${stages[@]}"; do plan=$((plan + ${EST[$s]})); done
say "estimated ~${plan}s (build only if sources changed or the machine is fresh)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,memory.used \
  --format=csv 2>&1 | sed 's/^/  /' || true
$PY -c 'import sys, torch; print("  python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available() and torch.cuda.get_device_name(0))' 2>&1

# ---------------------------------------------------------------------------
# Carried parts -> /tmp/myops-carry
# ---------------------------------------------------------------------------
unpack_carry() {
  local t=$SECONDS out
  out="$($PY - "$CARRY_ROOT" ".carry" <<'EOF'
import glob, hashlib, io, json, os, shutil, sys, tarfile

root, src = sys.argv[1], sys.argv[2]
# Part folders: .carry/pN (set "anchors") and .carry/<set>/pN; one manifest per set.
received = set()
for d in sorted(glob.glob(os.path.join(src, "p*")) + glob.glob(os.path.join(src, "*", "p*"))):
    mf, pb = os.path.join(d, "manifest.json"), os.path.join(d, "part.bin")
    if not (os.path.isfile(mf) and os.path.isfile(pb)):
        continue
    m = json.load(open(mf))
    name, i = m.get("set", "anchors"), m["this_part"]
    parts_dir = os.path.join(root, "parts", name)
    os.makedirs(parts_dir, exist_ok=True)
    shutil.copyfile(pb, os.path.join(parts_dir, f"part{i:03d}.bin"))
    shutil.copyfile(mf, os.path.join(root, f"manifest-{name}.json"))
    received.add(name)
    print(f"carry: received {name} part {i}/{len(m['parts'])} ({os.path.getsize(pb) / 2**20:.1f} MiB) from {d}")
manifests = sorted(glob.glob(os.path.join(root, "manifest-*.json")))
if not manifests:
    print("carry: no parts here yet (anchors and vLLM serving will be reported missing)")
    sys.exit(0)
ready, waiting = [], []
for mpath in manifests:
    m = json.load(open(mpath))
    parts_dir = os.path.join(root, "parts", m.get("set", "anchors"))
    have = {}
    for p in m["parts"]:
        f = os.path.join(parts_dir, f"part{p['index']:03d}.bin")
        ok = f + ".ok"
        if not os.path.exists(f):
            continue
        if not os.path.exists(ok):
            data = open(f, "rb").read()
            if len(data) != p["length"] or hashlib.sha256(data).hexdigest() != p["sha256"]:
                print(f"carry: part {p['index']} is corrupt (size/sha256 mismatch); ignored")
                continue
            open(ok, "w").close()
        have[p["index"]] = f
    for b in m["bundles"]:
        marker = os.path.join(root, f".{b['name']}.{b['sha256'][:16]}.done")
        if os.path.exists(marker):
            ready.append(b["name"])
            continue
        lo, hi = b["offset"], b["offset"] + b["length"]
        need = [p for p in m["parts"] if p["offset"] < hi and p["offset"] + p["length"] > lo]
        missing = [p["index"] for p in need if p["index"] not in have]
        if missing:
            waiting.append(f"{b['name']} (needs part {','.join(map(str, missing))})")
            continue
        buf = bytearray()
        for p in need:
            data = open(have[p["index"]], "rb").read()
            a, z = max(lo, p["offset"]) - p["offset"], min(hi, p["offset"] + p["length"]) - p["offset"]
            buf += data[a:z]
        if hashlib.sha256(buf).hexdigest() != b["sha256"]:
            print(f"carry: bundle {b['name']} sha256 mismatch; not unpacked")
            continue
        with tarfile.open(fileobj=io.BytesIO(bytes(buf)), mode="r:xz") as tf:
            kw = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
            tf.extractall(root, **kw)
        open(marker, "w").close()
        ready.append(b["name"])
        print(f"carry: unpacked {b['name']} ({b['length'] / 2**20:.1f} MiB) -> {root}/{b['name']}")
print(f"carry: ready: {', '.join(ready) or 'none'}; waiting: {', '.join(waiting) or 'none'}")
EOF
)"
  local rc=$?
  echo "$out"
  add_summary unpack "$rc" $((SECONDS - t)) "$(echo "$out" | grep '^carry: ready' | sed 's/^carry: //')"
}

anchor_env() {
  local pp=""
  [[ -d "$CARRY_ROOT/liger/site-liger" ]] && pp="$CARRY_ROOT/liger/site-liger"
  if [[ -d "$CARRY_ROOT/quack/site-quack" ]]; then
    # --target installs do not run .pth files: add cutlass' dsl_packages by hand.
    pp="${pp:+$pp:}$CARRY_ROOT/quack/site-quack:$CARRY_ROOT/quack/site-quack/nvidia_cutlass_dsl/dsl_packages"
  fi
  [[ -n "$pp" ]] && export PYTHONPATH="$pp${PYTHONPATH:+:$PYTHONPATH}"
  if [[ -f "$CARRY_ROOT/vllm/vllm/_C_stable_libtorch.abi3.so" ]]; then
    export VLLM_ANCHOR_LIB="$CARRY_ROOT/vllm/vllm/_C_stable_libtorch.abi3.so"
  elif [[ -f "$CARRY_ROOT/vllm_serve/site/vllm/_C_stable_libtorch.abi3.so" ]]; then
    export VLLM_ANCHOR_LIB="$CARRY_ROOT/vllm_serve/site/vllm/_C_stable_libtorch.abi3.so"
  fi
  say "anchors: PYTHONPATH=${PYTHONPATH:-} VLLM_ANCHOR_LIB=${VLLM_ANCHOR_LIB:-<none>}"
}

# ---------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------
src_hash() {
  find csrc cmake CMakeLists.txt pyproject.toml -type f -print0 2>/dev/null | LC_ALL=C sort -z \
    | xargs -0 sha256sum | sha256sum | cut -c1-16
}

have_cuda_ops() {
  $PY - <<'EOF' 2>/dev/null
import sys, torch
import vllm_myops._custom_ops  # noqa: F401
ok = all(torch._C._dispatch_has_kernel_for_dispatch_key(f"_myops_C::{op}", "CUDA")
         for op in ("rms_norm", "fused_add_rms_norm"))
sys.exit(0 if ok else 1)
EOF
}

BUILD_OK=""
ensure_built() {
  [[ "$BUILD_OK" == 1 ]] && return 0
  [[ "$BUILD_OK" == 0 ]] && return 1
  if [[ "${SKIP_BUILD:-0}" == 1 ]]; then  # testing this script without a GPU
    say "build: skipped (SKIP_BUILD=1)"
    add_summary build skip 0 "SKIP_BUILD=1"
    BUILD_OK=1
    return 0
  fi
  local h stamp=/tmp/myops-build.stamp
  h="$(src_hash)"
  if [[ -f $stamp && "$(cat $stamp)" == "$h" ]] && have_cuda_ops; then
    say "build: up to date (sources $h)"
    add_summary build ok 0 "up to date (sources $h, built earlier on this warm machine)"
    BUILD_OK=1
    return 0
  fi
  stage_build
}

stage_build() {
  local t=$SECONDS h rc
  h="$(src_hash)"
  say "build: CUDA_ARCHS=${CUDA_ARCHS:-9.0} pip install --no-build-isolation --no-deps -e . (log build.log)"
  CUDA_ARCHS="${CUDA_ARCHS:-9.0}" VLLM_MYOPS_TARGET_DEVICE=cuda \
    timeout "$(( $(left) - 20 ))" "$PY" -m pip install -v --no-build-isolation --no-deps -e . \
      --config-settings=build.verbose=true \
      --config-settings=cmake.define.CMAKE_CUDA_FLAGS=-Xptxas=-v >"$OUT/build.log" 2>&1
  rc=$?
  if [[ $rc -ne 0 ]]; then
    tail -n 60 "$OUT/build.log"
    add_summary build FAIL $((SECONDS - t)) "pip install rc=$rc (see build.log)"
    BUILD_OK=0
    return 1
  fi
  grep -E "vllm-myops target device|CUDA archs|kernels for|sm_90a kernels" "$OUT/build.log" | sed 's/^/  /' | head -n 8
  # ptxas -v: registers and spills per kernel of ours (names containing rms/norm).
  local regs
  regs="$(awk '
    /Compiling entry function/ {
      fn = $0; sub(/.*entry function \047/, "", fn); sub(/\047.*/, "", fn)
      arch = $NF; gsub(/\047/, "", arch)
    }
    /bytes stack frame/ { frame = $1; spill = $5 + $9 }
    /Used [0-9]+ registers/ && fn != "" {
      for (i = 1; i <= NF; i++) if ($i == "Used") r = $(i + 1)
      if (tolower(fn) ~ /rms|norm/) print arch, r " regs", "stack " frame, "spill " spill, fn
      fn = ""
    }' "$OUT/build.log" | sort -u | head -n 24)"
  if command -v c++filt >/dev/null; then regs="$(c++filt <<<"$regs" | cut -c1-200)"; fi
  if [[ -n "$regs" ]]; then
    echo "  ptxas (our kernels): arch, registers, stack frame bytes, spill bytes, kernel"
    while IFS= read -r l; do echo "    $l"; done <<<"$regs"
  fi
  if ! have_cuda_ops; then
    $PY -c "import vllm_myops._custom_ops" 2>&1 | tail -n 5
    add_summary build FAIL $((SECONDS - t)) "installed but the CUDA ops are not registered"
    BUILD_OK=0
    return 1
  fi
  echo "$h" >/tmp/myops-build.stamp
  local info
  info="$($PY -c 'from vllm_myops import _extension as e; print(e.build_info())' 2>&1 | tail -n 1)"
  add_summary build ok $((SECONDS - t)) "$info"
  BUILD_OK=1
}

# ---------------------------------------------------------------------------
# Stages
# ---------------------------------------------------------------------------
stage_test() {
  local t=$SECONDS b=$1 rc line
  ensure_built || { add_summary test SKIP 0 "no build"; return; }
  # pytest-xdist is in the device image: TEST_WORKERS processes share the GPU
  # (correctness tests, not timings). TEST_WORKERS=0 runs in one process.
  local xdist=()
  if [[ "${TEST_WORKERS:-4}" != 0 ]] && "$PY" -c "import xdist" 2>/dev/null; then
    xdist=(-n "${TEST_WORKERS:-4}")
  fi
  # Test paths (TEST_PATHS, default tests/kernels) and extra pytest arguments
  # (TEST_ARGS, split on spaces: TEST_ARGS="-k cuda").
  local test_args=() test_paths=()
  read -r -a test_paths <<<"${TEST_PATHS:-tests/kernels}"
  read -r -a test_args <<<"${TEST_ARGS:-}"
  say "test: VLLM_MYOPS_TEST_SCOPE=full pytest ${test_paths[*]} ${xdist[*]} ${test_args[*]} (budget ${b}s, log test.log)"
  VLLM_MYOPS_TEST_SCOPE=full timeout -s INT "$b" "$PY" -m pytest "${test_paths[@]}" -q -rfE \
    -p no:cacheprovider "${xdist[@]}" "${test_args[@]}" 2>&1 | tee "$OUT/test.log" | tail -n 25
  rc=${PIPESTATUS[0]}
  line="$(grep -E "(passed|failed|error)" "$OUT/test.log" | tail -n 1)"
  [[ $rc -eq 124 || $rc -eq 130 ]] && line="TIMED OUT after ${b}s; $line"
  add_summary test "$rc" $((SECONDS - t)) "$line"
}

stage_paths() {
  local t=$SECONDS b=$1 rc=0 n_ok n
  ensure_built || { add_summary paths SKIP 0 "no build"; return; }
  say "paths: python -m tests.kernels.path_reruns (budget ${b}s) -> paths.tar.gz"
  mkdir -p "$OUT/paths"
  VLLM_MYOPS_TEST_SCOPE="${PATHS_SCOPE:-quick}" "$PY" -m tests.kernels.path_reruns \
    --out "$OUT/paths" --timeout "$((b - 40))" --threads "${PATHS_THREADS:-2}" \
    ${PATHS_ONLY:+--only "$PATHS_ONLY"} \
    2>&1 | tee "$OUT/paths.txt" || rc=$?
  n=$(grep -c "^path-rerun " "$OUT/paths.txt")
  n_ok=$(grep -c "^path-rerun .*: ok: " "$OUT/paths.txt")
  while IFS= read -r line; do EXTRA+=("  $line"); done < <(grep "^path-rerun " "$OUT/paths.txt")
  mv "$OUT/paths.txt" "$OUT/paths/summary.txt"
  tar -czf "$OUT/paths.tar.gz" -C "$OUT" paths && rm -rf "$OUT/paths"
  add_summary paths "$rc" $((SECONDS - t)) "$n_ok of $n forced-path runs passed (lines below; logs paths.tar.gz)"
}

bench_common() {  # bench_common NAME MODULE BUDGET ARGS...
  local name=$1 module=$2 b=$3 t=$SECONDS rc; shift 3
  ensure_built || { add_summary "$name" SKIP 0 "no build"; return; }
  anchor_env
  local maxs=$((b - 45))
  (( maxs < 30 )) && maxs=30
  say "$name: $module $* (budget ${b}s, new cases stop after ${maxs}s)"
  timeout -s INT "$((b + 20))" "$PY" -m "$module" --max-seconds "$maxs" "$@" \
    2>&1 | tee "$OUT/$name.log"
  rc=${PIPESTATUS[0]}
  local v
  v="$(sed -n '/^Verdicts/,/^wall time/p' "$OUT/$name.log" | grep '^\s*\[' | sed 's/^ *//' | cut -c1-230)"
  local skipped
  skipped="$(grep -c "\"status\": \"skipped\"" "$OUT/$name.json" 2>/dev/null || true)"
  add_summary "$name" "$rc" $((SECONDS - t)) "json/png/log in \$OUT; skipped records: $skipped"
  [[ -n "$v" ]] && while IFS= read -r l; do EXTRA+=("  $name: $l"); done <<<"$v"
}

stage_bench() {
  # shellcheck disable=SC2086
  bench_common bench_bf16 benchmarks.kernels.benchmark_layernorm "$1" --dtype bf16 --save "$OUT/bench_bf16.json" --plot "$OUT/bench_bf16.png" \
    ${BENCH_ARGS:-}
}

stage_bench2() {
  # shellcheck disable=SC2086
  bench_common bench_fp benchmarks.kernels.benchmark_layernorm "$1" --dtype fp16,fp32 --rows 1,1024,8192,32768 --hidden 4096,5125,8192 \
    --impls floor,ours,eager,vllm,liger,quack --save "$OUT/bench_fp.json" --plot "$OUT/bench_fp.png" \
    ${BENCH2_ARGS:-}
}

stage_bench_w4a16() {
  # Marlin and Machete come from vLLM 0.24 (the serve carry set), when present.
  vllm_env || say "bench_w4a16: serve carry set incomplete: Marlin/Machete will be reported missing"
  # shellcheck disable=SC2086
  bench_common bench_w4a16 benchmarks.kernels.benchmark_w4a16 "$1" --device cuda --dtype bf16 \
    --save "$OUT/bench_w4a16.json" --plot "$OUT/bench_w4a16.png" ${BENCH_W4A16_ARGS:-}
}

stage_bench_w4a16_paths() {
  local b=$1 path paths
  read -r -a paths <<<"${BENCH_W4A16_PATHS:-wgmma_tma}"
  for path in "${paths[@]}"; do
    # shellcheck disable=SC2086
    VLLM_MYOPS_W4A16_CUDA_PATH="$path" bench_common "bench_w4a16_$path" \
      benchmarks.kernels.benchmark_w4a16 "$((b / ${#paths[@]}))" --device cuda \
      --dtype bf16 --impls floor,ours --save "$OUT/bench_w4a16_$path.json" \
      ${BENCH_W4A16_ARGS:-}
  done
}

# ncu over a command that brackets its launches with cudaProfilerStart/Stop and
# prints `profile case K: LABEL` per launch; compact table via tools/gpu/ncu_table.py.
run_ncu_profile() {  # <stage name> <budget s> <command...>
  local name=$1 b=$2 t=$SECONDS rc
  shift 2
  command -v ncu >/dev/null || { add_summary "$name" SKIP 0 "ncu not on PATH"; return; }
  local metrics="l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"
  metrics+=",l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"
  metrics+=",dram__bytes_read.sum,dram__bytes_write.sum"
  say "$name: ncu --clock-control none over $* (budget ${b}s)"
  timeout "$b" ncu --clock-control none --profile-from-start off --target-processes all \
    --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section MemoryWorkloadAnalysis --section WarpStateStats --metrics "$metrics" \
    --export "$OUT/$name" --force-overwrite "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  tail -n 5 "$OUT/$name.log"
  if [[ ! -f "$OUT/$name.ncu-rep" ]]; then
    add_summary "$name" FAIL $((SECONDS - t)) "no report (rc=$rc; see $name.log)"
    return
  fi
  ncu --import "$OUT/$name.ncu-rep" --page raw --csv >"/tmp/$name.csv" 2>>"$OUT/$name.log"
  {
    echo; echo "===== ncu --page details ====="
    ncu --import "$OUT/$name.ncu-rep" --page details 2>&1
  } >>"$OUT/$name.log"
  local table n
  table="$($PY -m tools.gpu.ncu_table "/tmp/$name.csv" "$OUT/$name.log")"
  echo "$table"
  { echo; echo "===== compact summary ====="; echo "$table"; } >>"$OUT/$name.log"
  n=$(echo "$table" | grep -cE '^ +[0-9]+ ')
  add_summary "$name" "$rc" $((SECONDS - t)) "$n kernels profiled (table below, details in $name.log)"
  while IFS= read -r l; do EXTRA+=("  $name:$l"); done <<<"$table"
}

# Our kernels at a few shapes: model widths, the unaligned 5125, small and large batches.
PROFILE_SHAPES="1x4096 16x4096 16x5120 16x5125 1024x4096 8192x2048 8192x4096 8192x5120 8192x5125 8192x8192 32768x8192"
default_profile_cases() {
  local op s
  for op in rms_norm fused_add_rms_norm; do
    for s in $PROFILE_SHAPES; do printf -- '--case %s:bf16:%s ' "$op" "$s"; done
  done
  printf -- '--case rms_norm:fp32:8192x4096 --case rms_norm:fp16:8192x4096'
}

stage_profile() {
  ensure_built || { add_summary profile SKIP 0 "no build"; return; }
  # shellcheck disable=SC2046,SC2086
  run_ncu_profile profile "$1" "$PY" -m benchmarks.kernels.profile_anchors --impls ours \
    ${PROFILE_ARGS:-$(default_profile_cases)}
}

stage_profile_w4a16() {
  ensure_built || { add_summary profile_w4a16 SKIP 0 "no build"; return; }
  vllm_env >/dev/null 2>&1 || true  # Marlin/Machete once vLLM's tree is unpacked
  anchor_env
  # shellcheck disable=SC2086
  run_ncu_profile profile_w4a16 "$1" "$PY" -m benchmarks.kernels.profile_cases \
    benchmarks.kernels.benchmark_w4a16 --device cuda --dtype bf16 \
    ${PROFILE_W4A16_ARGS:---m 1,16,64 --nk 28672x4096,4096x14336 --impls ours,mm,marlin}
}

stage_hot() {
  local t=$SECONDS rc
  ensure_built || { add_summary hot SKIP 0 "no build"; return; }
  command -v ncu >/dev/null || { add_summary hot SKIP 0 "ncu not on PATH"; return; }
  local name=${HOT_NAME:-hot}
  # shellcheck disable=SC2086
  (cd "${HOT_TREE:-.}" && timeout "$1" ncu --clock-control none -k "regex:${HOT_KERNEL:-wgmma}" \
    --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
    --export "$OUT/$name" --force-overwrite "$PY" \
    ${HOT_ARGS:--m benchmarks.kernels.benchmark_w4a16 --device cuda --m 16 --nk 28672x4096 --impls ours --target-s 0.01 --no-ceiling} \
    >"$OUT/$name.log" 2>&1)
  rc=$?
  if [[ ! -f "$OUT/$name.ncu-rep" ]]; then
    add_summary hot FAIL $((SECONDS - t)) "no report (rc=$rc; see $name.log)"
    return
  fi
  {
    ncu --import "$OUT/$name.ncu-rep" --page details 2>&1 |
      grep -E "Duration|DRAM Throughput|Compute \(SM\)|Warp Cycles Per Issued" || true
    "$PY" -m tools.profile hot "$OUT/$name.ncu-rep" --top "${HOT_TOP:-20}" --context 2
  } >"$OUT/$name.txt" 2>&1
  head -n 20 "$OUT/$name.txt"
  add_summary hot ok $((SECONDS - t)) "$name.txt"
}

stage_profile_anchors() {
  ensure_built || { add_summary profile_anchors SKIP 0 "no build"; return; }
  anchor_env
  # shellcheck disable=SC2086
  run_ncu_profile profile_anchors "$1" "$PY" -m benchmarks.kernels.profile_anchors \
    ${PROFILE_ANCHOR_ARGS:---case rms_norm:bf16:8192x8192 --case fused_add_rms_norm:bf16:8192x4096}
}

stage_triage() {
  local t=$SECONDS b=$1 fam bench res args per n dir="$OUT/triage" rc=0
  ensure_built || { add_summary triage SKIP 0 "no build"; return; }
  command -v ncu >/dev/null || { add_summary triage SKIP 0 "ncu not on PATH"; return; }
  vllm_env >/dev/null 2>&1 || true  # anchors when the serve set is unpacked
  anchor_env
  mkdir -p "$dir"
  read -r -a fams <<<"${TRIAGE_SETS:-layernorm w4a16 attention}"
  n=${#fams[@]}
  for fam in "${fams[@]}"; do
    res=()
    case "$fam" in
      layernorm)
        bench=benchmarks.kernels.benchmark_layernorm
        res=(--baseline layernorm_bf16)  # baselines/<this GPU>/, e.g. h200/
        args="${TRIAGE_LAYERNORM_ARGS:---ops rms_norm,fused_add_rms_norm --rows 16,1024,8192 --hidden 4096,8192 --impls ours,compile}" ;;
      w4a16)
        bench=benchmarks.kernels.benchmark_w4a16
        res=(--baseline w4a16_bf16)
        args="${TRIAGE_W4A16_ARGS:---m 1,16 --nk 28672x4096,4096x14336 --impls ours}" ;;
      attention)
        bench=benchmarks.kernels.benchmark_attention
        res=(--bandwidth-gbps "${TRIAGE_COPY_GBPS:-4251}")
        args="${TRIAGE_ATTENTION_ARGS:---kind decode --batch 1,32 --ctx 1024,8192 --impls ours}" ;;
      *) say "triage: unknown family $fam"; continue ;;
    esac
    per=$(( (b - (SECONDS - t)) / n )); n=$((n - 1))
    say "triage $fam: $bench $args (budget ${per}s)"
    # shellcheck disable=SC2086
    timeout "$per" "$PY" -m tools.profile triage --run --benchmark "$bench" "${res[@]}" \
      --export "$dir/$fam" --json "$dir/$fam.json" -- --device cuda $args >"$dir/$fam.txt" 2>&1 || rc=$?
    grep -E "verdict:|^case|^kernel" "$dir/$fam.txt" | head -n 40
  done
  rm -f "$dir"/*.ncu-rep
  tar -czf "$OUT/triage.tar.gz" -C "$OUT" triage && rm -rf "$dir"
  add_summary triage "$rc" $((SECONDS - t)) "${fams[*]} -> triage.tar.gz"
}

stage_sanitize() {
  local t=$SECONDS b=$1 tool budget line status=ok n
  ensure_built || { add_summary sanitize SKIP 0 "no build"; return; }
  command -v compute-sanitizer >/dev/null || { add_summary sanitize SKIP 0 "compute-sanitizer not on PATH"; return; }
  say "sanitize: tools/gpu/sanitize.sh memcheck (budget $((b * 55 / 100))s), racecheck + synccheck (quick subset) -> sanitize.log"
  : >"$OUT/sanitize.log"
  for tool in memcheck:55 racecheck:30 synccheck:15; do
    budget=$((b * ${tool#*:} / 100))
    SANITIZE_TIMEOUT_S="$budget" PYTHON="$PY" bash tools/gpu/sanitize.sh "${tool%%:*}" >>"$OUT/sanitize.log" 2>&1
  done
  grep -E "^sanitize |^FAILED|^ERROR" "$OUT/sanitize.log" | head -n 30
  n=0
  while IFS= read -r line; do
    EXTRA+=("  $line")
    n=$((n + 1))
    [[ "$line" == *"rc=0 errors=0 "* ]] || status=FAIL
  done < <(grep "^sanitize " "$OUT/sanitize.log")
  (( n == 3 )) || status=FAIL
  add_summary sanitize "$status" $((SECONDS - t)) "compute-sanitizer over pytest tests/kernels (lines below; log sanitize.log)"
}


# ---------------------------------------------------------------------------
# vLLM serving (the "serve" carry set)
# ---------------------------------------------------------------------------
VLLM_ENV_OK=""
# vLLM's tree (bundle vllm_serve, parts 1-3) is all the anchors need; the
# model's wheelhouse (bundle smollm2) only the stages that serve SmolLM2
# (vllm_up, vllm_tests, e2e, system: they check have_model).
vllm_env() {  # PYTHONPATH and the variables vLLM 0.24 needs here; 1 when vLLM's tree is missing
  [[ "$VLLM_ENV_OK" == 1 ]] && return 0
  local site="$CARRY_ROOT/vllm_serve/site" wh="$CARRY_ROOT/smollm2/wheelhouse"
  [[ -d "$site/vllm" ]] || return 1
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  # The sampler would import flashinfer (not carried); no usage reports, no hub.
  export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_NO_USAGE_STATS=1 HF_HUB_OFFLINE=1
  export MYOPS_WHEELHOUSE="$wh" MYOPS_CACHE_DIR=/tmp/myops-cache
  VLLM_ENV_OK=1
  say "vLLM env: PYTHONPATH=$PYTHONPATH MYOPS_WHEELHOUSE=$wh"
}

have_model() { [[ -d "$CARRY_ROOT/smollm2/wheelhouse" ]]; }

stage_vllm_up() {
  local t=$SECONDS b=$1 rc model
  ensure_built || { add_summary vllm_up SKIP 0 "no build"; return; }
  vllm_env || { add_summary vllm_up SKIP 0 "serve carry set incomplete (see unpack)"; return; }
  have_model || { add_summary vllm_up SKIP 0 "serve carry set: the model's part (smollm2) missing"; return; }
  {
    say "vllm_up: python -m vllm_myops.models (SmolLM2 from its wheel, converted once)"
    model="$(timeout 300 "$PY" -m vllm_myops.models 2>&1 | tee /dev/stderr | tail -n 1)"
    say "vllm_up: model at $model"
    timeout 120 "$PY" -m vllm_myops.cli doctor 2>&1 | tail -n 30
    # VLLM_UP_COMPARE=0: our server only (no native server, no bf16 copy).
    local compare=(--compare-native)
    [[ "${VLLM_UP_COMPARE:-1}" == 0 ]] && compare=()
    say "vllm_up: vllm-myops serve ${compare[*]} (default: torch.compile + CUDA graphs)"
    # The main job as a user runs it (the built-in model from the cache just
    # filled, all three families, then vLLM's own kernels on the same
    # weights), a fixed KV cache (vLLM would take 92% of the GPU), vLLM's
    # default compile mode. VLLM_UP_ARGS: more vLLM arguments.
    # shellcheck disable=SC2086
    timeout "$((b - 30))" "$PY" -m vllm_myops.cli serve "${compare[@]}" \
      -- --kv-cache-memory-bytes $((4 << 30)) ${VLLM_UP_ARGS:-} 2>&1
  } >"$OUT/vllm_up.log" 2>&1
  rc=$?
  grep -E "assistant:|output:|=> |: the same|ready after|error|Error" "$OUT/vllm_up.log" | tail -n 24 | sed 's/^/  /'
  add_summary vllm_up "$rc" $((SECONDS - t)) "$(grep -E '^  => .*(all [0-9]+ calls|not all|no call|native code)' "$OUT/vllm_up.log" | head -n 3 | sed 's/^ *=> //' | paste -sd ';' -)"
}

stage_vllm_tests() {
  local t=$SECONDS b=$1 rc line args=()
  ensure_built || { add_summary vllm_tests SKIP 0 "no build"; return; }
  vllm_env || { add_summary vllm_tests SKIP 0 "serve carry set incomplete"; return; }
  have_model || { add_summary vllm_tests SKIP 0 "serve carry set: the model's part (smollm2) missing"; return; }
  read -r -a args <<<"${PLUGIN_TEST_ARGS:-tests/plugin}"
  say "vllm_tests: pytest ${args[*]} (budget ${b}s, log vllm_tests.log)"
  # -rA: also the output of passing tests (the e2e tests print their agreement figures).
  timeout -s INT "$b" "$PY" -m pytest -q -rA -p no:cacheprovider --durations=15 "${args[@]}" \
    2>&1 | tee "$OUT/vllm_tests.log" | tail -n 30
  rc=${PIPESTATUS[0]}
  line="$(grep -E "(passed|failed|error)" "$OUT/vllm_tests.log" | tail -n 1)"
  [[ $rc -eq 124 || $rc -eq 130 ]] && line="TIMED OUT after ${b}s; $line"
  add_summary vllm_tests "$rc" $((SECONDS - t)) "$line"
}

stage_e2e() {
  # Each run: E2E_ARGS plus its own arguments (E2E_RUNS: "name=ARGS;..."; one
  # unnamed run without it), for each model; budget shared evenly by what is left.
  local t=$SECONDS b=$1 rc=0 m n per run name rargs tag runs=() models=()
  ensure_built || { add_summary e2e SKIP 0 "no build"; return; }
  vllm_env || { add_summary e2e SKIP 0 "serve carry set incomplete"; return; }
  have_model || { add_summary e2e SKIP 0 "serve carry set: the model's part (smollm2) missing"; return; }
  read -r -a models <<<"${E2E_MODELS:-smollm2 llama3-8b-dummy}"
  if [[ -n "${E2E_RUNS:-}" ]]; then IFS=';' read -r -a runs <<<"$E2E_RUNS"; else runs=("="); fi
  n=$(( ${#models[@]} * ${#runs[@]} ))
  for m in "${models[@]}"; do
    for run in "${runs[@]}"; do
      name="${run%%=*}"; name="${name// /}"; rargs="${run#*=}"
      tag="$m${name:+_$name}"
      per=$(( (b - (SECONDS - t)) / n )); n=$((n - 1))
      say "e2e: $tag (budget ${per}s) ${E2E_ARGS:-} $rargs"
      # shellcheck disable=SC2086
      timeout -s INT "$per" "$PY" -m benchmarks.e2e.benchmark_serving --preset "$m" \
        --save "$OUT/e2e_$tag.json" ${E2E_ARGS:-} $rargs >"$OUT/e2e_$tag.log" 2>&1 || rc=$?
      grep -E "^\[bench\] .*(server starts|ready|evidence|did not start)" "$OUT/e2e_$tag.log" | head -n 12
      sed -n '/^model /,$p' "$OUT/e2e_$tag.log" | head -n 40
      while IFS= read -r l; do EXTRA+=("  e2e $tag: $l"); done < <(sed -n '/^model /,/^counters/p' "$OUT/e2e_$tag.log")
    done
  done
  add_summary e2e "$rc" $((SECONDS - t)) "${models[*]} x ${#runs[@]} run(s) (tables below; e2e_*.json)"
}

stage_system() {
  local t=$SECONDS b=$1 rc=0 model prov per n dir="$OUT/system" args=() sums=()
  ensure_built || { add_summary system SKIP 0 "no build"; return; }
  vllm_env || { add_summary system SKIP 0 "serve carry set incomplete"; return; }
  have_model || { add_summary system SKIP 0 "serve carry set: the model's part (smollm2) missing (its tokenizer)"; return; }
  mkdir -p "$dir"
  read -r -a args <<<"${SYSTEM_ARGS:-}"
  {
    say "system: the Llama-3-8B-shaped model dir (config + SmolLM2's tokenizer; dummy weights)"
    model="$(timeout 120 "$PY" -c 'from benchmarks.e2e import presets; print("MODEL=" + presets.resolve("llama3-8b-dummy").model)' | sed -n 's/^MODEL=//p')"
    [[ -d "$model" ]] || { say "system: no model directory (presets.resolve failed)"; rc=1; }
    say "system: model at $model"
    n=2
    for prov in myops native; do
      [[ -d "$model" ]] || break
      per=$(( (b - 30 - (SECONDS - t)) / n - 15 )); n=$((n - 1))
      say "system: --provider $prov, concurrency 1,64 (budget ${per}s) ${args[*]}"
      # In process (one engine for both concurrencies), vLLM's default mode; a
      # fixed KV cache (vLLM would take 90% of the GPU) and a short context.
      VLLM_ENABLE_V1_MULTIPROCESSING=0 timeout -k 15 -s INT "$per" "$PY" -m tools.profile system \
        --model "$model" --load-format dummy --provider "$prov" --concurrency 1,64 \
        --prompt-len 32 --decode-steps 16 --max-model-len 512 \
        --kv-cache-memory-bytes $((4 << 30)) --out "$dir" "${args[@]}" 2>&1 || rc=$?
    done
  } >"$OUT/system.log" 2>&1
  grep -E "^\[profile\]|^== |^decode:|^prefill:|verdict:|Error|error" "$OUT/system.log" | tail -n 24 | sed 's/^/  /'
  for prov in myops native; do
    for c in 1 64; do [[ -f "$dir/profile_${prov}_c$c.json" ]] && sums+=("$dir/profile_${prov}_c$c.json"); done
  done
  if (( ${#sums[@]} )); then
    "$PY" -m tools.profile compare "${sums[@]}" >"$dir/compare.txt" 2>&1
    { echo; echo "===== side by side ====="; cat "$dir/compare.txt"; } | tee -a "$OUT/system.log"
    while IFS= read -r l; do EXTRA+=("  system: $l"); done <"$dir/compare.txt"
  fi
  # The archive with the Chrome traces if it stays under 5 MB, else without them.
  tar -czf "$OUT/system.tar.gz" -C "$OUT" system
  if (( $(stat -c %s "$OUT/system.tar.gz") > 5 * 1024 * 1024 )); then
    tar -czf "$OUT/system.tar.gz" -C "$OUT" --exclude '*.trace.json' system
    say "system: Chrome traces left out of system.tar.gz (over 5 MB with them)" | tee -a "$OUT/system.log"
  fi
  rm -rf "$dir"
  add_summary system "$rc" $((SECONDS - t)) "${#sums[@]} of 4 runs (myops/native x C=1,64) -> system.log, system.tar.gz"
}

# ---------------------------------------------------------------------------
# Run
# ---------------------------------------------------------------------------
unpack_carry
for i in "${!stages[@]}"; do
  s=${stages[$i]}
  b=$(budget_for "$i")
  if (( $(left) < 45 )); then
    add_summary "$s" SKIP 0 "out of time (${CALL_LIMIT_S}s budget)"
    continue
  fi
  case "$s" in
    carry) ;;  # unpack_carry above did the work
    build) ensure_built || true ;;
    test) stage_test "$b" ;;
    paths) stage_paths "$b" ;;
    bench) stage_bench "$b" ;;
    bench2) stage_bench2 "$b" ;;
    bench_w4a16) stage_bench_w4a16 "$b" ;;
    bench_w4a16_paths) stage_bench_w4a16_paths "$b" ;;
    profile) stage_profile "$b" ;;
    profile_anchors) stage_profile_anchors "$b" ;;
    profile_w4a16) stage_profile_w4a16 "$b" ;;
    hot) stage_hot "$b" ;;
    triage) stage_triage "$b" ;;
    sanitize) stage_sanitize "$b" ;;
    vllm_up) stage_vllm_up "$b" ;;
    vllm_tests) stage_vllm_tests "$b" ;;
    e2e) stage_e2e "$b" ;;
    system) stage_system "$b" ;;
  esac
done

summary="$(
  echo
  echo "==== device_session summary: ${stages[*]} | $((SECONDS - T0))s of ${CALL_LIMIT_S}s | $(date -u +%FT%TZ) ===="
  printf '%-10s %-6s %6s  %s\n' stage status time note
  for l in "${SUMMARY[@]}"; do echo "$l"; done
  for l in "${EXTRA[@]}"; do echo "$l"; done
)"
echo "$summary" >"$OUT/summary.txt"
# At most 8 files come back: if more are here, fold the logs into one archive.
if (( $(find "$OUT" -type f | wc -l) > 8 )); then
  (cd "$OUT" && tar czf logs.tgz ./*.log && rm -f ./*.log)
  say "more than 8 files in \$OUT: logs folded into logs.tgz"
fi
echo "$summary"
echo "files: $(find "$OUT" -type f -printf '%P ' | sort)"
