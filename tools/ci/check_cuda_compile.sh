#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# CUDA compile check for machines without a GPU (CI): compiles every
# csrc/**/*.cu to an object file for each arch in CUDA_CHECK_ARCHS, with the
# flags of the real build, against CUDA-enabled torch headers fetched once into
# a cache. Fails on any compile error, on any kernel that spills registers
# or needs a stack frame, and on ptxas serializing a kernel's wgmma (all
# three are silent performance bugs). No linking, nothing runs on a GPU.
#
#   CUDA_CHECK_ARCHS   archs to compile for (default "80 90a"; e.g. "80 86 89 90a")
#   VLLM_MYOPS_CACHE   cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/vllm-myops)
#   NVCC               compiler (default: nvcc from PATH)
#   CUDA_CHECK_KEEP    directory to keep objects and ptxas logs in (default: a
#                      temporary directory, removed on exit)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root"

# Headers of the torch release the CUDA builds target; torch 2.14 needs C++20.
TORCH_HEADERS_VERSION=2.14.1
read -r -a archs <<<"${CUDA_CHECK_ARCHS:-80 90a}"
nvcc_bin="${NVCC:-nvcc}"
python_bin="${PYTHON:-python3}"
cache_root="${VLLM_MYOPS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-myops}"
headers="$cache_root/cuda-headers"

log() { echo "[cuda-check] $*"; }
# Temporary directories, removed on exit however the script ends.
tmp_dirs=()
trap 'rm -rf "${tmp_dirs[@]}"' EXIT
die() { echo "[cuda-check] FAILED: $*" >&2; exit 1; }

command -v "$nvcc_bin" >/dev/null || die "nvcc not found (set NVCC or put nvcc on PATH)"
[[ ${#archs[@]} -gt 0 ]] || die "CUDA_CHECK_ARCHS is empty"

# ---- CUDA-enabled torch headers (cached) ------------------------------------
# The CPU-only torch of CI has no ATen/cuda headers. The CUDA torch wheel has
# them; ATen/cuda/CUDAContext.h also includes cuBLAS/cuSPARSE/cuSOLVER headers,
# which come from the nvidia-* wheels. Only the include trees are kept.
fetch_headers() {
  local tmp
  tmp="$(mktemp -d)"
  tmp_dirs+=("$tmp")
  log "downloading torch==$TORCH_HEADERS_VERSION and nvidia-{cublas,cusparse,cusolver} wheels"
  "$python_bin" -m pip download -qq --no-deps --only-binary=:all: -d "$tmp/wheels" \
    "torch==$TORCH_HEADERS_VERSION" nvidia-cublas nvidia-cusparse nvidia-cusolver \
    || die "pip download of the header wheels failed"
  log "extracting include trees into $headers"
  rm -rf "$headers.partial"
  "$python_bin" - "$tmp/wheels" "$headers.partial" "$TORCH_HEADERS_VERSION" <<'EOF'
import pathlib, sys, zipfile

wheels, dest, version = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
prefixes = ("torch/include/", "nvidia/cu13/include/")
found = set()
for wheel in sorted(wheels.glob("*.whl")):
    with zipfile.ZipFile(wheel) as zf:
        members = [m for m in zf.namelist() if m.startswith(prefixes) and not m.endswith("/")]
        for m in members:
            zf.extract(m, dest)
        found.update(p for p in prefixes if any(m.startswith(p) for m in members))
        print(f"[cuda-check]   {wheel.name}: {len(members)} headers")
missing = [p for p in prefixes if p not in found]
if missing:
    sys.exit(f"no {missing} in the downloaded wheels")
(dest / "VERSION").write_text(f"torch=={version}\n")
EOF
  rm -rf "$headers"
  mv "$headers.partial" "$headers"
}

if [[ "$(cat "$headers/VERSION" 2>/dev/null)" == "torch==$TORCH_HEADERS_VERSION" ]]; then
  log "using cached headers in $headers"
else
  mkdir -p "$cache_root"
  fetch_headers
fi

python_include="$("$python_bin" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
[[ -f "$python_include/Python.h" ]] || die "Python.h not found under $python_include"

# ---- Compile ------------------------------------------------------------------
# Flags of the real build (CMakeLists.txt), minus linking.
common_flags=(
  -std=c++20 -O3 -lineinfo --expt-relaxed-constexpr
  -Xcompiler=-fPIC -D_GLIBCXX_USE_CXX11_ABI=1  # torch 2.14 wheels' ABI
  -DTORCH_EXTENSION_NAME=_myops_C -DVLLM_MYOPS_WITH_CUDA
  -DVLLM_MYOPS_WITH_SM90A  # as a real build whose archs include 9.0
  -I csrc
  -isystem "$headers/torch/include"
  -isystem "$headers/torch/include/torch/csrc/api/include"
  -isystem "$headers/nvidia/cu13/include"
  -isystem "$python_include"
  -Xptxas=-v
)

if [[ -n "${CUDA_CHECK_KEEP:-}" ]]; then
  work="$CUDA_CHECK_KEEP"
  mkdir -p "$work"
else
  work="$(mktemp -d)"
  tmp_dirs+=("$work")
fi

# CUDA_CHECK_SOURCES (space separated) narrows the check to some files.
if [[ -n "${CUDA_CHECK_SOURCES:-}" ]]; then
  read -r -a sources <<<"$CUDA_CHECK_SOURCES"
else
  mapfile -t sources < <(find csrc -name '*.cu' | LC_ALL=C sort)
fi
[[ ${#sources[@]} -gt 0 ]] || die "no .cu sources under csrc/"

gencode_for() {  # "90a" -> -gencode arch=compute_90a,code=sm_90a
  echo "-gencode=arch=compute_$1,code=sm_$1"
}

# Same arch rule as CMakeLists.txt: csrc/sm90a/ holds Hopper-only kernels.
builds_for_arch() {  # <source> <arch>
  [[ "$1" != csrc/sm90a/* || "$2" == 90a ]]
}

compiled=0
failed=0
declare -A archs_used=()
# One nvcc per source for all its archs (--threads: the archs' device passes
# run in parallel and the host side is parsed once).
for src in "${sources[@]}"; do
  gencodes=()
  src_archs=()
  for arch in "${archs[@]}"; do
    builds_for_arch "$src" "$arch" || continue
    gencodes+=("$(gencode_for "$arch")")
    src_archs+=("sm_$arch")
  done
  [[ ${#gencodes[@]} -gt 0 ]] || continue
  stem="${src#csrc/}"
  stem="${stem//\//__}"
  obj="$work/${stem%.cu}.o"
  ptxas_log="$work/${stem%.cu}.ptxas.log"
  log "nvcc $src (${src_archs[*]})"
  start=$SECONDS
  if ! "$nvcc_bin" "${common_flags[@]}" "${gencodes[@]}" --threads "${CUDA_CHECK_THREADS:-2}" \
      -c "$src" -o "$obj" >"$ptxas_log" 2>&1; then
    grep -v '^ptxas info' "$ptxas_log" | grep -v '^    [0-9]* bytes stack frame' | head -n 80 >&2
    echo "[cuda-check] compile error in $src for ${src_archs[*]} (full log above, first 80 lines)" >&2
    failed=1
    continue
  fi
  # ptxas -v prints, per function: "Function properties for NAME" followed by
  # "N bytes stack frame, N bytes spill stores, N bytes spill loads".
  bad="$(awk '
    /Function properties for/ { fn = $NF }
    /bytes stack frame/ {
      if ($1 != 0 || $5 != 0 || $9 != 0) print "  " fn ": " $0
    }' "$ptxas_log")"
  # ptxas "(C75xx) Potential Performance Loss: wgmma.mma_async instructions
  # are serialized ...": every wgmma of the kernel waits for the previous one
  # (e.g. a wgmma under a divergent branch). Silent, and it undoes the
  # asynchronous mainloop, so it fails like a spill.
  serial="$(grep 'wgmma.mma_async instructions are serialized' "$ptxas_log" || true)"
  if [[ -n "$serial" ]]; then
    bad="${bad:+$bad
}$serial"
  fi
  # Any other compiler warning output is shown, not fatal.
  grep -v -e '^ptxas info' -e '^    [0-9]* bytes stack frame' "$ptxas_log" || true
  log "  compiled in $((SECONDS - start)) s: $(grep -c 'Compiling entry function' "$ptxas_log") kernel builds"
  if [[ -n "$bad" ]]; then
    echo "[cuda-check] $src (${src_archs[*]}): stack frame, register spills or serialized wgmma:" >&2
    if command -v c++filt >/dev/null; then echo "$bad" | c++filt >&2; else echo "$bad" >&2; fi
    failed=1
  fi
  compiled=$((compiled + ${#src_archs[@]}))
  for a in "${src_archs[@]}"; do archs_used[${a#sm_}]=1; done
done

# ---- Register use per kernel (informational) ----------------------------------
# "Compiling entry function 'X' for 'sm_N'" is followed by "Used R registers".
log "registers per kernel:"
for f in "$work"/*.ptxas.log; do
  awk '
    /Compiling entry function/ { fn = $7; gsub(/\047/, "", fn); arch = $NF; gsub(/\047/, "", arch) }
    /Used [0-9]+ registers/ && fn != "" {
      for (i = 1; i <= NF; i++) if ($i == "Used") regs = $(i + 1)
      print "  " arch "\t" regs " regs\t" fn; fn = ""
    }' "$f"
done | { if command -v c++filt >/dev/null; then c++filt; else cat; fi; }

[[ $failed -eq 0 ]] || die "see the messages above"

# ---- SASS vector width (informational) -----------------------------------------
# Looks for a cuobjdump (it needs nvdisasm beside it or on PATH) on PATH, next
# to nvcc, in triton's wheel, and last in NVIDIA's cuobjdump/nvdisasm wheels
# (fetched once into the cache, ~5 MB). Skipped if none works.
find_cuobjdump() {
  local c
  for c in "$(command -v cuobjdump || true)" \
           "$(dirname "$(readlink -f "$(command -v "$nvcc_bin")")")/cuobjdump" \
           "$("$python_bin" -c 'import pathlib, triton; print(pathlib.Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump")' 2>/dev/null || true)" \
           "$cache_root/cuda-tools/nvidia/cu13/bin/cuobjdump"; do
    if [[ -n "$c" && -x "$c" ]] && PATH="$(dirname "$c"):$PATH" "$c" --version >/dev/null 2>&1; then
      echo "$c"
      return
    fi
  done
}

fetch_sass_tools() {
  local tmp
  tmp="$(mktemp -d)"
  tmp_dirs+=("$tmp")
  log "downloading nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm (SASS check only)"
  "$python_bin" -m pip download -qq --no-deps --only-binary=:all: -d "$tmp" \
    nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm || return 0
  "$python_bin" - "$tmp" "$cache_root/cuda-tools" <<'EOF'
import os, pathlib, sys, zipfile

for wheel in pathlib.Path(sys.argv[1]).glob("*.whl"):
    with zipfile.ZipFile(wheel) as zf:
        for m in zf.namelist():
            if m.startswith("nvidia/cu13/bin/"):
                os.chmod(zf.extract(m, sys.argv[2]), 0o755)
EOF
}

cuobjdump_bin="$(find_cuobjdump)"
if [[ -z "$cuobjdump_bin" ]]; then
  fetch_sass_tools
  cuobjdump_bin="$(find_cuobjdump)"
fi
if [[ -n "$cuobjdump_bin" ]]; then
  log "16-byte global accesses per object (SASS, informational):"
  for obj in "$work"/*.o; do
    PATH="$(dirname "$cuobjdump_bin"):$PATH" "$cuobjdump_bin" --dump-sass "$obj" 2>/dev/null |
      awk -v obj="$(basename "$obj")" '
        /Function :/ { fn = $3; kernels[fn] = 1 }
        /LDG\.E\.128/ { ldg[fn] = 1 }
        /STG\.E\.128/ { stg[fn] = 1 }
        END {
          for (f in kernels) { n++; if (f in ldg) l++; if (f in stg) s++ }
          printf "  %s: %d kernels, %d with LDG.E.128, %d with STG.E.128\n", obj, n, l + 0, s + 0
        }'
  done
else
  log "no working cuobjdump; skipping the SASS check"
fi

echo "cuda compile check: ${#sources[@]} sources x ${#archs_used[@]} archs OK (${compiled} compilations)"
