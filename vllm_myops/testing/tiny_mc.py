# SPDX-License-Identifier: Apache-2.0
"""Data for the ``myops_tiny_mc`` lm-eval task (.buildkite/lm-eval-harness/
tasks): deterministic, local, no downloads.

Each document is a context of ``CTX_WORDS`` words and ``N_CHOICES``
continuations of ``CHOICE_WORDS`` words, all drawn (seeded) from the tiny
model's own vocabulary: whole-word byte-level BPE tokens (``Ġword``), so a
word is exactly one token and every continuation has the same length.

The gold answer is the continuation an FP32 reference forward pass of the
same checkpoint (Hugging Face ``transformers``, not vLLM) ranks first, and
only *decisive* documents are kept: those whose reference top-1 beats the
runner-up by at least ``MIN_MARGIN`` nats. So ``acc`` is the top-1 ranking
agreement between the served model and an independent FP32 reference (our
acceptance measure for numerics); a correct implementation in bf16 or fp32
scores 1.0: bf16 rounding moves a choice's loglikelihood by up to ~0.3 nats
here (measured: myops vs native, max over all choices, Llama 0.26, Qwen3
0.30), so a gap of 1 nat cannot close, while a wrong RMSNorm (which moves
logits by O(1)) flips many (a kernel that drops the norm weight: acc 0.86).

lm-eval calls ``load_dataset(**metadata)``; the metadata carries the model
arguments (``pretrained``/``tokenizer``: the model directory) and, from the
gate runner, ``docs_file``: a JSON list written by ``write_docs`` so both
runs of a comparison score the very same documents without recomputing.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

N_DOCS = 160
CTX_WORDS = 8
CHOICE_WORDS = 3
N_CHOICES = 4
SEED = 1234
MIN_MARGIN = 1.0  # nats between the reference's top-1 and runner-up
GENERATOR_VERSION = 2


def vocabulary_words(model_dir: str | Path) -> list[str]:
    """Whole-word ASCII tokens of the model's tokenizer (without the
    byte-level space marker), sorted for determinism."""
    tok = json.loads((Path(model_dir) / "tokenizer.json").read_text())
    vocab: dict[str, int] = tok["model"]["vocab"]
    words = []
    for piece in vocab:
        if piece.startswith("\u0120"):  # 'Ġ': a leading space in byte-level BPE
            word = piece[1:]
            if len(word) >= 2 and word.isascii() and word.isalpha():
                words.append(word)
    return sorted(words)


def _candidates(words: list[str], rng: random.Random, n: int) -> list[dict[str, Any]]:
    docs = []
    for _ in range(n):
        context = " ".join(rng.choice(words) for _ in range(CTX_WORDS))
        choices: list[str] = []
        while len(choices) < N_CHOICES:
            c = " ".join(rng.choice(words) for _ in range(CHOICE_WORDS))
            if c not in choices:
                choices.append(c)
        docs.append({"context": context, "choices": choices})
    return docs


def encode_pair(
    tokenizer: Any, context: str, continuation: str
) -> tuple[list[int], list[int]]:
    """Token ids as lm-eval's API models build them (add_bos_token=True):
    encode context+continuation, split at the context's length."""
    whole = tokenizer(context + continuation, add_special_tokens=True).input_ids
    ctx = tokenizer(context, add_special_tokens=True).input_ids
    return ctx, whole[len(ctx) :]


def reference_logliks(
    model_dir: str | Path, docs: list[dict[str, Any]], batch: int = 256
) -> list[list[float]]:
    """Sum of log p(continuation | context) per choice, FP32 Hugging Face
    forward pass of the checkpoint (bf16 weights upcast), batched."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.eval()
    seqs, spans = [], []
    for doc in docs:
        for choice in doc["choices"]:
            ctx, cont = encode_pair(tokenizer, doc["context"], " " + choice)
            seqs.append(ctx + cont)
            spans.append((len(ctx), len(cont)))
    scores: list[float] = []
    pad = tokenizer.pad_token_id or 0
    with torch.no_grad():
        for b0 in range(0, len(seqs), batch):
            chunk = seqs[b0 : b0 + batch]
            width = max(len(s) for s in chunk)
            ids = torch.full((len(chunk), width), pad)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for i, s in enumerate(chunk):  # right padding: causal, ignored
                ids[i, : len(s)] = torch.tensor(s)
                mask[i, : len(s)] = 1
            logits = model(input_ids=ids, attention_mask=mask).logits
            logprobs = torch.log_softmax(logits.float(), dim=-1)
            for i, (c0, n) in enumerate(spans[b0 : b0 + batch]):
                targets = ids[i, c0 : c0 + n]
                lp = logprobs[i, c0 - 1 : c0 - 1 + n].gather(-1, targets[:, None])
                scores.append(float(lp.sum()))
    return [scores[i : i + N_CHOICES] for i in range(0, len(scores), N_CHOICES)]


def build_docs(
    model_dir: str | Path, n_docs: int = N_DOCS, seed: int = SEED
) -> list[dict[str, Any]]:
    """n_docs decisive documents with gold labels from the FP32 reference."""
    words = vocabulary_words(model_dir)
    if len(words) < 20:
        raise ValueError(
            f"{model_dir}: only {len(words)} whole-word tokens in the vocabulary"
        )
    rng = random.Random(seed)
    docs: list[dict[str, Any]] = []
    for _ in range(20):  # rounds of candidates; decisive ones are the majority
        cands = _candidates(words, rng, 2 * (n_docs - len(docs)))
        for doc, ll in zip(cands, reference_logliks(model_dir, cands)):
            order = sorted(range(N_CHOICES), key=lambda i: -ll[i])
            margin = ll[order[0]] - ll[order[1]]
            if margin >= MIN_MARGIN:
                doc.update(label=order[0], ref_logliks=ll, ref_margin=margin)
                doc["id"] = len(docs)
                docs.append(doc)
                if len(docs) == n_docs:
                    return docs
    raise RuntimeError(f"only {len(docs)} decisive documents after 20 rounds")


def write_docs(model_dir: str | Path, path: str | Path, n_docs: int = N_DOCS) -> Path:
    path = Path(path)
    payload = {
        "generator_version": GENERATOR_VERSION,
        "model_dir": str(model_dir),
        "n_docs": n_docs,
        "seed": SEED,
        "min_margin": MIN_MARGIN,
        "docs": build_docs(model_dir, n_docs),
    }
    path.write_text(json.dumps(payload, indent=1))
    return path


def load_dataset(**kwargs: Any) -> dict[str, Any]:
    """lm-eval ``custom_dataset`` hook: {"test": datasets.Dataset}."""
    import datasets

    docs_file = kwargs.get("docs_file")
    if docs_file:
        docs = json.loads(Path(docs_file).read_text())["docs"]
    else:
        model_dir = (
            kwargs.get("model_dir")
            or kwargs.get("tokenizer")
            or kwargs.get("pretrained")
        )
        if not model_dir or not (Path(str(model_dir)) / "tokenizer.json").is_file():
            raise ValueError(
                "myops_tiny_mc needs the tiny model directory: pass "
                "metadata={'docs_file': ...} or model_args tokenizer=<dir>"
            )
        docs = build_docs(model_dir, int(kwargs.get("n_docs", N_DOCS)))
    rows = [
        {
            "id": d["id"],
            "context": d["context"],
            "choices": d["choices"],
            "label": d["label"],
        }
        for d in docs
    ]
    return {"test": datasets.Dataset.from_list(rows)}
