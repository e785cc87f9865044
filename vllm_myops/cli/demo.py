# SPDX-License-Identifier: Apache-2.0
"""The main job's requests, their answers and the comparison of two
servers' answers token by token.

The default requests are chosen so that the built-in model answers them
decisively: greedy, every generated token leads the next candidate by a
margin well above what bf16 rounding and the 4-bit weights move
(tests/models/test_demo_prompts.py checks it against HF fp32 of the bf16
weights and of the 4-bit checkpoint's dequantized weights). A near-tie
would let the machine's matmul rounding pick the words a person reads.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

CHAT = "chat"
COMPLETION = "completion"


@dataclasses.dataclass(frozen=True)
class DemoRequest:
    kind: str  # CHAT (POST /v1/chat/completions) or COMPLETION (/v1/completions)
    prompt: str
    max_tokens: int
    expect: str = ""  # what a right answer contains ("" for a user's prompt)


# Each stops (max_tokens) before the first token the model is unsure of:
# SmolLM2 goes on after "Au." and "Pacific Ocean" with near-ties.
DEMO_REQUESTS: tuple[DemoRequest, ...] = (
    DemoRequest(CHAT, "What is the chemical symbol for gold?", 8, "Au"),
    DemoRequest(CHAT, "What is the largest ocean on Earth?", 9, "Pacific"),
    DemoRequest(COMPLETION, "1, 2, 3, 4,", 8, "5, 6, 7"),
)


@dataclasses.dataclass
class Answer:
    request: DemoRequest
    text: str
    tokens: list[str]
    # Per generated token: its logprob minus the best other candidate's
    # (None where the server returned no alternative).
    margins: list[float | None]
    seconds: float

    def min_margin(self) -> float | None:
        known = [m for m in self.margins if m is not None]
        return min(known) if known else None


def _margin(chosen: float, alternatives: list[float]) -> float | None:
    others = sorted(alternatives, reverse=True)
    # The chosen token is among the top candidates: drop it once.
    for i, lp in enumerate(others):
        if math.isclose(lp, chosen, rel_tol=0, abs_tol=1e-6):
            others.pop(i)
            break
    return chosen - others[0] if others else None


def ask(server: Any, req: DemoRequest, timeout: float) -> Answer:
    """Sends `req` (greedy, with the top-2 logprobs of each token)."""
    t = time.time()
    if req.kind == CHAT:
        r = server.chat(
            req.prompt, req.max_tokens, timeout, logprobs=True, top_logprobs=2
        )
        choice = r.choices[0]
        content = choice.logprobs.content if choice.logprobs else []
        tokens = [c.token for c in content]
        margins = [
            _margin(c.logprob, [a.logprob for a in c.top_logprobs]) for c in content
        ]
        text = choice.message.content or ""
    elif req.kind == COMPLETION:
        r = server.complete(req.prompt, req.max_tokens, timeout, logprobs=2)
        choice = r.choices[0]
        lp = choice.logprobs
        tokens = list(lp.tokens) if lp else []
        margins = (
            [
                _margin(c, list(top.values())) if top else None
                for c, top in zip(lp.token_logprobs, lp.top_logprobs, strict=True)
            ]
            if lp
            else []
        )
        text = choice.text
    else:
        raise ValueError(
            f"req.kind: expected {CHAT!r} or {COMPLETION!r}, got {req.kind!r}"
        )
    return Answer(req, text, tokens, margins, time.time() - t)


def short(text: str, limit: int = 300) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[:limit] + "..."


def show(answer: Answer) -> list[str]:
    """What a person reads of one answer."""
    req = answer.request
    endpoint = "/v1/chat/completions" if req.kind == CHAT else "/v1/completions"
    m = answer.min_margin()
    decisive = f", smallest margin {m:.2f} nats" if m is not None else ""
    head = (
        f"{req.kind} (POST {endpoint}, {len(answer.tokens)} tokens, "
        f"{answer.seconds:.2f} s{decisive})"
    )
    if req.kind == CHAT:
        return [
            head,
            f"  user:      {short(req.prompt)}",
            f"  assistant: {short(answer.text)}",
        ]
    return [
        head,
        f"  prompt:    {short(req.prompt)}",
        f"  output:    {short(answer.text)}",
    ]


def compare(ours: Answer, other: Answer) -> str:
    """Whether `other` (another server, the same request) gave the same
    tokens as ours, and if not, where they part."""
    a, b = ours.tokens, other.tokens
    if a == b:
        return f"the same {len(a)} tokens"
    k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

    def at(tokens: list[str]) -> str:
        return repr(tokens[k]) if k < len(tokens) else "(end)"

    m = ours.margins[k] if k < len(ours.margins) else None
    margin = f" (our margin there {m:.2f} nats)" if m is not None else ""
    return f"the same first {k} tokens, then ours {at(a)} vs {at(b)}{margin}"
