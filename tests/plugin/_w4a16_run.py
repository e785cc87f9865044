# SPDX-License-Identifier: Apache-2.0
"""vllm.LLM engines one after another, teacher-forced over the same prompts
(a script, not a test): the W4A16 end-to-end runs of test_w4a16_e2e
(plumbing in tests.plugin._engine_run).

--runs is a JSON list of {"name", "model", "quantization" (null: none),
"mode": "eager"|"compile", optional "wait_for": a file whose appearance
says the model directory is complete (the test writes checkpoints while the
first engines run)}. Each engine is shut down before the next one
starts (one vLLM import for all). Writes {"runs": [{"name", ..., "teacher",
"stats_after", "time_start_s", "time_requests_s"}]}.

Usage: python -m tests.plugin._w4a16_run --runs RUNS.json
           --teacher-prompts PROMPTS.json --out OUT.json
"""

from __future__ import annotations

import argparse
import json

from tests.plugin import _engine_run


def run_one(spec: dict, prompt_ids: list[list[int]], args) -> dict:
    _engine_run.wait_for(spec.get("wait_for"))
    with _engine_run.started(
        model=spec["model"],
        quantization=spec.get("quantization"),
        dtype="bfloat16",
        max_model_len=args.max_model_len,
        seed=0,
        kv_cache_memory_bytes=args.kv_cache_mib << 20,
        enforce_eager=spec["mode"] == "eager",
    ) as engine:
        scored = _engine_run.score(engine.llm, prompt_ids)
        after = engine.counters()
    print(
        f"[w4a16] {spec['name']} ({spec.get('quantization')}, {spec['mode']}): "
        f"start {engine.time_start_s:.1f}s, requests "
        f"{scored['time_requests_s']:.2f}s, calls {after['calls']}",
        flush=True,
    )
    return {
        **spec,
        "teacher": scored["teacher"],
        "stats_after": after,
        "time_start_s": engine.time_start_s,
        "time_requests_s": scored["time_requests_s"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True)
    ap.add_argument("--teacher-prompts", required=True)
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--kv-cache-mib", type=int, default=256)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(args.runs) as f:
        specs = json.load(f)
    prompt_ids = _engine_run.read_prompts(args.teacher_prompts)
    _engine_run.run_all(specs, lambda spec: run_one(spec, prompt_ids, args), args.out)


if __name__ == "__main__":
    main()
