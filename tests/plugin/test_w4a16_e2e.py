# SPDX-License-Identifier: Apache-2.0
"""W4A16 end to end on real text: SmolLM2-135M-Instruct teacher-forced over
one window of WINDOW tokens of the real corpus (tests/data/real_text, as in
test_plugin_real_text), served by vLLM with our kernels and compared with
vLLM's own GPTQ path and with Hugging Face fp32 references.

Checkpoints, written by ``vllm-myops quantize`` (vllm_myops.cli.quantize)
from the bf16 SmolLM2 directory:

- ``gptq_sym64``: symmetric, group 64 (vLLM 0.32's CPU GPTQ path needs sym,
  no act-order and a group dividing K = 576);
- ``gptq_act_asym128``: asymmetric, act-order, group 128 (576 = 4.5 groups:
  a partial last group), which only ours serves; its dequantized weights are
  written as an fp32 HF directory (``dequantize_checkpoint``) for the
  reference.

Engines, one after the other in one subprocess (tests.plugin._w4a16_run),
all eager (start-up: see test_plugin_real_text's docstring) except, in the
full scope, COMPILED_RUN: ``online`` (bf16 checkpoint + ``--quantization
myops_w4a16``: RTN group 128 asymmetric at load), ``gptq_vllm`` (vLLM's
``gptq``), ``gptq_ours`` (the same checkpoint, ``--quantization
myops_w4a16``) and ``act_asym_ours``. Two HF fp32 references run beside it
on the other core: the bf16 weights (the ppl of the unquantized model;
vLLM bf16 matches it to 0.1%, test_plugin_real_text) and the dequantized
act-order checkpoint.

Gates and why: the constants below (measured values also in the README
section "W4A16 quantization").

Time: 393 s for the module on the 2-core machine (engine starts 37-42 s
eager, 190 s compiled; quantizing overlaps the first start); 1319 s under
a load average of 6-7 from other builds; 253 s in the fresh-clone CI run of
2026-12-01 22:15 (all eager, engine core in-process: tests.plugin._engine_run).
The compiled run is the full
scope's: in the quick scope every engine is eager (~-150 s), and torch.compile
of the W4A16 op stays covered on the CPU by
tests/kernels/quantization/test_w4a16_gemm.py::test_torch_compile_fullgraph
(Inductor, fullgraph, compiled equals eager).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.kernels.utils import is_full_scope
from tests.plugin import _teacher_forced as teacher_forced
from tests.plugin._helpers import (
    REAL_TEXT_CORPUS,
    requires_extension,
    requires_vllm,
    run_python,
    subprocess_env,
)

pytestmark = [requires_vllm, requires_extension, pytest.mark.slow]

CORPUS = REAL_TEXT_CORPUS
WINDOW = 1024
# The one run under torch.compile (vLLM's compiled mode): full scope only,
# see the module docstring.
COMPILED_RUN = "gptq_ours" if is_full_scope() else None

# --- Thresholds ------------------------------------------------------------
# Online RTN int4 (group 128, asym) against the bf16 model's perplexity
# (HF fp32 of the bf16 weights). Measured ratio 1.334 (49.73 vs 37.28 on
# this window; symmetric group 64 through vLLM's own gptq: 1.455): RTN int4
# is costly on a 135M model whose bf16 weights are themselves a dequantized
# Q4_1 GGUF. That cost is RTN's, not the kernel's: the same window through
# HF fp32 with the same dequantized weights gives 49.68 (0.1% off, test
# below). The bound 1.6 is 1.2x the measured ratio; a kernel that doubles
# the ppl fails it, and the gates against the dequantized HF references
# below catch far smaller errors: a missing zero point (zero 8 for every
# asymmetric group) leaves a weight error of 46% of the weights' norm
# against RTN's own 10.6% (12 of SmolLM2's layer weights, group 128), far
# beyond what the agreement gates allow.
MAX_ONLINE_PPL_RATIO = 1.6
# ...and it must cost something: a ratio near 1 means nothing was quantized.
MIN_ONLINE_PPL_RATIO = 1.05
# Ours against HF fp32 of the dequantized weights (online RTN, the
# symmetric group-64 and the act-order asymmetric checkpoints): the bf16
# noise floor. Measured (one window, 1023 positions): online max |dlogprob|
# 0.458 mean 0.035 top-1 96.7% decisive 571/571, ppl +0.10%; sym64 (compiled)
# 0.215 / 0.026 / 96.2% / 592/592, ppl +0.004%; act-order asym g128 0.440 /
# 0.034 / 96.1% / 588/588, ppl +0.22%. Same order as vLLM bf16 vs
# HF fp32 in test_plugin_real_text (max 0.365, mean 0.030, top-1 97.3%, ppl
# 0.09%); the thresholds are those of that test (decisive margin 2 bf16 ulps
# of the largest logits, max 3 ulps, mean half an ulp), the ppl one doubled
# for a window a quarter as long.
DECISIVE_MARGIN = 0.5
MIN_TOP1 = 0.95
MAX_LP_DIFF_VS_HF = 0.75
MEAN_LP_DIFF_VS_HF = 0.0625
MAX_PPL_REL_DIFF_VS_HF = 0.005
# Ours against vLLM 0.32's own gptq path (its W4A16 kernel, cpu_gemm_wna16;
# see VLLM_CPU_INT4_W4A8 below) on the same checkpoint: the same noise
# floor, so the same gates. Measured: vLLM's gptq vs the dequantized HF
# reference max 0.329 mean 0.035 decisive 592/592 ppl -0.25%; ours vs
# vLLM's gptq max 0.310 mean 0.042 top-1 97.0% decisive 553/553 ppl +0.19%.
# (With vLLM's default W4A8 kernel on an AMX CPU, activations quantized to
# int8, vLLM itself is off the reference: ppl +4.6%, max 3.4 nats.)
QUANTIZED_LINEAR_LAYERS = 30 * 4  # qkv, o, gate_up, down per decoder layer


# vLLM-CPU loads one of three builds of its kernels by the CPU's ISA
# (vllm/platforms/cpu.py import_kernels): _C (AVX-512 BF16), _C_AVX512 or
# _C_AVX2. The AVX2 build of vLLM-CPU 0.32 registers no cpu_gemm_wna16, the
# kernel of its CPU GPTQ path, so ``gptq_vllm`` fails at its first forward
# there (AttributeError: '_C' object has no attribute 'cpu_gemm_wna16'); the
# probe asks the loaded build itself, in a child process as vLLM loads it.
_NATIVE_GPTQ_PROBE = """
import json, torch
from vllm.platforms import current_platform as p
if p.is_cpu():
    p.import_kernels()
print(json.dumps({"cpu": p.is_cpu(),
                  "capability": torch.backends.cpu.get_cpu_capability(),
                  "wna16": hasattr(torch.ops._C, "cpu_gemm_wna16")}))
"""


def _native_gptq_unavailable() -> str | None:
    """Why vLLM's own GPTQ path cannot run on this machine, or None."""
    out = run_python(_NATIVE_GPTQ_PROBE, timeout=300).stdout
    probe = json.loads(out.strip().splitlines()[-1])
    if probe["cpu"] and not probe["wna16"]:
        return (
            f"vLLM-CPU's {probe['capability']} build has no cpu_gemm_wna16 "
            "(its CPU GPTQ kernel): no native GPTQ path to compare with"
        )
    return None


def _runs(
    model: Path, ckpt: dict[str, Path], ready: Path, native_gptq: bool
) -> list[dict]:
    def spec(name: str, path: Path, quant: str | None) -> dict:
        mode = "compile" if name == COMPILED_RUN else "eager"
        s = {"name": name, "model": str(path), "quantization": quant, "mode": mode}
        return s if path == model else {**s, "wait_for": str(ready)}

    return [
        spec("online", model, "myops_w4a16"),
        *([spec("gptq_vllm", ckpt["sym64"], None)] if native_gptq else []),
        spec("gptq_ours", ckpt["sym64"], "myops_w4a16"),
        spec("act_asym_ours", ckpt["act_asym128"], "myops_w4a16"),
    ]


@pytest.fixture(scope="module")
def w4a16_runs(smollm2_model: Path, tmp_path_factory) -> dict:
    from transformers import AutoTokenizer

    from vllm_myops.cli.quantize import dequantize_checkpoint, quantize_checkpoint
    from vllm_myops.testing.real_text import corpus_windows

    work = tmp_path_factory.mktemp("w4a16")
    ckpt = {
        "sym64": work / "gptq_sym64",
        "act_asym128": work / "gptq_act_asym128",
        "asym128": work / "gptq_asym128",  # only for its dequantized weights
    }
    ready = work / "checkpoints-ready"
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_model))
    prompts = work / "prompts.json"
    prompts.write_text(
        json.dumps({"prompts": corpus_windows(CORPUS, tokenizer, WINDOW)[:1]})
    )
    native_gptq_missing = _native_gptq_unavailable()
    runs_file = work / "runs.json"
    runs_file.write_text(
        json.dumps(_runs(smollm2_model, ckpt, ready, native_gptq_missing is None))
    )
    out = work / "vllm.json"
    vllm_cmd = [
        "-m", "tests.plugin._w4a16_run", "--runs", str(runs_file),
        "--teacher-prompts", str(prompts), "--out", str(out),
    ]  # fmt: skip

    def hf(model: Path, name: str) -> dict:
        path = work / f"hf_{name}.json"
        run_python(
            ["-m", "tests.plugin._hf_reference_run", "--model", str(model),
             "--teacher-prompts", str(prompts), "--device", "cpu", "--out", str(path)],
            timeout=1200, env=subprocess_env(OMP_NUM_THREADS="1"),
        )  # fmt: skip
        return json.loads(path.read_text())["runs"][0]

    with ThreadPoolExecutor(1) as pool:
        # vLLM's first engine (online, from the bf16 checkpoint) starts while
        # the checkpoints are written; the later ones wait for `ready`.
        # VLLM_CPU_INT4_W4A8=0: on a CPU with AMX, vLLM 0.32 serves GPTQ
        # with its W4A8 kernel (activations quantized to int8) by default;
        # the W4A16 path to compare with is cpu_gemm_wna16.
        vllm_proc = pool.submit(
            run_python, vllm_cmd, timeout=1800,
            env=subprocess_env(VLLM_CPU_INT4_W4A8="0"),
        )  # fmt: skip
        quantize_checkpoint(smollm2_model, ckpt["sym64"], group_size=64, sym=True)
        quantize_checkpoint(
            smollm2_model, ckpt["act_asym128"], group_size=128, sym=False,
            act_order=True,
        )  # fmt: skip
        ready.write_text("")
        quantize_checkpoint(smollm2_model, ckpt["asym128"], group_size=128, sym=False)
        refs = {"bf16": hf(smollm2_model, "bf16")}
        for name in ("sym64", "act_asym128", "asym128"):
            deq = dequantize_checkpoint(ckpt[name], work / f"deq_{name}")
            refs[name] = hf(deq, name)
        stdout = vllm_proc.result().stdout
    for ln in stdout.splitlines():
        if "[w4a16]" in ln:
            print(ln[ln.index("[w4a16]") :])
        elif "myops W4A16 kernel" in ln:
            print(ln[ln.index("vllm-myops") :])
    runs = {r["name"]: r for r in json.loads(out.read_text())["runs"]}
    return {
        "runs": runs,
        "refs": refs,
        "stdout": stdout,
        "native_gptq_missing": native_gptq_missing,
    }


def test_online_rtn_perplexity_within_bound_of_bf16(w4a16_runs):
    online = w4a16_runs["runs"]["online"]["teacher"]
    ref = w4a16_runs["refs"]["bf16"]["teacher"]
    ppl, ref_ppl = teacher_forced.perplexity(online), teacher_forced.perplexity(ref)
    ratio = ppl / ref_ppl
    print(f"[w4a16] online RTN g128 asym ppl {ppl:.4f} vs bf16 (HF fp32) "
          f"{ref_ppl:.4f}: ratio {ratio:.4f}")  # fmt: skip
    assert MIN_ONLINE_PPL_RATIO <= ratio <= MAX_ONLINE_PPL_RATIO, ratio


def _check_vs_hf(c: dict) -> None:
    assert c["decisive_agreement"] == 1.0, c["flips_at_ref_margin"]
    assert c["top1_agreement"] >= MIN_TOP1
    assert c["max_lp_diff"] <= MAX_LP_DIFF_VS_HF
    assert c["mean_lp_diff"] <= MEAN_LP_DIFF_VS_HF
    assert abs(c["ppl"] / c["ref_ppl"] - 1) <= MAX_PPL_REL_DIFF_VS_HF


def test_online_rtn_matches_dequantized_hf(w4a16_runs):
    """The online path against HF fp32 of the same RTN weights (the
    asymmetric group-128 checkpoint's, which RTN makes identical: groups run
    along K per output column, so vLLM's fused qkv/gate_up change nothing)."""
    mine = w4a16_runs["runs"]["online"]["teacher"]
    c = teacher_forced.compare(
        mine, w4a16_runs["refs"]["asym128"]["teacher"], DECISIVE_MARGIN
    )
    print(
        teacher_forced.report(
            "w4a16", "online RTN g128 asym: ours vs HF fp32 dequantized", c
        )
    )
    _check_vs_hf(c)


def test_gptq_checkpoint_ours_matches_dequantized_hf(w4a16_runs):
    mine = w4a16_runs["runs"]["gptq_ours"]["teacher"]
    c = teacher_forced.compare(
        mine, w4a16_runs["refs"]["sym64"]["teacher"], DECISIVE_MARGIN
    )
    print(
        teacher_forced.report(
            "w4a16",
            f"gptq sym64 ({w4a16_runs['runs']['gptq_ours']['mode']}): ours vs HF "
            "fp32 dequantized",
            c,
        )
    )
    _check_vs_hf(c)


def test_gptq_checkpoint_ours_agrees_with_vllm_gptq(w4a16_runs):
    if w4a16_runs["native_gptq_missing"]:
        pytest.skip(w4a16_runs["native_gptq_missing"])
    runs, ref = w4a16_runs["runs"], w4a16_runs["refs"]["sym64"]["teacher"]
    floor = teacher_forced.compare(runs["gptq_vllm"]["teacher"], ref, DECISIVE_MARGIN)
    print(
        teacher_forced.report(
            "w4a16", "gptq sym64: vLLM gptq vs HF fp32 dequantized", floor
        )
    )
    c = teacher_forced.compare(
        runs["gptq_ours"]["teacher"], runs["gptq_vllm"]["teacher"], DECISIVE_MARGIN
    )
    print(teacher_forced.report("w4a16", "gptq sym64: ours vs vLLM gptq", c))
    _check_vs_hf(floor)  # vLLM's own path is on the reference too
    _check_vs_hf(c)


def test_act_order_asym_checkpoint_matches_dequantized_hf(w4a16_runs):
    mine = w4a16_runs["runs"]["act_asym_ours"]["teacher"]
    c = teacher_forced.compare(
        mine, w4a16_runs["refs"]["act_asym128"]["teacher"], DECISIVE_MARGIN
    )
    print(
        teacher_forced.report(
            "w4a16", "act-order asym g128: ours vs HF fp32 dequantized", c
        )
    )
    _check_vs_hf(c)


def test_every_quantized_linear_layer_ran_on_our_kernel(w4a16_runs):
    runs = w4a16_runs["runs"]
    for name, run in runs.items():
        calls = run["stats_after"]["calls"]["w4a16_linear"]
        if run["quantization"] is None:
            assert calls["myops"] == 0, (name, calls)
        else:
            # No other path is counted: a layer we claimed has none.
            assert calls["myops"] >= QUANTIZED_LINEAR_LAYERS, (name, calls)
    lines = [
        ln for ln in w4a16_runs["stdout"].splitlines() if "myops W4A16 kernel" in ln
    ]
    assert len(lines) >= 3, lines  # one per engine of ours (its worker process)
    for ln in lines:
        assert f"{QUANTIZED_LINEAR_LAYERS} linear layers" in ln, ln
        assert "model.layers.{0..29}.mlp.down_proj" in ln and "lm_head" in ln, ln
