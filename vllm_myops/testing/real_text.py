# SPDX-License-Identifier: Apache-2.0
"""A real English text for accuracy checks of a real model: the corpus as
paragraphs, cut into token windows (teacher-forced tests) or grouped into
documents (the lm-eval perplexity task myops_real_text_ppl,
.buildkite/lm-eval-harness/tasks/myops_real_text). The text itself lives with
the test data (tests/data/real_text/, with its source and licence); callers
pass its path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Words per lm-eval document (~400 SmolLM2 tokens): every document fits one
# window of the server's context, so lm-eval's rolling loglikelihood scores
# each in a single request.
DOC_WORDS = 300


def paragraphs(path: str | Path) -> list[str]:
    """The corpus's paragraphs (the file keeps one per line, blank lines
    between them)."""
    text = Path(path).read_text(encoding="utf-8")
    return [p.strip() for p in text.split("\n\n") if p.strip()]


def corpus_text(path: str | Path) -> str:
    return "\n\n".join(paragraphs(path))


def token_windows(ids: list[int], window: int) -> list[list[int]]:
    """Consecutive non-overlapping windows of `window` tokens covering all of
    `ids` (the last one shorter when the length does not divide): every
    token but each window's first is predicted exactly once."""
    if window < 2:
        raise ValueError(f"window must be >= 2 tokens, got {window}")
    return [ids[i : i + window] for i in range(0, len(ids), window)]


def corpus_windows(path: str | Path, tokenizer: Any, window: int) -> list[list[int]]:
    """The whole corpus tokenized once (no special tokens), then windowed."""
    ids = tokenizer(corpus_text(path), add_special_tokens=False).input_ids
    return [w for w in token_windows(ids, window) if len(w) >= 2]


def documents(path: str | Path, max_words: int = DOC_WORDS) -> list[str]:
    """Consecutive paragraphs joined into documents of at most max_words
    words (a longer paragraph is a document of its own)."""
    docs: list[list[str]] = []
    words = 0
    for para in paragraphs(path):
        n = len(para.split())
        if docs and words + n <= max_words:
            docs[-1].append(para)
            words += n
        else:
            docs.append([para])
            words = n
    return ["\n\n".join(d) for d in docs]


def load_documents(**kwargs: Any) -> dict[str, Any]:
    """lm-eval ``custom_dataset`` hook of the myops_real_text_ppl task: the
    corpus named by the task metadata ``real_text_corpus`` as documents."""
    import datasets

    corpus = kwargs.get("real_text_corpus")
    if not corpus:
        raise ValueError(
            "myops_real_text_ppl needs metadata={'real_text_corpus': <corpus file>}"
        )
    rows = [{"id": i, "text": t} for i, t in enumerate(documents(corpus))]
    return {"test": datasets.Dataset.from_list(rows)}
