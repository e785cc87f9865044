#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job, from a fresh clone: set up the environment, then serve a model
# through vLLM's OpenAI server with the vllm-myops kernels, send requests and
# show that our kernels handled RMSNorm. Arguments go to `vllm-myops serve`
# (e.g. --model DIR for your own model).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup_env.sh
PY="${VLLM_MYOPS_PYTHON:-.venv/bin/python}"
exec "$PY" -m vllm_myops.cli serve "$@"
