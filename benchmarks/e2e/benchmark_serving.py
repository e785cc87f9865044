# SPDX-License-Identifier: Apache-2.0
"""End-to-end serving benchmark: the same model served by vLLM's OpenAI
server in several configurations ("sides"), side by side. The default sides
are myops,native: our RMSNorm vs vLLM's native one.

    python -m benchmarks.e2e.benchmark_serving --preset tiny --concurrency 1 8
    python -m benchmarks.e2e.benchmark_serving --preset smollm2 --save out.json
    python -m benchmarks.e2e.benchmark_serving --preset llama3-8b-dummy   # on a GPU
    python -m benchmarks.e2e.benchmark_serving --model DIR -- --max-model-len 4096
    ... --sides w4a16,bf16,gptq_marlin   # which servers (benchmarks/e2e/sides.py)
    ... --prompt-tokens 2048 8192  # prompts of exact lengths (default: one text)
    ... --enforce-eager            # vLLM eager mode instead of its default (compiled)
    ... --no-profile               # skip the step breakdown

Presets (benchmarks/e2e/presets.py): tiny, smollm2 (SmolLM2-135M-Instruct),
llama3-8b-dummy (Llama-3-8B's shapes, random weights, --load-format dummy;
its GPTQ-format twin llama3-8b-dummy-gptq serves the gptq_* sides).
Sides (benchmarks/e2e/sides.py): myops, native, bf16, w4a16, gptq_marlin,
gptq_vllm, custom_attn, flash_attn, or --define-side JSON.

Method. One server at a time (the machine has 2 cores), started with
vllm_myops.testing.server.VllmServer (free loopback port, always torn down), in the
order of --sides, then backwards, ... (ABBA generalized, --repeats rounds) so
drift of a shared machine hits every side alike. Per server: warm-up
requests, then for each prompt length and each concurrency level C a fixed
batch of streamed /v1/completions requests through the openai client
(max_tokens, ignore_eos, temperature 0), C in flight at a time. The default
prompt is one fixed text (vLLM's prefix cache serves it after the first
request); with --prompt-tokens every request has its own prompt of exactly
that many token ids (benchmarks/e2e/prompts.py), the same on every side, and
the KV cache and --max-model-len grow to hold C of them at once.
Reported per (side, prompt, C), median over repeats:
- output tokens/s (all completion tokens / wall time of the batch),
- request latency p50/p95, TTFT p50 (first streamed token), TPOT p50 (mean
  time between later tokens of a request).
The counters of each server (MYOPS_STATS_DIR) are recorded too: a side
must have run every call of the op families it claims on our kernels and
none of the others (sides.evidence); the exit status is 1 otherwise.

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

from benchmarks.common.results import portable_arg
from benchmarks.e2e import presets, prompts, sides, step_breakdown
from vllm_myops.testing.server import ServerError, VllmServer, bounded_memory_args

Prompt = str | list[int]
METRICS = (
    "output_tok_per_s",
    "req_per_s",
    "latency_p50_s",
    "latency_p95_s",
    "ttft_p50_s",
    "tpot_p50_s",
)
# Tokens of room next to the text prompt (a few dozen tokens).
TEXT_PROMPT_ROOM = 256
# The KV cache for --prompt-tokens holds C full sequences, rounded up to
# vLLM's block of 16 tokens, with this much headroom.
KV_HEADROOM = 1.15


def _stream_completion(
    client: openai.OpenAI, model: str, prompt: Prompt, max_tokens: int
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
    batch_prompts: list[Prompt],
    conc: int,
    max_tokens: int,
) -> dict[str, Any]:
    """Every prompt of `batch_prompts` once, `conc` requests in flight."""
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    lock = threading.Lock()
    todo = list(batch_prompts)

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                prompt = todo.pop()
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


def level_key(conc: int, prompt_tokens: int | None) -> str:
    """The key of one (prompt, C) level: "C" for the text prompt (as the
    benchmark always keyed it), "ctxP_cC" for token prompts of length P."""
    return str(conc) if prompt_tokens is None else f"ctx{prompt_tokens}_c{conc}"


def level_plan(args: argparse.Namespace) -> list[tuple[int | None, int, int]]:
    """(prompt tokens or None, concurrency, requests) of every level, in
    the order a server runs them."""
    lengths: list[int | None] = list(args.prompt_tokens or [None])
    return [
        (p, conc, max(args.requests or max(2 * conc, 16), conc))
        for p in lengths
        for conc in args.concurrency
    ]


class PromptSource:
    """The prompts of a level: the text prompt n times, or token prompts
    numbered on from the last one taken (warm-up and levels never share a
    prompt; every server takes the same sequence)."""

    def __init__(self, text: str, vocab: int | None) -> None:
        self.text = text
        self.vocab = vocab
        self.next_index = 0

    def take(self, n: int, prompt_tokens: int | None) -> list[Prompt]:
        if prompt_tokens is None:
            return [self.text] * n
        assert self.vocab is not None
        first, self.next_index = self.next_index, self.next_index + n
        return [
            prompts.token_prompt(prompt_tokens, i, self.vocab)
            for i in range(first, first + n)
        ]


def serving_args(
    model: str, preset: presets.Preset, args: argparse.Namespace
) -> list[str]:
    """The vLLM arguments every side shares: the preset's and the user's,
    with --max-model-len and the KV cache grown to hold the largest level
    (C sequences of the longest prompt plus --max-tokens)."""
    extra = list(preset.vllm_args) + list(args.vllm_args)
    longest = max(args.prompt_tokens or [0]) or TEXT_PROMPT_ROOM
    need_len = longest + args.max_tokens
    kv_bytes = preset.kv_cache_bytes
    if args.prompt_tokens:
        user_len = _flag_value(list(args.vllm_args), "--max-model-len")
        if user_len is None:
            extra = _set_flag(extra, "--max-model-len", str(need_len))
        elif int(user_len) < need_len:
            raise SystemExit(
                f"--max-model-len {user_len} < prompt {longest} + {args.max_tokens}"
            )
        config = presets.model_config(model)
        if config is not None and kv_bytes is not None:
            per_seq = -(-need_len // 16) * 16
            need = max(args.concurrency) * per_seq * presets.kv_bytes_per_token(config)
            kv_bytes = max(kv_bytes, int(need * KV_HEADROOM))
    if kv_bytes:
        extra += bounded_memory_args(extra, kv_bytes)
    if args.enforce_eager:
        extra.append("--enforce-eager")
    return extra


def _flag_value(argv: list[str], flag: str) -> str | None:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def _set_flag(argv: list[str], flag: str, value: str) -> list[str]:
    """`argv` with `flag` set to `value` (replaced where it is, else added)."""
    out: list[str] = []
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == flag and i + 1 < len(argv):
            skip = True
            continue
        if a.startswith(flag + "="):
            continue
        out.append(a)
    return out + [flag, value]


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
        [args.prompt] * args.profile_requests,
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


def side_model(side: sides.Side, preset: presets.Preset) -> str:
    if side.model == sides.GPTQ:
        if not preset.gptq_model:
            raise SystemExit(
                f"side {side.name!r} serves a GPTQ-format model: use a preset "
                "that has one (llama3-8b-dummy) or --gptq-model DIR"
            )
        return preset.gptq_model
    return preset.model


def run_server(
    side: sides.Side,
    preset: presets.Preset,
    shared_args: list[str],
    vocab: int | None,
    args: argparse.Namespace,
) -> dict[str, Any]:
    model = side_model(side, preset)
    extra = shared_args + list(side.vllm_args)
    trace_dir = None
    if args.profile:
        trace_dir = Path(tempfile.mkdtemp(prefix=f"vllm-myops-trace-{side.name}-"))
        cfg = {
            "profiler": "torch",
            "torch_profiler_dir": str(trace_dir),
            "torch_profiler_with_stack": False,
            "torch_profiler_use_gzip": False,
        }
        extra += ["--profiler-config", json.dumps(cfg)]
    srv = VllmServer(model, extra, use_myops=side.norms == "myops", env=side.env_dict())
    env = " ".join(f"{k}={v}" for k, v in side.env)
    print(
        f"[bench] {side.name}: starting server ({env + ' ' if env else ''}"
        f"{' '.join(srv.command()[3:])})",
        flush=True,
    )
    source = PromptSource(args.prompt, vocab)
    with srv:
        ready = srv.wait_ready(args.startup_timeout)
        print(f"[bench] {side.name}: ready after {ready:.0f} s", flush=True)
        served = srv.model_id()
        client = srv.client(timeout=600)
        for p in source.take(args.warmup, (args.prompt_tokens or [None])[0]):
            _stream_completion(client, served, p, args.max_tokens)
        levels = {}
        for prompt_tokens, conc, n in level_plan(args):
            lv = _batch(
                client, served, source.take(n, prompt_tokens), conc, args.max_tokens
            )
            lv |= {"concurrency": conc, "prompt_tokens": prompt_tokens}
            levels[level_key(conc, prompt_tokens)] = lv
            ctx = f" ctx {prompt_tokens}" if prompt_tokens else ""
            print(
                f"[bench] {side.name}{ctx} C={conc}: {lv['output_tok_per_s'] or 0:.1f}"
                f" tok/s, p50 {lv['latency_p50_s'] or 0:.3f} s, errors "
                f"{len(lv['errors'])}",
                flush=True,
            )
        stats = srv.stats()
        profile = None
        if trace_dir is not None:
            try:
                profile = _profile(srv, client, served, trace_dir, args)
            except Exception as e:  # the timing stands without it
                profile = {"error": f"{type(e).__name__}: {e}"}
            print(f"[bench] {side.name} profile: {_profile_line(profile)}", flush=True)
    log_text = (
        srv.log_path.read_text(errors="replace") if srv.log_path.is_file() else ""
    )
    problems = sides.evidence(side, stats, log_text)
    errors = sum(len(lv["errors"]) for lv in levels.values())
    if errors:
        problems.append(f"{errors} requests failed")
    print(f"[bench] {side.name} evidence: {'; '.join(problems) or 'ok'}", flush=True)
    return {
        "side": side.name,
        "provider": side.name,  # the key before sides (myops/native)
        "model": portable_arg(model),
        "ready_after_s": ready,
        "levels": levels,
        "counters": stats["calls"],
        "graph_captured": stats.get("graph_captured"),
        "priority": stats["priority"],
        "log_matches": sides.matched_log_lines(side, log_text),
        "vllm_choices": sides.choice_lines(log_text),
        "problems": problems,
        "profile": profile,
    }


def failed_run(side: sides.Side, error: str) -> dict[str, Any]:
    """The record of a side whose server did not start."""
    return {
        "side": side.name,
        "provider": side.name,
        "levels": {},
        "problems": [f"server did not start: {error[-1500:]}"],
        "profile": None,
    }


def _profile_line(p: dict[str, Any]) -> str:
    if "error" in p:
        return p["error"]
    fams = ", ".join(f"{k} {v['share']:.1%}" for k, v in p["families"].items())
    return f"{p['steps']} steps, {p['us_per_step'] or 0:.0f} us/step: {fams}"


def _median(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def summarize(
    runs: list[dict[str, Any]], side_names: list[str], keys: list[str]
) -> dict[str, dict[str, Any]]:
    """summary[side][level key][metric]: the median over the side's runs."""
    summary: dict[str, dict[str, Any]] = {}
    for name in side_names:
        mine = [r for r in runs if r["side"] == name]
        for key in keys:
            lv = [r["levels"][key] for r in mine if key in r["levels"]]
            summary.setdefault(name, {})[key] = {
                k: _median([x[k] for x in lv]) for k in METRICS
            }
    return summary


def _num(v: float | None, width: int, digits: int, scale: float = 1.0) -> str:
    """`v` * `scale` right-aligned, or "-" where no run measured it."""
    return f"{v * scale:>{width}.{digits}f}" if v is not None else f"{'-':>{width}}"


def format_table(
    summary: dict[str, dict[str, Any]],
    side_names: list[str],
    plan: list[tuple[int | None, int, int]],
) -> str:
    """One row per (level, side); then each side after the first against the
    first (the reference): "<side> vs <first>: N.NNx the throughput (tok/s);
    N.NNx lower/higher TPOT p50; ... TTFT p50"."""
    w = max(8, *(len(n) for n in side_names))
    hdr = (
        f"{'ctx':>6} {'C':>3} {'side':<{w}} {'tok/s':>8} {'req/s':>7} "
        f"{'p50 lat s':>10} {'p95 lat s':>10} {'TTFT ms':>8} {'TPOT ms':>8}"
    )
    lines = [hdr, "-" * len(hdr)]
    first = side_names[0]
    for prompt_tokens, conc, _ in plan:
        key = level_key(conc, prompt_tokens)
        ctx = str(prompt_tokens) if prompt_tokens else "text"
        for name in side_names:
            s = summary[name][key]
            lines.append(
                f"{ctx:>6} {conc:>3} {name:<{w}} {_num(s['output_tok_per_s'], 8, 1)} "
                f"{_num(s['req_per_s'], 7, 2)} {_num(s['latency_p50_s'], 10, 3)} "
                f"{_num(s['latency_p95_s'], 10, 3)} {_num(s['ttft_p50_s'], 8, 1, 1e3)} "
                f"{_num(s['tpot_p50_s'], 8, 2, 1e3)}"
            )
        for name in side_names[1:]:
            text = ratio_text(name, first, summary[name][key], summary[first][key])
            if text:
                lines.append(f"{'':>6} {'':>3} {text}")
    return "\n".join(lines)


# Latency metrics the ratio line names (lower is better), with their labels.
RATIO_LATENCIES = (("tpot_p50_s", "TPOT p50"), ("ttft_p50_s", "TTFT p50"))


def latency_ratio_text(label: str, side: float, ref: float) -> str:
    """'1.20x lower TPOT p50' (side faster) / '1.20x higher ...' / 'same ...',
    the factor always >= 1 and the direction in the words."""
    if side == ref or abs(side / ref - 1.0) < 0.005:
        return f"same {label}"
    if side < ref:
        return f"{ref / side:.2f}x lower {label}"
    return f"{side / ref:.2f}x higher {label}"


def ratio_text(side: str, ref: str, s: dict[str, Any], r: dict[str, Any]) -> str | None:
    """'<side> vs <ref>: 1.83x the throughput (tok/s); 1.20x lower TPOT p50;
    ...': side's output tokens/s over the reference's, then each latency as
    a factor >= 1 with its direction; None when neither has a throughput."""
    tps, base = s.get("output_tok_per_s"), r.get("output_tok_per_s")
    if not tps or not base:
        return None
    parts = [f"{tps / base:.2f}x the throughput (tok/s)"]
    for metric, label in RATIO_LATENCIES:
        a, b = s.get(metric), r.get(metric)
        if a and b:
            parts.append(latency_ratio_text(label, a, b))
    return f"{side} vs {ref}: " + "; ".join(parts)


def _metadata() -> dict[str, Any]:
    try:
        from benchmarks.common.results import metadata

        meta = metadata()
    except Exception as e:  # metadata is nice to have, not required
        meta = {"error": str(e)}
    from vllm_myops.plugin import vllm_version

    meta["vllm"] = vllm_version()
    return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--preset", choices=presets.PRESETS, default="smollm2")
    ap.add_argument("--model", help="model dir or HF id (instead of --preset)")
    ap.add_argument(
        "--gptq-model", help="GPTQ-format model dir for the gptq_* sides (with --model)"
    )
    ap.add_argument(
        "--sides",
        default=",".join(sides.DEFAULT_SIDES),
        help="comma-separated sides, the first is the reference of the ratios "
        f"(built in: {', '.join(sides.BUILTIN)})",
    )
    ap.add_argument(
        "--define-side",
        action="append",
        default=[],
        metavar="JSON",
        help='another side: {"name": ..., "vllm_args": [...], "env": {...}, '
        '"norms": "native", "model": "base"|"gptq", "ours": [families], '
        '"expect_log": [regex]}',
    )
    ap.add_argument(
        "--requests",
        type=int,
        default=0,
        help="requests per level (default: 2 x the level's C, at least 16)",
    )
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument(
        "--prompt-tokens",
        type=int,
        nargs="+",
        default=None,
        help="prompt lengths in tokens, each a set of levels (default: --prompt)",
    )
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
        help="rounds, alternating the order of the sides; each starts one "
        "server per side",
    )
    ap.add_argument("--enforce-eager", action="store_true")
    ap.add_argument("--startup-timeout", type=float, default=900)
    ap.add_argument("--save", help="write the results as JSON here")
    args, vllm_args = ap.parse_known_args(argv)
    args.vllm_args = vllm_args[1:] if vllm_args[:1] == ["--"] else vllm_args
    try:
        defined = [sides.side_from_json(d) for d in args.define_side]
        chosen = sides.parse_sides(args.sides, defined)
    except ValueError as e:
        ap.error(str(e))
    if any(p < 1 for p in args.prompt_tokens or []):
        ap.error("--prompt-tokens: lengths of at least 1")

    preset = presets.Preset(args.model) if args.model else presets.resolve(args.preset)
    if args.gptq_model:
        preset = presets.Preset(
            preset.model, preset.vllm_args, preset.kv_cache_bytes, args.gptq_model
        )
    model = preset.model
    shared = serving_args(model, preset, args)
    vocab = prompts.prompt_vocab(model) if args.prompt_tokens else None
    plan = level_plan(args)
    order = sides.interleaved_order(chosen, args.repeats)
    print(
        f"[bench] {len(order)} server starts: {', '.join(s.name for s in order)}",
        flush=True,
    )
    names = [s.name for s in chosen]
    keys = [level_key(c, p) for p, c, _ in plan]
    meta = _metadata() if args.save else {}
    runs: list[dict[str, Any]] = []
    for side in order:
        try:
            runs.append(run_server(side, preset, shared, vocab, args))
        except ServerError as e:  # the other sides still run
            print(f"[bench] {side.name}: {e}", flush=True)
            runs.append(failed_run(side, str(e)))
        if args.save:  # after every server, so a run cut short keeps its part
            out = {
                "schema": "vllm-myops-bench-serving/2",
                "benchmark": "serving",
                "metadata": meta,
                "config": {
                    k: portable_arg(v) if isinstance(v, str | Path) else v
                    for k, v in vars(args).items()
                    if k != "save"
                }
                | {
                    "model": portable_arg(model),
                    "gptq_model": preset.gptq_model and portable_arg(preset.gptq_model),
                    "preset_vllm_args": preset.vllm_args,
                    "shared_vllm_args": shared,
                    "sides": [sides.as_dict(s) for s in chosen],
                    "levels": keys,
                },
                "complete": len(runs) == len(order),
                "summary": summarize(runs, names, keys),
                "runs": runs,
                "evidence_ok": all(not r["problems"] for r in runs)
                and len(runs) == len(order),
            }
            Path(args.save).parent.mkdir(parents=True, exist_ok=True)
            Path(args.save).write_text(json.dumps(out, indent=1, default=str) + "\n")

    summary = summarize(runs, names, keys)
    evidence_ok = all(not r["problems"] for r in runs)

    print(
        f"\nmodel {model}; {'eager' if args.enforce_eager else 'compiled (vLLM default)'}; "
        f"sides {','.join(names)}; {args.requests or 'default'} requests x "
        f"{args.max_tokens} tokens per level; median of {args.repeats} server "
        "runs per side"
    )
    print(format_table(summary, names, plan))
    profiles = {
        r["side"]: r["profile"]
        for r in runs
        if r.get("profile") and "error" not in r["profile"]
    }
    if profiles:
        print("\nstep breakdown (torch.profiler, worker kernels per forward step):")
        print(step_breakdown.format_table(profiles))
    for r in runs:
        if r["problems"]:
            print(f"  {r['side']}: {'; '.join(r['problems'])}")
    print(
        "counters: every side ran its own families on our kernels and no other "
        f"family, its log showed what vLLM chose, no request failed: {evidence_ok}"
    )

    if args.save:
        print(f"saved {args.save}")
    return 0 if evidence_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
