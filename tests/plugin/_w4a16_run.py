# SPDX-License-Identifier: Apache-2.0
"""vllm.LLM engines one after another, teacher-forced over the same prompts
(a script, not a test): the W4A16 end-to-end runs of test_w4a16_e2e.

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
import gc
import json
import os
import tempfile
import time


def _wait_for(path: str | None, timeout_s: float = 1200) -> None:
    t0 = time.time()
    while path and not os.path.exists(path):
        if time.time() - t0 > timeout_s:
            raise TimeoutError(f"wait_for: {path} did not appear in {timeout_s} s")
        time.sleep(0.5)


def run_one(spec: dict, prompt_ids: list[list[int]], args) -> dict:
    _wait_for(spec.get("wait_for"))
    stats_dir = tempfile.mkdtemp(prefix="myops-stats-")
    os.environ["MYOPS_STATS_DIR"] = stats_dir  # read by the spawned workers

    from vllm import LLM, SamplingParams

    from tests.plugin._teacher_forced import rows_from_prompt_logprobs
    from vllm_myops.observability.stats_files import read_settled

    t0 = time.time()
    llm = LLM(
        model=spec["model"],
        quantization=spec.get("quantization"),
        dtype="bfloat16",
        max_model_len=args.max_model_len,
        seed=0,
        kv_cache_memory_bytes=args.kv_cache_mib << 20,
        enforce_eager=spec["mode"] == "eager",
    )
    t_start = time.time() - t0
    try:
        t1 = time.time()
        prompts = [{"prompt_token_ids": ids} for ids in prompt_ids]
        outs = llm.generate(
            prompts,
            SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=2),
            use_tqdm=False,
        )
        teacher = [
            rows_from_prompt_logprobs(p["prompt_token_ids"], o.prompt_logprobs)
            for p, o in zip(prompts, outs)
        ]
        t_gen = time.time() - t1
        after = read_settled(
            stats_dir, float(os.environ["MYOPS_STATS_INTERVAL"]), max_wait_s=10
        )
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
    print(
        f"[w4a16] {spec['name']} ({spec.get('quantization')}, {spec['mode']}): "
        f"start {t_start:.1f}s, requests {t_gen:.2f}s, calls {after['calls']}",
        flush=True,
    )
    return {
        **spec,
        "teacher": teacher,
        "stats_after": after,
        "time_start_s": round(t_start, 1),
        "time_requests_s": round(t_gen, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True)
    ap.add_argument("--teacher-prompts", required=True)
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--kv-cache-mib", type=int, default=256)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.environ.setdefault("MYOPS_STATS_INTERVAL", "0.25")
    with open(args.runs) as f:
        specs = json.load(f)
    with open(args.teacher_prompts) as f:
        prompt_ids = [list(map(int, p)) for p in json.load(f)["prompts"]]
    runs = []
    for spec in specs:
        runs.append(run_one(spec, prompt_ids, args))
        with open(args.out, "w") as f:  # what finished survives a later failure
            json.dump({"runs": runs}, f)


if __name__ == "__main__":
    main()
