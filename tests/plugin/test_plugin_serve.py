# SPDX-License-Identifier: Apache-2.0
"""vLLM's OpenAI API server with the plugin, as a subprocess on a free
loopback port, always torn down (vllm_myops.testing.server.VllmServer stops it and
SIGKILLs its process group on any exit path).

- requests through the `openai` client: chat and completions, a few
  concurrent; the worker's counters show every RMSNorm call on myops;
- the main job, `vllm-myops serve`, end to end on its default model,
  SmolLM2-135M-Instruct with all three families (exit code, the demo's
  answers, every family's calls on our kernels);
- failure mode: extension load failure -> one warning, the server still
  answers, on native.

Times on the 2-core CI machine: ~60-100 s per server start (engine-core and
worker processes each import vLLM). The main-job test serves SmolLM2 (30
layers) eager on the CPU in the quick scope: measured ready after 267 s
compiled (179 s of it torch.compile, load ~5) against ~90 s eager.
torch.compile under vLLM with the counters on stays covered on the CPU by
test_plugin_offline_llm.py::...[qwen3-compile] (the same ops, every call
counted) and test_plugin_dispatch.py::test_vllm_ir_lowering_pipeline;
the full scope and GPUs run the main job exactly as a user does (vLLM's
compiled mode, CUDA graphs on a GPU). All marked slow.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import os
import re

import pytest

from tests.kernels.utils import cuda_devices, is_full_scope
from tests.plugin._helpers import (
    requires_extension,
    requires_vllm,
    run_python,
    subprocess_env,
)
from vllm_myops import ops
from vllm_myops.cli import demo
from vllm_myops.observability.stats_files import read_stats
from vllm_myops.testing.server import VllmServer

pytestmark = [requires_vllm, pytest.mark.slow]

STARTUP_TIMEOUT = 900  # bounded: a hung start fails the test, never the CI job
EAGER_SMALL = [
    "--enforce-eager",
    "--kv-cache-memory-bytes",
    str(256 << 20),
    "--max-model-len",
    "512",
]


def _server(model, env_overrides=None, **kw) -> VllmServer:
    env = subprocess_env(**(env_overrides or {}))
    srv = VllmServer(model, EAGER_SMALL, **kw)
    srv.env = env  # exactly this environment (no inherited MYOPS_* switches)
    return srv


def main_job_vllm_args() -> list[str]:
    """Extra vLLM arguments of the main-job test: ``--enforce-eager`` on the
    CPU in the quick scope (compile coverage: the module docstring), none
    otherwise (vLLM's default compiled mode, as a user runs it). vLLM picks
    CUDA whenever torch sees a GPU."""
    if not cuda_devices() and not is_full_scope():
        return ["--", "--enforce-eager"]
    return []


@requires_extension
def test_main_job_vllm_myops_serve(smollm2_model):
    """`vllm-myops serve` as a user runs it: the default model (SmolLM2, from
    the shared cache the fixture filled: one conversion per run), vLLM's
    compiled mode (eager on the CPU in the quick scope: main_job_vllm_args);
    answers, proves our kernels ran, exit code 0."""
    from vllm_myops.cache import default_cache_dir

    env = subprocess_env(
        MYOPS_CACHE_DIR=str(default_cache_dir()),
        MYOPS_WHEELHOUSE=os.environ.get("MYOPS_WHEELHOUSE"),
    )
    env.pop("VLLM_PLUGINS")  # like a user: all installed plugins load
    proc = run_python(
        [
            "-m",
            "vllm_myops.cli",
            "serve",
            "--startup-timeout",
            str(STARTUP_TIMEOUT),
            *main_job_vllm_args(),
        ],
        timeout=STARTUP_TIMEOUT + 300,
        env=env,
        check=False,
    )
    out = proc.stdout
    print(out)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert f"  model:    {smollm2_model} (SmolLM2-135M-Instruct" in out
    # All three families by default: the 4-bit act-order + zero-point GPTQ
    # checkpoint made once beside the converted model, and each family's flag.
    assert f"{smollm2_model}-gptq-g128-asym-act (4-bit GPTQ, group 128" in out
    assert "--quantization myops_w4a16 --attention-backend CUSTOM" in out
    assert "--max-model-len 8192" in out  # the built-in model's memory bounds
    assert "vllm-myops: vllm.ir.rms_norm -> myops" in out  # start-up line, echoed
    for family in ops.FAMILIES:
        assert re.search(
            rf"  => {family.title}: all \d+ calls ran on vllm_myops kernels", out
        ), family.title
    assert "not enabled" not in out
    assert "server stopped" in out
    # The demo's answers are decisive for this model (test_demo_prompts.py:
    # HF fp32 on the bf16 and the dequantized 4-bit weights), so the served
    # answers must contain what is right, whatever the machine's rounding.
    shown = [
        ln.split(": ", 1)[1]
        for ln in out.splitlines()
        if ln.startswith(("  assistant: ", "  output:    "))
    ]
    assert len(shown) == len(demo.DEMO_REQUESTS), out
    for req, answer in zip(demo.DEMO_REQUESTS, shown, strict=True):
        assert req.expect in answer, (req.prompt, answer)


def test_server_is_torn_down_on_startup_failure(tmp_path):
    """A server that cannot start (no such model dir) is reported with its
    log tail, within the bound, and leaves nothing behind."""
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    srv = _server(empty, {"HF_HUB_OFFLINE": "1"})
    with srv:
        with pytest.raises(Exception) as e:
            srv.wait_ready(STARTUP_TIMEOUT)
        assert "exited with code" in str(e.value) or "not ready" in str(e.value)
    assert srv.proc is not None and srv.proc.poll() is not None
    # The process group is gone (killpg would raise ProcessLookupError).
    with pytest.raises(ProcessLookupError):
        os.killpg(srv.proc.pid, 0)
    assert read_stats(srv.stats_dir)["processes"] == []


@pytest.fixture(scope="module")
def tiny_servers(tiny_models):
    """Two ready servers, started at the same time (a start is mostly
    single-threaded imports; the machine has two cores): "qwen3" with the
    plugin as shipped and "llama-load-failure" with the kernels' load failure
    simulated. Both are torn down, and checked to be, after the module."""
    servers = {
        "qwen3": _server(tiny_models["qwen3"]),
        "llama-load-failure": _server(
            tiny_models["llama"], {"MYOPS_SIMULATE_LOAD_FAILURE": "1"}
        ),
    }
    with contextlib.ExitStack() as stack:
        for srv in servers.values():
            stack.enter_context(srv)
        for srv in servers.values():
            srv.wait_ready(STARTUP_TIMEOUT)
        yield servers
    for srv in servers.values():
        assert srv.proc is not None and srv.proc.poll() is not None  # torn down


@requires_extension
def test_openai_client_chat_and_concurrent_completions(tiny_servers):
    srv = tiny_servers["qwen3"]
    client = srv.client(timeout=120)
    model = client.models.list().data[0].id

    chat = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=16,
        temperature=0.0,
    )
    assert chat.choices[0].message.content
    assert chat.usage.completion_tokens > 0

    prompts = [
        "The quick brown fox",
        "Once upon a time",
        "Every morning the baker",
        "Rain fell on",
    ]

    def complete(p):
        return client.completions.create(
            model=model, prompt=p, max_tokens=12, temperature=0.0
        )

    with cf.ThreadPoolExecutor(len(prompts)) as pool:
        results = list(pool.map(complete, prompts))
    assert all(r.choices[0].text and r.usage.completion_tokens == 12 for r in results)
    # Greedy: the same prompt alone gives the same text as in the batch.
    assert complete(prompts[0]).choices[0].text == results[0].choices[0].text

    stats = srv.stats()
    assert srv.stats_dir and stats["processes"], "no stats file from vLLM's worker"
    calls = stats["calls"]
    for op in ("rms_norm", "fused_add_rms_norm"):
        assert calls[op]["native"] == 0, calls
        assert calls[op]["myops"] > 0, calls
    # Qwen3, 2 layers: 5 rms_norm (input norm of layer 0, q_norm and
    # k_norm per layer) and 4 fused_add_rms_norm per forward.
    assert calls["rms_norm"]["myops"] * 4 == calls["fused_add_rms_norm"]["myops"] * 5
    # myops first; vLLM appends its platform default (["native"] on CPU,
    # ["vllm_c", "native"] on CUDA in eager mode).
    prio = stats["priority"]["rms_norm"]
    assert prio[0] == "myops" and prio[-1] == "native", prio


def test_extension_load_failure_still_serves_on_native(tiny_servers):
    """Kernels unavailable (simulated) while the user asks for myops: one
    warning, vLLM serves, every RMSNorm call runs on vLLM's own code."""
    srv = tiny_servers["llama-load-failure"]
    r = srv.complete("The quick brown fox", max_tokens=8)
    assert r.choices[0].text and r.usage.completion_tokens == 8
    stats = srv.stats()
    log = srv.log_path.read_text()  # the warning is logged at start-up
    warnings = [
        ln
        for ln in log.splitlines()
        if "WARNING" in ln and "vllm-myops: kernels unavailable" in ln
    ]
    assert len(warnings) == 1, "\n".join(warnings) or log[-3000:]
    assert "simulated load failure" in warnings[0]
    for op in ("rms_norm", "fused_add_rms_norm"):
        # vLLM dropped the unsupported myops and kept its platform default:
        # ["native"] on CPU, ["vllm_c", "native"] on CUDA (vllm_c is vLLM's
        # own kernel, which we do not count).
        prio = stats["priority"][op]
        assert "myops" not in prio and prio[-1] == "native", stats
        assert stats["calls"][op]["myops"] == 0, stats
        if prio[0] == "native":
            assert stats["calls"][op]["native"] > 0, stats
