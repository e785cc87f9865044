#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Registers, stack, shared and local memory per kernel of built CUDA code, in
# a stable, demangled, diffable form: one line per (arch, kernel), sorted.
# Two builds generate the same kernels when their tables are identical
# (e.g. before and after a refactor that must not change code generation):
#
#   tools/gpu/ptxas_registers.sh before/*.o > before.txt
#   tools/gpu/ptxas_registers.sh after/*.o  > after.txt
#   diff before.txt after.txt
#
# Inputs: object files, shared libraries or fatbins with device code (the
# objects tools/ci/check_cuda_compile.sh keeps with CUDA_CHECK_KEEP=DIR, or
# the built _myops_C*.so). Reads them with `cuobjdump --dump-resource-usage`:
# cuobjdump from PATH, next to nvcc, or from triton's wheel (PYTHON, default
# python3). LOCAL > 0 means local memory (register spills or stack arrays).
# Names are demangled with c++filt when it is present; anonymous namespaces
# print as "(anonymous namespace)", so the file name hashed into them does
# not show.
#
# Output columns (tab-separated): arch regs stack shared local kernel
set -euo pipefail

[[ $# -gt 0 ]] || { echo "usage: $0 FILE..." >&2; exit 2; }
python_bin="${PYTHON:-python3}"

find_cuobjdump() {
  local c
  for c in "$(command -v cuobjdump || true)" \
           "$(dirname "$(readlink -f "$(command -v "${NVCC:-nvcc}" || echo /nonexistent)")")/cuobjdump" \
           "$("$python_bin" -c 'import pathlib, triton; print(pathlib.Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump")' 2>/dev/null || true)"; do
    if [[ -n "$c" && -x "$c" ]] && "$c" --version >/dev/null 2>&1; then
      echo "$c"
      return
    fi
  done
}

cuobjdump_bin="$(find_cuobjdump)"
[[ -n "$cuobjdump_bin" ]] || { echo "$0: no working cuobjdump (PATH, next to nvcc, or triton's wheel)" >&2; exit 1; }

demangle() { if command -v c++filt >/dev/null; then c++filt; else cat; fi; }

for f in "$@"; do
  "$cuobjdump_bin" --dump-resource-usage "$f"
done | awk -v OFS='\t' '
  /^arch = / { arch = $3 }
  /^ Function / { fn = $2; sub(/:$/, "", fn); next }
  fn != "" && /REG:/ {
    regs = stack = shared = local = "?"
    for (i = 1; i <= NF; i++) {
      split($i, kv, ":")
      if (kv[1] == "REG") regs = kv[2]
      else if (kv[1] == "STACK") stack = kv[2]
      else if (kv[1] == "SHARED") shared = kv[2]
      else if (kv[1] == "LOCAL") local = kv[2]
    }
    print arch, regs, stack, shared, local, fn
    fn = ""
  }' | demangle | LC_ALL=C sort -t $'\t' -k1,1 -k6,6 -k2,2n | uniq
