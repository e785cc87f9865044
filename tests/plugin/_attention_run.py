# SPDX-License-Identifier: Apache-2.0
"""vllm.LLM engines one after another (one vLLM import for all), each
teacher-forced over its prompts and then decoding greedily: the runs of
test_attention_e2e (a script, not a test; plumbing in
tests.plugin._engine_run).

--runs is a JSON list of {"name", "model", "prompts" (a JSON file of
{"prompts": [[token ids], ...]}), "attention_backend" (null: vLLM's
default), "mode": "eager"|"compile", optional "max_model_len" (else
--max-model-len)}. Each request asks for
prompt_logprobs=2 (teacher forcing over the prompt: prefill and chunked
prefill) and --max-tokens greedy tokens with logprobs=2 (decode rows, which
the scheduler mixes with other prompts' prefill chunks when
--max-num-batched-tokens is below the prompts' total). Counters are read
before and after the requests. Writes {"runs": [{"name", ..., "teacher",
"generated", "stats_before", "stats_after", "time_start_s",
"time_requests_s"}]}.

Usage: python -m tests.plugin._attention_run --runs RUNS.json --out OUT.json
"""

from __future__ import annotations

import argparse
import json

from tests.plugin import _engine_run


def run_one(spec: dict, args: argparse.Namespace) -> dict:
    prompt_ids = _engine_run.read_prompts(spec["prompts"])
    with _engine_run.started(
        model=spec["model"],
        dtype="bfloat16",
        attention_backend=spec.get("attention_backend"),
        max_model_len=spec.get("max_model_len", args.max_model_len),
        max_num_batched_tokens=args.max_num_batched_tokens,
        seed=0,
        kv_cache_memory_bytes=args.kv_cache_mib << 20,
        enforce_eager=spec["mode"] == "eager",
    ) as engine:
        before = engine.counters()
        scored = _engine_run.score(engine.llm, prompt_ids, args.max_tokens)
        after = engine.counters()
    print(
        f"[attention] {spec['name']} ({spec.get('attention_backend') or 'default'}, "
        f"{spec['mode']}): start {engine.time_start_s:.1f}s, requests "
        f"{scored['time_requests_s']:.2f}s, calls {after['calls'].get('paged_attention')}",
        flush=True,
    )
    return {
        **spec,
        **scored,
        "prompt_lens": [len(p) for p in prompt_ids],
        "stats_before": before,
        "stats_after": after,
        "time_start_s": engine.time_start_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True)
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--max-num-batched-tokens", type=int, default=1024)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--kv-cache-mib", type=int, default=256)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(args.runs) as f:
        specs = json.load(f)
    _engine_run.run_all(specs, lambda spec: run_one(spec, args), args.out)


if __name__ == "__main__":
    main()
