#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the extension against the environment's torch and installs the
# package in editable mode (Python edits need no rebuild; C++/CUDA edits do).
# Serialised with a lock: one build at a time is all a small machine takes.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
mkdir -p build
exec 9>build/.install.lock
flock 9
log=build/install.log
echo "[dev_install] building vllm_myops against $("$PYTHON" -c 'import torch; print("torch", torch.__version__)') (log: $log)"
if ! "$PYTHON" -m pip install -v --no-build-isolation --no-deps -e . \
    --config-settings=build.verbose=true >"$log" 2>&1; then
  tail -n 60 "$log"
  echo "[dev_install] FAILED (full log: $log)" >&2
  exit 1
fi
grep -E "vllm-myops target device|CUDA archs|kernels for|sm_90a kernels" "$log" || true
"$PYTHON" -c "import vllm_myops._custom_ops as o; print('[dev_install] ok: cpu kernel isa =', o.cpu_kernel_isa())"
