# SPDX-License-Identifier: Apache-2.0
"""Tools for testing vllm_myops with vLLM, never imported by the plugin:
the tiny model generator (tiny_model), the tiny model's multiple-choice
documents for lm-eval (tiny_mc), a real text's token windows and lm-eval
documents (real_text) and the OpenAI-server harness (server)."""
