# SPDX-License-Identifier: Apache-2.0
"""One offline vllm.LLM run for the plugin tests (a script, not a test).

vLLM spawns its engine core and worker processes, so the LLM lives in this
subprocess (with the __main__ guard spawned children need), never in the
pytest process. It writes one JSON file:

- greedy: generated token ids for sample prompts (temperature 0, ignore_eos)
  and, per step, the margin between the best and second-best logprob
- teacher: per prompt position, the logprob of the actual next token and
  the top-2 (token, logprob) of the distribution (prompt_logprobs=2):
  teacher forcing, so one early difference cannot change every later
  position. The prompts are the tiny corpus lines, or the token-id
  sequences of --teacher-prompts (e.g. windows of a real text)
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
           [--teacher-prompts FILE.json] [--max-tokens 0] [--max-model-len N]
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


def generate_greedy(llm, max_tokens: int) -> tuple[list, list]:
    """Greedy continuations of the tiny model's sample prompts (token ids)
    and, per step, the margin between the best and second-best logprob (a
    near tie is where a legitimate rounding difference can flip the choice).
    max_tokens 0: none."""
    from vllm import SamplingParams

    from vllm_myops.testing.tiny_model import sample_prompts

    if max_tokens <= 0:
        return [], []
    outs = llm.generate(
        sample_prompts(),
        SamplingParams(
            temperature=0.0, max_tokens=max_tokens, ignore_eos=True, logprobs=2
        ),
        use_tqdm=False,
    )
    margins = []
    for o in outs:
        steps = []
        for lp in o.outputs[0].logprobs or []:
            ranked = sorted(v.logprob for v in lp.values() if v.rank in (1, 2))
            steps.append(float(ranked[-1] - ranked[0]) if len(ranked) == 2 else None)
        margins.append(steps)
    return [list(o.outputs[0].token_ids) for o in outs], margins


def teacher_prompt_ids(llm, teacher_prompts: str | None) -> list[list[int]]:
    """The teacher-forced prompts: the token-id lists of a JSON file
    ({"prompts": [[id, ...], ...]}) or, by default, the tiny corpus lines."""
    if teacher_prompts:
        with open(teacher_prompts) as f:
            return [list(map(int, ids)) for ids in json.load(f)["prompts"]]
    from vllm_myops.testing.tiny_model import CORPUS

    tok = llm.get_tokenizer()
    return [tok(ln).input_ids for ln in CORPUS.splitlines() if ln.strip()]


def run_one(args, provider: str) -> dict:
    stats_dir = tempfile.mkdtemp(prefix="myops-stats-")
    # Read by the engine-core and worker processes this LLM spawns.
    os.environ["MYOPS_STATS_DIR"] = stats_dir

    from vllm import LLM, SamplingParams

    from tests.plugin._teacher_forced import rows_from_prompt_logprobs
    from vllm_myops.observability.stats_files import read_settled

    interval = float(os.environ["MYOPS_STATS_INTERVAL"])
    t0 = time.time()
    llm = LLM(
        model=args.model,
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        seed=0,
        # Explicit KV cache size: vLLM-CPU otherwise reserves a fraction of
        # the node's memory and refuses to start on a busy machine.
        kv_cache_memory_bytes=args.kv_cache_mib << 20,
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
        greedy, greedy_margins = generate_greedy(llm, args.max_tokens)
        prompts = [
            {"prompt_token_ids": ids}
            for ids in teacher_prompt_ids(llm, args.teacher_prompts)
        ]
        tf_out = llm.generate(
            prompts,
            SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=2),
            use_tqdm=False,
        )
        teacher = [
            rows_from_prompt_logprobs(p["prompt_token_ids"], o.prompt_logprobs)
            for p, o in zip(prompts, tf_out)
        ]
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
        "num_requests": len(greedy) + len(prompts),
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
    ap.add_argument(
        "--max-tokens", type=int, default=24, help="greedy tokens per prompt (0: none)"
    )
    ap.add_argument("--teacher-prompts", help="JSON {'prompts': [[token ids]]}")
    ap.add_argument("--max-model-len", type=int, default=512)
    ap.add_argument("--kv-cache-mib", type=int, default=256)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.environ.setdefault("MYOPS_STATS_INTERVAL", "0.25")

    runs = [run_one(args, p) for p in args.providers.split(",")]
    with open(args.out, "w") as f:
        json.dump({"runs": runs}, f)


if __name__ == "__main__":
    main()
