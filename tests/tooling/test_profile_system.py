# SPDX-License-Identifier: Apache-2.0
"""tools/profile system: families from the registry (ours per family, then
step_breakdown's), per-step time/launches/idle gaps and the launch-bound
verdict on a synthetic GPU trace, and an end-to-end CPU run of torch.profiler
around the steps of a plain torch model (no vLLM start: the README's command
runs vLLM in process). The trace it writes is one step_breakdown reads."""

from __future__ import annotations

import json

import torch

from benchmarks.e2e import step_breakdown as sb
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
