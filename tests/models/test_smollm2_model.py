# SPDX-License-Identifier: Apache-2.0
"""The real conversion of SmolLM2-135M-Instruct (the `smollm2_model`
fixture: fetched with pip and converted once per machine, ~80 s on 2 busy
cores the first time), read back with transformers: the architecture vLLM
will see, the tokenizer, and an HF fp32 greedy answer. This is the only test
that runs HF generation; it is kept to 16 new tokens."""

from __future__ import annotations

import json

import pytest
import torch

from tests.kernels import utils
from vllm_myops.models import DEFAULT_MODEL, default_model_dir, is_converted

pytestmark = pytest.mark.slow

QUESTION = "What is the capital of France?"


def _load_causal_lm(path, dtype):
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    except TypeError:  # transformers < 4.56 names it torch_dtype
        return AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype)


def test_converted_config_and_cache(smollm2_model):
    assert smollm2_model == default_model_dir()
    assert is_converted(DEFAULT_MODEL, smollm2_model)
    config = json.loads((smollm2_model / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    shape = {
        k: config[k]
        for k in (
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "vocab_size",
            "intermediate_size",
        )
    }
    assert shape == {
        "hidden_size": 576,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "vocab_size": 49152,
        "intermediate_size": 1536,
    }
    assert config["tie_word_embeddings"] is True
    assert config.get("dtype", config.get("torch_dtype")) == "bfloat16"
    assert (smollm2_model / "model.safetensors").is_file()
    assert (smollm2_model / "generation_config.json").is_file()


def test_tokenizer_round_trip_and_chat_template(smollm2_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_model)
    text = "The capital of France is Paris. Café, naïve: 12 + 30 = 42!\n\tDone."
    ids = tok(text).input_ids
    assert tok.decode(ids) == text
    assert ids == tok(text, add_special_tokens=False).input_ids  # no BOS added
    assert (tok.bos_token, tok.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert tok.eos_token_id == 2 and len(tok) == 49152
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": QUESTION}],
        add_generation_prompt=True,
        tokenize=False,
    )
    # The template's default system prompt, then the user turn, then ours.
    assert prompt.startswith("<|im_start|>system\n")
    assert prompt.endswith(
        f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize("device", utils.devices()[:2])
def test_hf_fp32_greedy_answer_names_paris(smollm2_model, device):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_model)
    model = _load_causal_lm(smollm2_model, torch.float32).to(device).eval()
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": QUESTION}],
        add_generation_prompt=True,
        tokenize=False,
    )
    inputs = tok(prompt, return_tensors="pt", add_special_tokens=False).to(device)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=16, do_sample=False)
    answer = tok.decode(
        out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True
    )
    assert "Paris" in answer, answer
