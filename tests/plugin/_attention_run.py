# SPDX-License-Identifier: Apache-2.0
"""vllm.LLM engines one after another (one vLLM import for all), each
teacher-forced over its prompts and then decoding greedily: the runs of
test_attention_e2e (a script, not a test).

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
import gc
import json
import os
import tempfile
import time


def _generated_rows(out) -> list[dict]:
    from tests.plugin._teacher_forced import position_row

    rows = []
    comp = out.outputs[0]
    for tok, lp in zip(comp.token_ids, comp.logprobs or []):
        ranked = sorted((v.rank, t, v.logprob) for t, v in lp.items() if v.rank)
        top = [(t, float(g)) for r, t, g in ranked if r in (1, 2)]
        rows.append(
            position_row(
                tok,
                lp[tok].logprob,
                top[0][0],
                top[0][1],
                top[1][1] if len(top) > 1 else None,
            )
        )
    return rows


def run_one(spec: dict, args) -> dict:
    stats_dir = tempfile.mkdtemp(prefix="myops-stats-")
    os.environ["MYOPS_STATS_DIR"] = stats_dir  # read by the spawned workers

    from vllm import LLM, SamplingParams

    from tests.plugin._teacher_forced import rows_from_prompt_logprobs
    from vllm_myops.observability.stats_files import read_settled

    with open(spec["prompts"]) as f:
        prompt_ids = [list(map(int, p)) for p in json.load(f)["prompts"]]
    interval = float(os.environ["MYOPS_STATS_INTERVAL"])
    t0 = time.time()
    llm = LLM(
        model=spec["model"],
        dtype="bfloat16",
        attention_backend=spec.get("attention_backend"),
        max_model_len=spec.get("max_model_len", args.max_model_len),
        max_num_batched_tokens=args.max_num_batched_tokens,
        seed=0,
        kv_cache_memory_bytes=args.kv_cache_mib << 20,
        enforce_eager=spec["mode"] == "eager",
    )
    t_start = time.time() - t0
    try:
        before = read_settled(stats_dir, interval, max_wait_s=10)
        t1 = time.time()
        prompts = [{"prompt_token_ids": ids} for ids in prompt_ids]
        outs = llm.generate(
            prompts,
            SamplingParams(
                temperature=0.0,
                max_tokens=args.max_tokens,
                ignore_eos=True,
                prompt_logprobs=2,
                logprobs=2,
            ),
            use_tqdm=False,
        )
        teacher = [
            rows_from_prompt_logprobs(p["prompt_token_ids"], o.prompt_logprobs)
            for p, o in zip(prompts, outs)
        ]
        generated = [_generated_rows(o) for o in outs]
        t_gen = time.time() - t1
        after = read_settled(stats_dir, interval, max_wait_s=10)
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
    print(
        f"[attention] {spec['name']} ({spec.get('attention_backend') or 'default'}, "
        f"{spec['mode']}): start {t_start:.1f}s, requests {t_gen:.2f}s, "
        f"calls {after['calls'].get('paged_attention')}",
        flush=True,
    )
    return {
        **spec,
        "prompt_lens": [len(p) for p in prompt_ids],
        "teacher": teacher,
        "generated": generated,
        "stats_before": before,
        "stats_after": after,
        "time_start_s": round(t_start, 1),
        "time_requests_s": round(t_gen, 2),
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
    os.environ.setdefault("MYOPS_STATS_INTERVAL", "0.25")
    with open(args.runs) as f:
        specs = json.load(f)
    runs = []
    for spec in specs:
        runs.append(run_one(spec, args))
        with open(args.out, "w") as f:  # what finished survives a later failure
            json.dump({"runs": runs}, f)


if __name__ == "__main__":
    main()
