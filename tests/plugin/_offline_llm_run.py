# SPDX-License-Identifier: Apache-2.0
"""One offline vllm.LLM run for the plugin tests (a script, not a test).

vLLM spawns its engine core and worker processes, so the LLM lives in this
subprocess (with the __main__ guard spawned children need), never in the
pytest process. It writes one JSON file:

- greedy: generated token ids for sample prompts (temperature 0, ignore_eos)
  and, per step, the margin between the best and second-best logprob
- teacher: per prompt position of corpus lines, the logprob of the actual
  next token and the top-2 (token, logprob) of the distribution
  (prompt_logprobs=2): teacher forcing, so one early difference cannot
  change every later position
- stats: the vllm_myops per-provider counters summed over vLLM's processes,
  before and after the requests
- engine_steps / engine_tokens: vLLM's own count of model forward steps and
  of tokens they processed during the requests (the histogram
  vllm:iteration_tokens_total), the independent figure the counters are
  checked against

Several providers run one after the other in this process (each LLM with
its own engine-core and worker processes, shut down before the next one
starts), which saves one vLLM import per extra provider.

Usage: python -m tests.plugin._offline_llm_run --model DIR --providers myops,native
           --mode eager|compile --out FILE.json [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time


def _metric(metrics, name):
    for m in metrics:
        if m.name == name:
            return m
    return None


def run_one(args, provider: str) -> dict:
    stats_dir = tempfile.mkdtemp(prefix="myops-stats-")
    # Read by the engine-core and worker processes this LLM spawns.
    os.environ["MYOPS_STATS_DIR"] = stats_dir

    from vllm import LLM, SamplingParams

    from vllm_myops.observability.stats_files import read_settled
    from vllm_myops.testing.tiny_model import CORPUS, sample_prompts

    interval = float(os.environ["MYOPS_STATS_INTERVAL"])
    t0 = time.time()
    llm = LLM(
        model=args.model,
        dtype=args.dtype,
        max_model_len=512,
        seed=0,
        # Explicit KV cache size: vLLM-CPU otherwise reserves a fraction of
        # the node's memory and refuses to start on a busy machine.
        kv_cache_memory_bytes=256 << 20,
        disable_log_stats=False,
        enforce_eager=args.mode == "eager",
        kernel_config={
            "ir_op_priority": {"rms_norm": [provider], "fused_add_rms_norm": [provider]}
        },
    )
    t_start = time.time() - t0
    try:
        before = read_settled(stats_dir, interval, max_wait_s=10)
        metrics0 = llm.get_metrics()

        t1 = time.time()
        prompts_greedy = sample_prompts()
        greedy_out = llm.generate(
            prompts_greedy,
            SamplingParams(
                temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True, logprobs=2
            ),
            use_tqdm=False,
        )
        greedy = [list(o.outputs[0].token_ids) for o in greedy_out]
        # Per step: margin between the best and second-best logprob (a near
        # tie is where a legitimate rounding difference can flip the choice).
        greedy_margins = []
        for o in greedy_out:
            steps = []
            for lp in o.outputs[0].logprobs or []:
                ranked = sorted(v.logprob for v in lp.values() if v.rank in (1, 2))
                steps.append(
                    float(ranked[-1] - ranked[0]) if len(ranked) == 2 else None
                )
            greedy_margins.append(steps)

        tok = llm.get_tokenizer()
        lines = [ln for ln in CORPUS.splitlines() if ln.strip()]
        prompts = [{"prompt_token_ids": tok(ln).input_ids} for ln in lines]
        tf_out = llm.generate(
            prompts,
            SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=2),
            use_tqdm=False,
        )
        teacher = []
        for p, o in zip(prompts, tf_out):
            ids = p["prompt_token_ids"]
            rows = []
            for pos, lp in enumerate(o.prompt_logprobs or []):
                if lp is None:  # the first position has no prediction
                    continue
                ranked = sorted(
                    (v.rank, t, v.logprob) for t, v in lp.items() if v.rank is not None
                )
                top = [(t, float(lg)) for r, t, lg in ranked if r in (1, 2)]
                actual = ids[pos]
                rows.append(
                    {
                        "token": actual,
                        "lp": float(lp[actual].logprob),
                        "top1": top[0][0],
                        "top1_lp": top[0][1],
                        "top2_lp": top[1][1] if len(top) > 1 else None,
                    }
                )
            teacher.append(rows)
        t_gen = time.time() - t1

        metrics1 = llm.get_metrics()
        after = read_settled(stats_dir, interval, max_wait_s=10)
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()

    h0 = _metric(metrics0, "vllm:iteration_tokens_total")
    h1 = _metric(metrics1, "vllm:iteration_tokens_total")
    result = {
        "model": args.model,
        "provider": provider,
        "mode": args.mode,
        "dtype": args.dtype,
        "greedy": greedy,
        "greedy_margins": greedy_margins,
        "teacher": teacher,
        "num_requests": len(prompts_greedy) + len(prompts),
        "stats_before": before,
        "stats_after": after,
        "engine_steps": (h1.count - (h0.count if h0 else 0)) if h1 else None,
        "engine_tokens": (h1.sum - (h0.sum if h0 else 0)) if h1 else None,
        "time_start_s": round(t_start, 1),
        "time_requests_s": round(t_gen, 2),
    }
    print(
        f"[offline] {provider}/{args.mode}: start {t_start:.1f}s, "
        f"requests {t_gen:.2f}s, calls {after['calls']}",
        flush=True,
    )
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--providers", default="myops,native")
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.environ.setdefault("MYOPS_STATS_INTERVAL", "0.25")

    runs = [run_one(args, p) for p in args.providers.split(",")]
    with open(args.out, "w") as f:
        json.dump({"runs": runs}, f)


if __name__ == "__main__":
    main()
