# SPDX-License-Identifier: Apache-2.0
"""End-to-end serving benchmark: the same model served by vLLM's OpenAI
server with the myops provider and with vLLM's native RMSNorm, side by side.

    python -m benchmarks.e2e.benchmark_serving --preset tiny --concurrency 1 8
    python -m benchmarks.e2e.benchmark_serving --preset smollm2 --save out.json
    python -m benchmarks.e2e.benchmark_serving --preset llama3-8b-dummy   # on a GPU
    python -m benchmarks.e2e.benchmark_serving --model DIR -- --max-model-len 4096
    ... --enforce-eager            # vLLM eager mode instead of its default (compiled)
    ... --no-profile               # skip the step breakdown

Presets (benchmarks/e2e/presets.py): tiny, smollm2 (SmolLM2-135M-Instruct),
llama3-8b-dummy (Llama-3-8B's shapes, random weights, --load-format dummy).

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

Step breakdown (default on): after the timed levels, each server is asked
for a torch.profiler trace (vLLM's --profiler-config, /start_profile,
/stop_profile) of --profile-requests requests of --profile-tokens tokens at
once, mostly decode steps; benchmarks/e2e/step_breakdown.py sums the
worker's kernels per family (RMSNorm, attention, GEMM, memcpy, other) per
forward step. Profiling runs after the timing, so it does not perturb it.

On a tiny model RMSNorm is a small share of each step (matmuls, attention,
sampling, HTTP and scheduling dominate), so expect equal throughput within
noise; the point is that the plugin costs nothing end to end. The op-level
comparison lives in benchmarks/kernels/.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import openai

from benchmarks.e2e import presets, step_breakdown
from vllm_myops.testing.server import VllmServer, bounded_memory_args


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


def _post(url: str, timeout: float) -> None:
    req = urllib.request.Request(url, data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        r.read()


def _profile(
    srv: VllmServer, client: openai.OpenAI, served: str, trace_dir: Path, args: Any
) -> dict[str, Any]:
    """One profiled window of --profile-requests concurrent requests."""
    _post(f"{srv.url}/start_profile", 300)
    _batch(
        client,
        served,
        args.prompt,
        args.profile_requests,
        args.profile_requests,
        args.profile_tokens,
    )
    _post(f"{srv.url}/stop_profile", 600)
    deadline = time.time() + 120  # the worker writes its trace after stop
    while time.time() < deadline:
        files = [p for p in trace_dir.rglob("*") if p.is_file()]
        if files and all(time.time() - p.stat().st_mtime > 3 for p in files):
            break
        time.sleep(1)
    result = step_breakdown.breakdown_dir(trace_dir)
    result["window"] = {
        "requests": args.profile_requests,
        "tokens": args.profile_tokens,
    }
    return result


def run_server(
    provider: str, model: str, preset: presets.Preset, args: argparse.Namespace
) -> dict[str, Any]:
    extra = list(preset.vllm_args) + list(args.vllm_args)
    if preset.kv_cache_bytes:
        extra += bounded_memory_args(extra, preset.kv_cache_bytes)
    if args.enforce_eager:
        extra.append("--enforce-eager")
    trace_dir = None
    if args.profile:
        trace_dir = Path(tempfile.mkdtemp(prefix=f"vllm-myops-trace-{provider}-"))
        cfg = {
            "profiler": "torch",
            "torch_profiler_dir": str(trace_dir),
            "torch_profiler_with_stack": False,
            "torch_profiler_use_gzip": False,
        }
        extra += ["--profiler-config", json.dumps(cfg)]
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
            n = max(args.requests or max(2 * conc, 16), conc)
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
        profile = None
        if trace_dir is not None:
            try:
                profile = _profile(srv, client, served, trace_dir, args)
            except Exception as e:  # the timing stands without it
                profile = {"error": f"{type(e).__name__}: {e}"}
            print(f"[bench] {provider} profile: {_profile_line(profile)}", flush=True)
    return {
        "provider": provider,
        "ready_after_s": ready,
        "levels": levels,
        "counters": stats["calls"],
        "graph_captured": stats.get("graph_captured"),
        "priority": stats["priority"],
        "profile": profile,
    }


def _profile_line(p: dict[str, Any]) -> str:
    if "error" in p:
        return p["error"]
    fams = ", ".join(f"{k} {v['share']:.1%}" for k, v in p["families"].items())
    return f"{p['steps']} steps, {p['us_per_step'] or 0:.0f} us/step: {fams}"


def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--preset", choices=presets.PRESETS, default="smollm2")
    ap.add_argument("--model", help="model dir or HF id (instead of --preset)")
    ap.add_argument(
        "--requests",
        type=int,
        default=0,
        help="requests per concurrency level (default: 2 x the level, at least 16)",
    )
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument(
        "--no-profile", dest="profile", action="store_false", help="no breakdown"
    )
    ap.add_argument("--profile-requests", type=int, default=16)
    ap.add_argument("--profile-tokens", type=int, default=32)
    ap.add_argument(
        "--prompt",
        default="The quick brown fox jumps over the lazy dog near the river bank. "
        "A kernel engineer measures before optimising and verifies before trusting.",
    )
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="rounds, alternating the order (ABBA); each starts 2 servers",
    )
    ap.add_argument("--enforce-eager", action="store_true")
    ap.add_argument("--startup-timeout", type=float, default=900)
    ap.add_argument("--save", help="write the results as JSON here")
    args, vllm_args = ap.parse_known_args(argv)
    args.vllm_args = vllm_args[1:] if vllm_args[:1] == ["--"] else vllm_args

    preset = presets.Preset(args.model) if args.model else presets.resolve(args.preset)
    model = preset.model

    order: list[str] = []
    for i in range(args.repeats):
        order += ["myops", "native"] if i % 2 == 0 else ["native", "myops"]
    runs = [run_server(p, model, preset, args) for p in order]

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

    def _ran_only(r: dict[str, Any]) -> bool:
        counts = [r["counters"], r.get("graph_captured") or {}]
        mine = sum(c.get(op, {}).get("myops", 0) for c in counts for op in c)
        other = sum(
            n for c in counts for op in c for p, n in c[op].items() if p != "myops"
        )
        return mine > 0 and other == 0 if r["provider"] == "myops" else mine == 0

    evidence_ok = all(_ran_only(r) for r in runs)

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
    profiles = {
        r["provider"]: r["profile"]
        for r in runs
        if r.get("profile") and "error" not in r["profile"]
    }
    if profiles:
        print("\nstep breakdown (torch.profiler, worker kernels per forward step):")
        print(step_breakdown.format_table(profiles))
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
            | {"model": model, "preset_vllm_args": preset.vllm_args},
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
