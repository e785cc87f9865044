# SPDX-License-Identifier: Apache-2.0
"""`vllm-myops serve` without a server: which families a --families value
selects, the vLLM arguments each plan adds (and the user's own flags it
leaves alone), the checkpoints derived once and cached, and the demo's
margins and token comparison. The served end to end run is in
test_plugin_serve.py."""

from __future__ import annotations

import json
import shutil
import types

import pytest

from vllm_myops import ops
from vllm_myops.cli import demo, serve
from vllm_myops.models import derived

ALL = tuple(f.name for f in ops.FAMILIES)


def test_parse_families():
    assert serve.parse_families("all") == ALL
    assert serve.parse_families("none") == ()
    assert serve.parse_families("attention,rmsnorm") == ("layernorm", "attention")
    assert serve.parse_families(" W4A16 ") == ("quantization",)
    assert serve.parse_families("quantization") == ("quantization",)  # folder name
    with pytest.raises(ValueError, match=r"--families: .*'rmsnrom'.*known: rmsnorm"):
        serve.parse_families("rmsnrom")


def test_plan_adds_the_flags_of_each_enabled_family_once():
    p = serve.plan(ALL, [])
    assert p.enabled == ALL
    assert p.use_ir_provider
    assert p.vllm_args == [
        "--quantization",
        "myops_w4a16",
        "--attention-backend",
        "CUSTOM",
    ]
    assert p.notes[0] == "RMSNorm: ours, vllm.ir provider myops"

    p = serve.plan(("layernorm",), [])
    assert p.enabled == ("layernorm",) and p.vllm_args == [] and p.use_ir_provider
    assert p.notes[1:] == ["W4A16 GEMM: vLLM's own", "paged attention: vLLM's own"]

    p = serve.plan((), [])
    assert p.enabled == () and p.vllm_args == [] and not p.use_ir_provider


def test_plan_leaves_the_users_flags_as_given():
    # The user's value names ours: enabled, and not added a second time.
    p = serve.plan(ALL, ["--quantization=myops_w4a16", "--attention-backend", "custom"])
    assert p.enabled == ALL
    assert p.vllm_args == []
    # The user chose vLLM's own: that family's calls are not expected on ours.
    p = serve.plan(ALL, ["--attention-backend", "FLASH_ATTN"])
    assert p.enabled == ("layernorm", "quantization")
    assert "--attention-backend" not in p.vllm_args
    assert p.notes[2].startswith("paged attention: yours (not ours)")
    p = serve.plan(ALL, ["--ir-op-priority", '{"rms_norm":["native"]}'])
    assert "layernorm" not in p.enabled


def test_quantized_weights_only_with_a_quantization_family():
    assert serve._quantizes(ALL)
    assert not serve._quantizes(("layernorm", "attention"))


def test_derived_checkpoints_are_made_once_and_remade_for_a_new_source(
    tiny_models, tmp_path
):
    src = tmp_path / "llama"
    shutil.copytree(tiny_models["llama"], src)
    lines: list[str] = []
    scheme = derived.GptqScheme(group_size=64, sym=False, act_order=True)
    gptq = derived.ensure_gptq(src, scheme, lines.append)
    assert gptq == tmp_path / "llama-gptq-g64-asym-act"
    q = json.loads((gptq / "config.json").read_text())["quantization_config"]
    assert (q["group_size"], q["sym"], q["desc_act"]) == (64, False, True)
    deq = derived.ensure_dequantized(gptq, "bfloat16", lines.append)
    assert deq == tmp_path / "llama-gptq-g64-asym-act-dequant-bf16"
    assert "quantization_config" not in json.loads((deq / "config.json").read_text())
    assert len(lines) == 2  # one line per checkpoint made

    stamp = (gptq / derived.STAMP).read_text()
    assert derived.ensure_gptq(src, scheme, lines.append) == gptq
    assert derived.ensure_dequantized(gptq, "bfloat16", lines.append) == deq
    assert len(lines) == 2 and (gptq / derived.STAMP).read_text() == stamp  # cached

    # Another scheme is another directory; a changed source remakes both.
    other = derived.GptqScheme(group_size=128, sym=True)
    assert derived.ensure_gptq(src, other, lines.append).name == "llama-gptq-g128-sym"
    (src / "config.json").write_text((src / "config.json").read_text() + "\n")
    derived.ensure_gptq(src, scheme, lines.append)
    derived.ensure_dequantized(gptq, "bfloat16", lines.append)
    assert len(lines) == 5
    assert not list(tmp_path.glob(".*.tmp-*"))  # no temp dirs left behind


def _answer(tokens, margins, kind=demo.CHAT):
    return demo.Answer(
        demo.DemoRequest(kind, "q", 8), "".join(tokens), tokens, margins, 0.1
    )


def test_margin_is_over_the_runner_up():
    assert demo._margin(-0.1, [-0.1, -2.6]) == pytest.approx(2.5)
    # The chosen token need not be the first alternative listed.
    assert demo._margin(-0.5, [-1.0, -0.5]) == pytest.approx(0.5)
    # A tie reads as margin 0, not as the token against itself.
    assert demo._margin(-0.7, [-0.7, -0.7]) == 0.0
    assert demo._margin(-0.3, [-0.3]) is None


def test_compare_says_where_two_answers_part():
    a = _answer(["The", " sky", " is", " blue"], [2.0, 1.0, 0.3, 1.0])
    assert demo.compare(a, _answer(list(a.tokens), [])) == "the same 4 tokens"
    b = _answer(["The", " sky", " was", " blue"], [])
    assert demo.compare(a, b) == (
        "the same first 2 tokens, then ours ' is' vs ' was' (our margin there 0.30 nats)"
    )
    c = _answer(["The", " sky"], [])
    assert demo.compare(a, c) == (
        "the same first 2 tokens, then ours ' is' vs (end) (our margin there 0.30 nats)"
    )


def test_show_reports_the_smallest_margin():
    a = _answer(["Au", "."], [1.5, None])
    lines = demo.show(a)
    assert lines[0].startswith("chat (POST /v1/chat/completions, 2 tokens")
    assert "smallest margin 1.50 nats" in lines[0]
    assert lines[2] == "  assistant: Au."
    c = _answer([" 5"], [None], kind=demo.COMPLETION)
    assert "margin" not in demo.show(c)[0]
    assert demo.show(c)[2] == "  output:     5"


def test_user_prompts_replace_the_demo_requests():
    args = types.SimpleNamespace(prompt=None, completion_prompt=None, max_tokens=32)
    assert serve._requests(args) == demo.DEMO_REQUESTS
    args.prompt = "Hi"
    reqs = serve._requests(args)
    assert reqs == (demo.DemoRequest(demo.CHAT, "Hi", 32),)
    assert all(
        r.expect for r in demo.DEMO_REQUESTS
    )  # the built-in ones say what is right
