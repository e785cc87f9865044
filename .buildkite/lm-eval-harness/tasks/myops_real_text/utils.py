# SPDX-License-Identifier: Apache-2.0
"""The ``custom_dataset`` hook the task's YAML names (lm-eval loads this file
by path); the documents are made by vllm_myops.testing.real_text."""

from vllm_myops.testing.real_text import load_documents

__all__ = ["load_documents"]
