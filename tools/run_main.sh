#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job, from a fresh clone: set up the environment, then serve a model
# through vLLM's OpenAI server on all three vllm-myops families (RMSNorm,
# W4A16 on a 4-bit act-order GPTQ checkpoint, paged attention), send requests
# and show, per family, that every call ran on our kernels (exit 1 if not).
# Arguments go to `vllm-myops serve` (e.g. --compare-native, --families,
# --model DIR for your own model).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup_env.sh
PY="${VLLM_MYOPS_PYTHON:-.venv/bin/python}"
exec "$PY" -m vllm_myops.cli serve "$@"
