# SPDX-License-Identifier: Apache-2.0
"""Prompts of an exact length for the serving benchmark (``--prompt-tokens``).

A prompt is a list of token ids (the completions API takes them as is, so
its length does not depend on a tokenizer's merges). Each request gets its
own prompt, so vLLM's prefix cache cannot skip the prefill of a later
request; the ids are a fixed function of (length, request index), so every
side and every repeat serves the same prompts.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

# Low ids are special tokens in the tokenizers we serve.
FIRST_ID = 100


def token_prompt(n_tokens: int, index: int, vocab: int) -> list[int]:
    """`n_tokens` ids in [FIRST_ID, vocab), the same for the same arguments,
    different first ids for different `index` (so no shared prefix block)."""
    if n_tokens < 1:
        raise ValueError(f"a prompt has at least one token, not {n_tokens}")
    low = min(FIRST_ID, vocab // 4)
    if vocab - low < 2:
        raise ValueError(f"vocab {vocab} too small for token prompts")
    rng = random.Random(n_tokens * 1_000_003 + index)
    span = vocab - low
    first = low + index % span
    return [first] + [low + rng.randrange(span) for _ in range(n_tokens - 1)]


def prompt_vocab(model_dir: str | Path) -> int:
    """Ids every part of the server accepts: the smaller of the model's
    vocab_size and the tokenizer's size (the 8B-shaped dummy model has
    128256 embedding rows and SmolLM2's 49152-token tokenizer)."""
    sizes = []
    config = Path(model_dir) / "config.json"
    if config.is_file():
        sizes.append(int(json.loads(config.read_text()).get("vocab_size") or 0))
    local = Path(model_dir).is_dir()
    if not local or any(
        (Path(model_dir) / f).is_file()
        for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
    ):
        try:
            from transformers import AutoTokenizer

            sizes.append(len(AutoTokenizer.from_pretrained(str(model_dir))))
        except Exception:  # an HF id not cached here: the config's size stands
            pass
    sizes = [s for s in sizes if s > 0]
    if not sizes:
        raise ValueError(f"no vocab size for {model_dir} (config.json, tokenizer)")
    return min(sizes)
