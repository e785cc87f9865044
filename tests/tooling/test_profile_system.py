# SPDX-License-Identifier: Apache-2.0
"""tools/profile system: families from the registry (ours per family, then
step_breakdown's), per-step time/launches/idle gaps and the launch-bound
verdict on a synthetic GPU trace (also one without GPU-side step ranges:
kernels by their launch), the side-by-side table, the vLLM-version shim
(vllm_compat), an end-to-end CPU run of torch.profiler around the steps of a
plain torch model (its trace is one step_breakdown reads), and one slow run of
the CLI on vLLM in process with the tiny Llama (the device stage's path)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from benchmarks.e2e import step_breakdown as sb
from tests.plugin._helpers import requires_extension, requires_vllm, subprocess_env
from tools.profile import system
from vllm_myops import ops as registry


def _x(name, ts, dur, cat="kernel"):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "ts": ts,
        "dur": dur,
        "pid": 1,
        "tid": 7,
    }


def test_families_come_from_the_registry():
    labels = [label for label, _ in system.registry_families()]
    assert labels == [f"ours {f.title}" for f in registry.FAMILIES]
    classify = system.Classifier()
    for spec in registry.OPS:
        fam = f"ours {registry.family(spec.family).title}"
        for k in spec.kernels:
            assert classify(f"_myops_C::{k}", "cpu_op") == fam
    # CUDA kernel names of ours carry the namespace and the op's stem.
    assert classify(
        "void vllm_myops::(anonymous namespace)::w4a16_decode_kernel<8>(...)", "kernel"
    ) == (f"ours {registry.family('quantization').title}")
    # Everything else: step_breakdown's families.
    assert (
        classify(
            "void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(...)", "kernel"
        )
        == "rmsnorm"
    )
    assert classify("nvjet_tst_128x64", "kernel") == "gemm"
    assert classify("Memcpy HtoD", "gpu_memcpy") == "memcpy"


def test_gpu_trace_steps_launches_and_gaps():
    pre, dec = system.step_name(2, 64, 0, 0), system.step_name(0, 0, 2, 2)
    events = [_x(pre, 0, 100, "gpu_user_annotation"), _x(dec, 200, 100, "gpu_user_annotation"),
              _x(dec, 400, 100, "gpu_user_annotation")]  # fmt: skip
    events += [
        _x("void vllm_myops::rms_norm_warp_rows_kernel", 0, 10),
        _x("nvjet_gemm", 10, 80),
    ]
    for t in (200, 400):  # decode: 3 short kernels, idle between them
        events += [
            _x("void vllm_myops::rms_norm_warp_rows_kernel", t + 0, 2),
            _x("nvjet_gemm", t + 20, 10),
            _x("Memcpy DtoH", t + 60, 2, "gpu_memcpy"),
        ]
    r = system.analyze(events)
    assert r["source"] == "gpu kernels"
    assert [s["kind"] for s in r["steps"]] == ["prefill", "decode", "decode"]
    d = r["kinds"]["decode"]
    assert d["steps"] == 2 and d["launches_per_step"] == 3
    assert d["busy_us"] == 14 and d["idle_us"] == 86
    assert d["median_gap_us"] == 24.0  # gaps 18 and 30
    assert d["launch_bound"] and d["verdict"].startswith(
        "launch-bound: 86% of the step is idle"
    )
    fam = d["families"]
    assert (
        fam["ours RMSNorm"]["us_per_step"] == 2
        and fam["gemm"]["launches_per_step"] == 1
    )
    assert fam["memcpy"]["us_per_step"] == 2
    p = r["kinds"]["prefill"]
    assert not p["launch_bound"] and p["verdict"].startswith(
        "not launch-bound: kernels busy 90%"
    )
    text = system.format_table(r)
    assert "decode: 2 steps" in text and "ours RMSNorm" in text


def test_copy_only_range_is_merged_into_the_forward_before_it():
    """vLLM 0.24 on CUDA: a forward's step() range, then a range holding only
    its sampled tokens' device-to-host copy; one decode step, not two."""
    dec = system.step_name(0, 0, 1, 1)
    events = []
    for t in (0, 1000):
        events += [
            _x(dec, t, 700, "gpu_user_annotation"),
            _x("nvjet_gemm", t + 10, 600),
            _x(dec, t + 800, 10, "gpu_user_annotation"),
            _x("Memcpy DtoH", t + 802, 4, "gpu_memcpy"),
        ]
    d = system.analyze(events)["kinds"]["decode"]
    assert d["steps"] == 2 and d["launches_per_step"] == 2
    assert d["wall_us"] == 710 and d["busy_us"] == 604
    assert d["families"]["gemm"]["us_per_step"] == 600
    assert d["families"]["memcpy"]["us_per_step"] == 4


class TinyLM(torch.nn.Module):
    def __init__(self, h: int = 64, layers: int = 2) -> None:
        super().__init__()
        self.norms = torch.nn.ModuleList(torch.nn.RMSNorm(h) for _ in range(layers))
        self.mlps = torch.nn.ModuleList(torch.nn.Linear(h, h) for _ in range(layers))

    def forward(self, x):
        for n, m in zip(self.norms, self.mlps):
            x = x + m(n(x))
            att = torch.softmax(x @ x.transpose(1, 2), dim=-1)
            x = att @ x
        return x


def test_torch_model_on_cpu_end_to_end(tmp_path):
    torch.manual_seed(0)
    trace = tmp_path / "steps.trace.json"
    events = system.torch_model_steps(TinyLM(), torch.randn(2, 16, 64), 3, trace)
    r = system.analyze(events)
    assert r["source"] == "cpu ops (top level)"
    assert [s["kind"] for s in r["steps"]] == ["prefill", "decode", "decode", "decode"]
    dec = r["kinds"]["decode"]
    assert dec["launches_per_step"] > 0 and dec["wall_us"] > 0
    assert dec["families"]["gemm"]["launches_per_step"] >= 2  # aten::linear per layer
    assert dec["families"]["rmsnorm"]["launches_per_step"] >= 2
    files = system.write_outputs(r, tmp_path, "tiny")
    assert (
        json.loads((tmp_path / "tiny.json").read_text())["kinds"]["decode"]["steps"]
        == 3
    )
    png = tmp_path / "tiny.png"
    assert png.exists() and png.read_bytes()[:4] == b"\x89PNG", files
    # The saved trace carries vLLM-style step names: step_breakdown reads it.
    b = sb.breakdown(sb.load_trace(trace))
    assert b["steps"] == 3 and b["source"] == "cpu ops (top level)"


class _Out:
    def __init__(self, rid: str, n: int) -> None:
        self.request_id = rid
        self.outputs = [type("C", (), {"token_ids": list(range(n))})()]


class FakeEngine:
    """vLLM's LLMEngine as the stepping uses it: add_request, step() with
    cumulative outputs of the requests that advanced, has_unfinished_requests.
    Request 1's prefill is chunked over two steps (the first emits nothing)."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.reqs: dict[str, int] = {}
        self.steps = 0

    def add_request(self, rid, prompt, params):
        assert params.max_tokens == self.max_tokens
        self.reqs[rid] = 0

    def step(self):
        self.steps += 1
        x = torch.ones(8, 8)
        _ = x @ x  # something for the profiler to see
        outs = []
        for rid in sorted(self.reqs):
            if self.steps == 1 and rid.endswith("1"):
                continue  # first prefill chunk: no token yet
            if self.reqs[rid] < self.max_tokens:
                self.reqs[rid] += 1
                outs.append(_Out(rid, self.reqs[rid]))
        return outs

    def has_unfinished_requests(self):
        return any(n < self.max_tokens for n in self.reqs.values())


def test_engine_steps_names_steps_from_outputs(tmp_path):
    class P:
        max_tokens = 4

    eng = FakeEngine(4)
    trace = tmp_path / "e.trace.json"
    events = system.engine_steps(eng, P, 2, 16, 3, trace)
    names = [s["name"] for s in system.analyze(events)["steps"]]
    assert names == [
        system.step_name(1, 16, 0, 0),  # request 0 prefilled, request 1 still chunking
        system.step_name(
            1, 16, 1, 1
        ),  # request 1's first token beside request 0's decode
        system.step_name(0, 0, 2, 2),
        system.step_name(0, 0, 2, 2),
        system.step_name(0, 0, 1, 1),  # request 0 finished one step earlier
    ]
    assert [system.step_kind(n) for n in names] == [
        "prefill",
        "mixed",
        "decode",
        "decode",
        "decode",
    ]
    assert eng.steps == 5  # stopped when nothing was left


def test_gpu_trace_without_gpu_ranges_assigns_kernels_by_launch():
    """Where kineto wrote no gpu_user_annotation for the steps, each kernel
    goes to the step whose CPU range its launch call (same correlation id; a
    CUDA graph's kernels: the graph launch's) ran in, and a step spans its
    first to last kernel."""
    pre, dec = system.step_name(1, 32, 0, 0), system.step_name(0, 0, 1, 1)
    events = [
        _x(pre, 0, 50, "user_annotation"),
        _x(dec, 100, 50, "user_annotation"),
        _x("cudaLaunchKernel", 10, 2, "cuda_runtime") | {"args": {"correlation": 1}},
        _x("cudaGraphLaunch", 110, 2, "cuda_runtime") | {"args": {"correlation": 2}},
        _x("cudaLaunchKernel", 200, 2, "cuda_runtime") | {"args": {"correlation": 3}},
    ]
    # The kernels run after their launch, past the CPU ranges' ends.
    events += [
        _x("nvjet_gemm", 60, 30) | {"args": {"correlation": 1}},
        _x("void vllm_myops::rms_norm_warp_rows_kernel", 160, 4)
        | {"args": {"correlation": 2}},
        _x("nvjet_gemm", 170, 10) | {"args": {"correlation": 2}},
        _x("nvjet_gemm", 300, 10) | {"args": {"correlation": 3}},  # outside any step
    ]
    r = system.analyze(events)
    assert [(s["kind"], s["launches"]) for s in r["steps"]] == [
        ("prefill", 1),
        ("decode", 2),
    ]
    d = r["kinds"]["decode"]
    assert d["wall_us"] == 20 and d["busy_us"] == 14
    assert d["families"]["ours RMSNorm"]["launches_per_step"] == 1


def test_compare_table_puts_runs_side_by_side():
    def run(norm_kernel, norm_us):
        dec = system.step_name(0, 0, 4, 4)
        ev = [_x(dec, 0, 100, "gpu_user_annotation")]
        ev += [_x(norm_kernel, 0, norm_us), _x("nvjet_gemm", 50, 40)]
        return system.analyze(ev)

    mine = run("void vllm_myops::rms_norm_warp_rows_kernel", 5)
    native = run("void vllm::rms_norm_kernel", 8)
    text = system.compare_table([("myops_c4", mine), ("native_c4", native)])
    head, row_mine, row_native = text.splitlines()[:3]
    assert "ours RMSNorm" in head and "rmsnorm" in head and "gemm" in head
    # run, kind, steps, batch (requests in the step), wall, busy, idle share
    assert row_mine.split()[:7] == [
        "myops_c4",
        "decode",
        "1",
        "4",
        "100.0",
        "45.0",
        "55%",
    ]
    assert "5.0 (11%)" in row_mine and "0.0 (0%)" in row_mine
    assert "8.0 (17%)" in row_native


def test_llm_kwargs_drop_what_this_vllm_lacks_and_turn_async_scheduling_off():
    from tools.profile import vllm_compat

    wanted = {"kv_cache_memory_bytes": 1 << 30, "max_model_len": 128, "new_knob": 1}
    kw, dropped = vllm_compat.llm_kwargs(
        wanted, accepted={"kv_cache_memory_bytes", "max_model_len", "async_scheduling"}
    )
    assert kw == {
        "kv_cache_memory_bytes": 1 << 30,
        "max_model_len": 128,
        "async_scheduling": False,
    }
    assert dropped == ["new_knob"]
    # A version without the field: nothing added; an explicit choice is kept.
    kw, _ = vllm_compat.llm_kwargs({"max_model_len": 128}, accepted={"max_model_len"})
    assert kw == {"max_model_len": 128}
    kw, _ = vllm_compat.llm_kwargs(
        {"async_scheduling": True}, accepted={"async_scheduling"}
    )
    assert kw == {"async_scheduling": True}


def test_llm_kwargs_names_are_engine_args_of_the_installed_vllm():
    """The names the system profile passes exist in this vLLM (0.32 here, 0.24
    on the GPU machine): none is dropped."""
    pytest.importorskip("vllm.engine.arg_utils")
    from tools.profile import vllm_compat

    names = vllm_compat.engine_arg_names()
    used = {"max_num_seqs", "max_num_batched_tokens", "max_model_len"}
    used |= {"kv_cache_memory_bytes", "enforce_eager", "load_format", "kernel_config"}
    assert used <= names and "async_scheduling" in names


@pytest.mark.slow
@requires_vllm
@requires_extension
def test_cli_on_vllm_in_process_tiny_llama(tmp_path):
    """The device stage's code path (python -m tools.profile system, vLLM in
    process, one engine for two concurrencies, then compare) on the tiny
    Llama on this machine's device: one vLLM start, eager, 2 decode steps."""
    cmd = [
        sys.executable, "-m", "tools.profile", "system", "--tiny", "llama",
        "--concurrency", "1,2", "--decode-steps", "2", "--enforce-eager",
        "--provider", "myops", "--max-model-len", "128",
        "--kv-cache-memory-bytes", str(64 << 20), "--out", str(tmp_path),
    ]  # fmt: skip
    env = subprocess_env(VLLM_ENABLE_V1_MULTIPROCESSING="0")
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "'async_scheduling': False" in p.stdout
    for c in (1, 2):
        r = json.loads((tmp_path / f"profile_myops_c{c}.json").read_text())
        assert r["run"]["concurrency"] == c and r["run"]["provider"] == "myops"
        kinds = [s["kind"] for s in r["steps"]]
        assert kinds[0] == "prefill" and kinds.count("decode") == 2, kinds
        dec = [s for s in r["steps"] if s["kind"] == "decode"]
        assert all(system._batch(s["name"]) == c for s in dec)
        # The tiny Llama's 2 layers x 2 norms + the final norm, all ours.
        assert (
            r["kinds"]["decode"]["families"]["ours RMSNorm"]["launches_per_step"] == 5
        )
        assert r["kinds"]["decode"]["families"]["rmsnorm"]["launches_per_step"] == 0
        assert (tmp_path / f"profile_myops_c{c}.trace.json").stat().st_size > 0
    cmp = subprocess.run(
        [sys.executable, "-m", "tools.profile", "compare",
         str(tmp_path / "profile_myops_c1.json"), str(tmp_path / "profile_myops_c2.json")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    lines = cmp.stdout.splitlines()
    assert lines[0].startswith("run") and "ours RMSNorm" in lines[0]
    assert [ln.split()[:2] for ln in lines[1:5]] == [
        ["profile_myops_c1", "decode"],
        ["profile_myops_c1", "prefill"],
        ["profile_myops_c2", "decode"],
        ["profile_myops_c2", "prefill"],
    ]
