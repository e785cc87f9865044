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

Several modes and providers run one after the other in this process (each LLM with
its own engine-core and worker processes, shut down before the next one
starts: tests.plugin._engine_run), which saves one vLLM import per extra
run.

Usage: python -m tests.plugin._offline_llm_run --model DIR --providers myops,native
           --modes eager[,compile] --out FILE.json [--dtype bfloat16]
           [--teacher-prompts FILE.json] [--max-tokens 0] [--max-model-len N]
"""

from __future__ import annotations

import argparse
import json

from tests.plugin import _engine_run


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


def run_one(args, mode: str, provider: str) -> dict:
    with _engine_run.started(
        model=args.model,
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        seed=0,
        # Explicit KV cache size: vLLM-CPU otherwise reserves a fraction of
        # the node's memory and refuses to start on a busy machine.
        kv_cache_memory_bytes=args.kv_cache_mib << 20,
        disable_log_stats=False,
        enforce_eager=mode == "eager",
        kernel_config={
            "ir_op_priority": {"rms_norm": [provider], "fused_add_rms_norm": [provider]}
        },
    ) as engine:
        llm = engine.llm
        before = engine.counters()
        metrics0 = llm.get_metrics()
        greedy, greedy_margins = generate_greedy(llm, args.max_tokens)
        prompt_ids = teacher_prompt_ids(llm, args.teacher_prompts)
        scored = _engine_run.score(llm, prompt_ids)
        metrics1 = llm.get_metrics()
        after = engine.counters()
        del llm

    h0 = _metric(metrics0, "vllm:iteration_tokens_total")
    h1 = _metric(metrics1, "vllm:iteration_tokens_total")
    result = {
        "model": args.model,
        "provider": provider,
        "mode": mode,
        "dtype": args.dtype,
        "greedy": greedy,
        "greedy_margins": greedy_margins,
        "teacher": scored["teacher"],
        "num_requests": len(greedy) + len(prompt_ids),
        "stats_before": before,
        "stats_after": after,
        "engine_steps": (h1.count - (h0.count if h0 else 0)) if h1 else None,
        "engine_tokens": (h1.sum - (h0.sum if h0 else 0)) if h1 else None,
        "time_start_s": engine.time_start_s,
        "time_requests_s": scored["time_requests_s"],
    }
    print(
        f"[offline] {provider}/{mode}: start {engine.time_start_s:.1f}s, "
        f"requests {scored['time_requests_s']:.2f}s (teacher-forced), "
        f"calls {after['calls']}",
        flush=True,
    )
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--providers", default="myops,native")
    ap.add_argument(
        "--modes",
        default="eager",
        help="eager and/or compile, comma-separated: each mode runs every provider",
    )
    ap.add_argument("--dtype", default="auto")
    ap.add_argument(
        "--max-tokens", type=int, default=24, help="greedy tokens per prompt (0: none)"
    )
    ap.add_argument("--teacher-prompts", help="JSON {'prompts': [[token ids]]}")
    ap.add_argument("--max-model-len", type=int, default=512)
    ap.add_argument("--kv-cache-mib", type=int, default=256)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    modes = args.modes.split(",")
    assert set(modes) <= {"eager", "compile"}, modes
    runs = [run_one(args, m, p) for m in modes for p in args.providers.split(",")]
    with open(args.out, "w") as f:
        json.dump({"runs": runs}, f)


if __name__ == "__main__":
    main()
