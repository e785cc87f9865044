# SPDX-License-Identifier: Apache-2.0
"""Fast unit tests of the plugin's pieces that need no vLLM engine: the tiny
model generator, the stats files, the CUDA arch check, the CLI front door
(and `serve`'s error when the default model cannot be fetched).
A few seconds in total."""

from __future__ import annotations

import json
import os

import pytest

from tests.plugin._helpers import requires_vllm, run_python, subprocess_env
from vllm_myops.testing.tiny_model import (
    STAMP,
    make_tiny_model,
    norm_calls_per_forward,
)


def test_tiny_model_is_deterministic_and_cached(tmp_path):
    a = make_tiny_model(tmp_path / "a", "qwen3", seed=3)
    b = make_tiny_model(tmp_path / "b", "qwen3", seed=3)
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    mtime = (a / "model.safetensors").stat().st_mtime_ns
    assert make_tiny_model(tmp_path / "a", "qwen3", seed=3) == a  # cached: no rewrite
    assert (a / "model.safetensors").stat().st_mtime_ns == mtime
    # Other parameters: regenerated in place (it is our directory).
    make_tiny_model(tmp_path / "a", "qwen3", seed=4)
    assert json.loads((a / STAMP).read_text())["seed"] == 4
    assert (a / "model.safetensors").read_bytes() != (
        b / "model.safetensors"
    ).read_bytes()


def test_tiny_model_refuses_foreign_directory(tmp_path):
    (tmp_path / "mine.txt").write_text("user data")
    with pytest.raises(FileExistsError):
        make_tiny_model(tmp_path, "llama")
    assert (tmp_path / "mine.txt").read_text() == "user data"


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_tiny_model_contents(tmp_path, arch):
    from safetensors import safe_open
    from transformers import AutoConfig, AutoTokenizer

    d = make_tiny_model(tmp_path / arch, arch)
    cfg = AutoConfig.from_pretrained(d)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.vocab_size) == (256, 2, 512)
    with safe_open(str(d / "model.safetensors"), "pt") as f:
        names = set(f.keys())
        norm = f.get_tensor("model.layers.0.input_layernorm.weight").float()
    assert ("model.layers.0.self_attn.q_norm.weight" in names) == (arch == "qwen3")
    assert norm.std() > 0.05  # a kernel that ignores the weight is caught
    tok = AutoTokenizer.from_pretrained(d)
    assert len(tok) == 512
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text.endswith("<|assistant|>\n")
    assert norm_calls_per_forward(arch)["fused_add_rms_norm"] == 4


def test_stats_files_sum_over_processes(tmp_path):
    """Two processes counting into one MYOPS_STATS_DIR: read_stats sums."""
    code = r"""
import os, sys, torch
from vllm_myops.observability import counters as ob
assert ob.ENABLED and ob.STATS_DIR
for _ in range(int(sys.argv[1])):
    ob.tick(torch.ones(3, 8), ob.slot("rms_norm", "myops"))
ob.tick(torch.ones(5, 8), ob.slot("fused_add_rms_norm", "native"))
# no explicit dump: the at-exit flush must write the file
"""
    env = dict(os.environ, MYOPS_STATS_DIR=str(tmp_path))
    run_python(["-c", code, "2"], timeout=120, env=env)
    run_python(["-c", code, "5"], timeout=120, env=env)
    from vllm_myops.observability.stats_files import read_stats, verdict

    s = read_stats(tmp_path)
    assert len(s["processes"]) == 2
    assert s["calls"]["rms_norm"] == {"myops": 7, "native": 0}
    assert s["rows"]["rms_norm"]["myops"] == 21
    assert s["calls"]["fused_add_rms_norm"] == {"myops": 0, "native": 2}
    ok, lines = verdict(s)
    assert not ok
    assert "  => RMSNorm: 2 of 9 calls ran on vLLM's native code" in lines


@pytest.mark.parametrize(
    "archs, cap, runs",
    [
        ("8.0;8.6;8.9;9.0", (9, 0), True),
        ("8.0;8.6;8.9;9.0", (8, 7), True),  # 8.6 SASS runs on 8.7
        ("8.0;8.6;8.9;9.0", (10, 0), False),  # no PTX: not on Blackwell
        ("8.0;9.0+PTX", (10, 0), True),
        ("9.0a", (9, 0), None),  # arch-specific only: cannot tell
        ("8.6", (8, 0), False),
        ("", (9, 0), None),
    ],
)
def test_cuda_arch_runs(archs, cap, runs):
    from vllm_myops.platform import cuda_arch_runs

    assert cuda_arch_runs(archs, cap) is runs


@requires_vllm
def test_cli_front_door():
    out = run_python(["-m", "vllm_myops.cli", "--help"], timeout=120).stdout
    for cmd in ("serve", "doctor", "stats"):
        assert cmd in out
    assert "pr-body" not in out
    proc = run_python(["-m", "vllm_myops.cli", "nope"], timeout=120, check=False)
    assert proc.returncode == 2 and "invalid choice: 'nope'" in proc.stderr
    proc = run_python(
        ["-m", "vllm_myops.cli", "stats", "DIR", "--bogus"], timeout=120, check=False
    )
    assert proc.returncode == 2 and "unrecognized arguments: --bogus" in proc.stderr


@requires_vllm
def test_serve_without_the_model_says_how_to_get_it(tmp_path):
    """The default model neither cached nor in the (empty) wheelhouse: exit
    code 2 with a message naming what to set, no traceback, no server."""
    empty = tmp_path / "wheelhouse"
    empty.mkdir()
    env = subprocess_env(
        MYOPS_CACHE_DIR=str(tmp_path / "cache"), MYOPS_WHEELHOUSE=str(empty)
    )
    proc = run_python(
        ["-m", "vllm_myops.cli", "serve"], timeout=300, env=env, check=False
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "error: SmolLM2-135M-Instruct: pip found no" in proc.stderr
    assert "MYOPS_WHEELHOUSE" in proc.stderr and "Traceback" not in proc.stderr
    assert "command:" not in proc.stdout  # no server was started
    proc = run_python(
        ["-m", "vllm_myops.cli", "serve", "--model", "x", "--tiny", "llama"],
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2 and "not allowed with argument" in proc.stderr


@requires_vllm
def test_doctor_reports_choice():
    out = run_python(["-m", "vllm_myops.cli", "doctor", "--json"], timeout=300).stdout
    rep = json.loads(out[out.index("{") :])
    assert rep["versions"]["vllm_version_note"] == "supported"
    if not rep["extension"]["loaded"]:
        pytest.skip(f"vllm_myops._myops_C is not loaded: {rep['extension']['error']}")
    ops = rep["vllm_ir"]["ops"]
    assert ops["rms_norm"]["dispatch"]["bf16 [4,4096] + weight"] == "myops"
    assert ops["rms_norm"]["dispatch"]["variance_size=2048"] == "native"
    assert ops["rms_norm"]["priority_final"] == ["myops", "native"]
    assert rep["extension"]["kernels"]["fused_add_rms_norm"]
