# SPDX-License-Identifier: Apache-2.0
"""End-to-end serving benchmark: the same model served by vLLM's OpenAI
server with the myops provider and with vLLM's native RMSNorm, side by side.

    .venv/bin/python -m benchmarks.e2e.benchmark_serving                # tiny Llama
    .venv/bin/python -m benchmarks.e2e.benchmark_serving --model DIR --save out.json
    ... --enforce-eager            # vLLM eager mode instead of its default (compiled)

Method. One server at a time (the machine has 2 cores), started with
vllm_myops.testing.server.VllmServer (free loopback port, always torn down), in the
order myops, native, native, myops, ... (ABBA, --repeats rounds) so drift of a
shared machine hits both sides alike. Per server: warm-up requests, then for
each concurrency level C a fixed batch of streamed /v1/completions requests
through the openai client (fixed prompt, max_tokens, ignore_eos, temperature
0), C in flight at a time.
Reported per (provider, C), median over repeats:
- output tokens/s (all completion tokens / wall time of the batch),
- request latency p50/p95, TTFT p50 (first streamed token), TPOT p50 (mean
  time between later tokens of a request).
The counters of each server (MYOPS_STATS_DIR) are recorded too: the myops
server must have run every call of our ops on myops, the native one none.

On a tiny model RMSNorm is a small share of each step (matmuls, attention,
sampling, HTTP and scheduling dominate), so expect equal throughput within
noise; the point is that the plugin costs nothing end to end. The op-level
comparison lives in benchmarks/kernels/.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import openai

from vllm_myops.testing.server import VllmServer, tiny_model_memory_args


def _stream_completion(
    client: openai.OpenAI, model: str, prompt: str, max_tokens: int
) -> dict[str, Any]:
    t0 = time.perf_counter()
    stream = client.completions.create(
        model=model,
        prompt=prompt,
        max_tokens=max_tokens,
        temperature=0.0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    stamps: list[float] = []
    tokens = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].text:
            stamps.append(time.perf_counter())
        if chunk.usage:
            tokens = int(chunk.usage.completion_tokens or 0)
    t1 = time.perf_counter()
    n = len(stamps)
    return {
        "latency_s": t1 - t0,
        "ttft_s": (stamps[0] - t0) if stamps else None,
        "tpot_s": ((stamps[-1] - stamps[0]) / (n - 1)) if n > 1 else None,
        "chunks": n,
        "tokens": tokens or n,
    }


def _batch(
    client: openai.OpenAI,
    model: str,
    prompt: str,
    n: int,
    conc: int,
    max_tokens: int,
) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    lock = threading.Lock()
    todo = list(range(n))

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                todo.pop()
            try:
                r = _stream_completion(client, model, prompt, max_tokens)
            except Exception as e:  # recorded, the run reports it
                with lock:
                    errors.append(f"{type(e).__name__}: {e}")
                continue
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat = sorted(r["latency_s"] for r in results)

    def pct(xs: list[float], q: float) -> float | None:
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None

    ttft = sorted(r["ttft_s"] for r in results if r["ttft_s"] is not None)
    tpot = sorted(r["tpot_s"] for r in results if r["tpot_s"] is not None)
    tokens = sum(r["tokens"] for r in results)
    return {
        "requests": len(results), "errors": errors, "wall_s": wall,
        "output_tokens": tokens, "output_tok_per_s": tokens / wall if wall else None,
        "req_per_s": len(results) / wall if wall else None,
        "latency_p50_s": pct(lat, 0.5), "latency_p95_s": pct(lat, 0.95),
        "ttft_p50_s": pct(ttft, 0.5), "tpot_p50_s": pct(tpot, 0.5),
    }  # fmt: skip


def run_server(provider: str, model: str, args: argparse.Namespace) -> dict[str, Any]:
    extra = list(args.vllm_args)
    extra += tiny_model_memory_args(extra)
    if args.enforce_eager:
        extra.append("--enforce-eager")
    srv = VllmServer(model, extra, use_myops=provider == "myops")
    print(
        f"[bench] {provider}: starting server ({' '.join(srv.command()[3:])})",
        flush=True,
    )
    with srv:
        ready = srv.wait_ready(args.startup_timeout)
        served = srv.model_id()
        client = srv.client(timeout=300)
        for _ in range(args.warmup):
            _stream_completion(client, served, args.prompt, args.max_tokens)
        levels = {}
        for conc in args.concurrency:
            n = max(args.requests, conc)
            levels[str(conc)] = _batch(
                client, served, args.prompt, n, conc, args.max_tokens
            )
            lv = levels[str(conc)]
            print(
                f"[bench] {provider} C={conc}: {lv['output_tok_per_s']:.1f} tok/s, "
                f"p50 {lv['latency_p50_s']:.3f} s, errors {len(lv['errors'])}",
                flush=True,
            )
        stats = srv.stats()
    return {
        "provider": provider,
        "ready_after_s": ready,
        "levels": levels,
        "counters": stats["calls"],
        "priority": stats["priority"],
    }


def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--model", help="model dir (default: the tiny Llama, generated locally)"
    )
    ap.add_argument(
        "--requests", type=int, default=32, help="requests per concurrency level"
    )
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument(
        "--prompt",
        default="The quick brown fox jumps over the lazy dog near the river bank. "
        "A kernel engineer measures before optimising and verifies before trusting.",
    )
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument(
        "--repeats", type=int, default=2, help="ABBA rounds (each starts 2 servers)"
    )
    ap.add_argument("--enforce-eager", action="store_true")
    ap.add_argument("--startup-timeout", type=float, default=900)
    ap.add_argument("--save", help="write the results as JSON here")
    args, vllm_args = ap.parse_known_args(argv)
    args.vllm_args = vllm_args[1:] if vllm_args[:1] == ["--"] else vllm_args

    if args.model:
        model = args.model
    else:
        from vllm_myops.testing.tiny_model import default_model_dir, make_tiny_model

        model = str(make_tiny_model(default_model_dir("llama"), "llama"))

    order: list[str] = []
    for i in range(args.repeats):
        order += ["myops", "native"] if i % 2 == 0 else ["native", "myops"]
    runs = [run_server(p, model, args) for p in order]

    summary: dict[str, dict[str, Any]] = {}
    for prov in ("myops", "native"):
        mine = [r for r in runs if r["provider"] == prov]
        for conc in args.concurrency:
            lv = [r["levels"][str(conc)] for r in mine]
            summary.setdefault(prov, {})[str(conc)] = {
                k: _median([x[k] for x in lv])
                for k in (
                    "output_tok_per_s",
                    "req_per_s",
                    "latency_p50_s",
                    "latency_p95_s",
                    "ttft_p50_s",
                    "tpot_p50_s",
                )
            }
    evidence_ok = all(
        all(r["counters"][op]["native"] == 0 and r["counters"][op]["myops"] > 0
            for op in r["counters"]) if r["provider"] == "myops" else
        all(r["counters"][op]["myops"] == 0 for op in r["counters"])
        for r in runs
    )  # fmt: skip

    print(
        f"\nmodel {model}; {'eager' if args.enforce_eager else 'compiled (vLLM default)'}; "
        f"{args.requests} requests x {args.max_tokens} tokens per level; median of "
        f"{args.repeats} server runs per provider"
    )
    hdr = f"{'C':>3} {'provider':<8} {'tok/s':>8} {'req/s':>7} {'p50 lat s':>10} {'p95 lat s':>10} {'TTFT ms':>8} {'TPOT ms':>8}"
    print(hdr)
    print("-" * len(hdr))
    for conc in args.concurrency:
        for prov in ("myops", "native"):
            s = summary[prov][str(conc)]
            print(
                f"{conc:>3} {prov:<8} {s['output_tok_per_s']:>8.1f} {s['req_per_s']:>7.2f} "
                f"{s['latency_p50_s']:>10.3f} {s['latency_p95_s']:>10.3f} "
                f"{(s['ttft_p50_s'] or 0) * 1e3:>8.1f} {(s['tpot_p50_s'] or 0) * 1e3:>8.2f}"
            )
        a, b = summary["myops"][str(conc)], summary["native"][str(conc)]
        if a["output_tok_per_s"] and b["output_tok_per_s"]:
            print(
                f"{'':>3} myops/native throughput: {a['output_tok_per_s'] / b['output_tok_per_s']:.3f}x"
            )
    print(
        f"counters: myops servers ran every call of our ops on myops, native ones none: {evidence_ok}"
    )

    if args.save:
        try:
            from benchmarks.common.results import metadata

            meta = metadata()
        except Exception as e:  # metadata is nice to have, not required
            meta = {"error": str(e)}
        from vllm_myops.plugin import vllm_version

        meta["vllm"] = vllm_version()
        out = {
            "schema": "vllm-myops-bench-serving/1",
            "benchmark": "serving",
            "metadata": meta,
            "config": {k: v for k, v in vars(args).items() if k != "save"}
            | {"model": model},
            "summary": summary,
            "runs": runs,
            "evidence_ok": evidence_ok,
        }
        Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        Path(args.save).write_text(json.dumps(out, indent=1, default=str) + "\n")
        print(f"saved {args.save}")
    return 0 if evidence_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
