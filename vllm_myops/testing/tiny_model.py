# SPDX-License-Identifier: Apache-2.0
"""Tiny random Hugging Face-format models, generated locally.

``make_tiny_model(out_dir, arch="llama", seed=0)`` writes config.json,
model.safetensors (bf16), tokenizer.json and tokenizer_config.json (with a
chat template) into out_dir and returns it. Nothing is downloaded: the
byte-level BPE tokenizer (vocab 512) is trained with ``tokenizers`` on the
small corpus below, the weights come from a seeded torch generator. The
result is deterministic and cached: a stamp file records the parameters and
a second call with the same ones returns at once.

Architectures:

- ``llama`` (LlamaForCausalLM): hidden 256, 2 layers, 4 heads (2 KV heads,
  head_dim 64), MLP 512, vocab 512. RMSNorm: input_layernorm,
  post_attention_layernorm, final norm.
- ``qwen3`` (Qwen3ForCausalLM): the same sizes plus Qwen3's per-head q_norm
  and k_norm, which vLLM applies to 3-D strided views of the qkv projection
  ([tokens, heads, head_dim] with row stride 768 elements).

Weights are scaled so greedy decoding is not degenerate: unit-variance
embeddings, projections scaled by 1/sqrt(fan_in) (each block adds a
contribution of the residual's size, so context matters), norm weights
1 + 0.2*N(0,1) (a kernel that drops or misplaces the weight changes the
output) and an lm_head giving logits of std ~4 (clear but not one-hot
preferences).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from vllm_myops.cache import default_cache_dir

GENERATOR_VERSION = 1
STAMP = "myops_tiny_model.json"
ARCHS = ("llama", "qwen3")

HIDDEN = 256
LAYERS = 2
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 64
INTERMEDIATE = 512
VOCAB = 512
MAX_POSITIONS = 2048

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

CORPUS = """\
The quick brown fox jumps over the lazy dog near the river bank.
A kernel engineer measures before optimising and verifies before trusting.
Root mean square normalisation divides each row by its root mean square.
The weight vector scales every channel after the normalisation step.
Large language models predict the next token from the tokens before it.
Memory bandwidth limits normalisation kernels, not arithmetic throughput.
The server answers requests over an OpenAI compatible HTTP interface.
Rain fell on the old stone bridge while the market opened in the square.
Children played in the garden and the cat slept under the warm window.
She wrote a letter to her brother who lived by the sea in a small town.
Every morning the baker lit the oven and the smell of bread filled the street.
The train left the station at nine and arrived in the city before noon.
Mountains rise above the valley where farmers grow wheat, apples and grapes.
A good test compares the result with a simple reference implementation.
Numerical stability matters when values are stored in half precision.
Profiling shows where the time goes; intuition often points the wrong way.
The compiler fuses small operations into one loop over the data.
Tokens flow through attention, then through the feed forward network.
Each layer adds its output to the residual stream of the model.
The scheduler batches requests so the processor stays busy.
Hello, how are you today? I am fine, thank you, and how are you?
What is the capital of France? The capital of France is Paris.
Two plus two is four, and four plus four is eight.
Once upon a time there was a little robot who wanted to learn to sing.
The robot practised every night until the stars faded into morning.
Birds sang in the trees, the wind moved through the tall green grass.
An engineer reads the source, writes a small probe, and checks the facts.
Clean code is easy to read, easy to test and easy to change later.
The library ships kernels for the processor and for the graphics card.
Ranking agreement tells whether the best answer stays the best answer.
Seven days make a week, twelve months make a year, and time moves on.
The river runs to the sea, the sea rises to the clouds, the clouds bring rain.
Please summarise the meeting notes and send them to the whole team.
Music filled the hall as the orchestra played the final movement.
The doctor listened carefully and wrote a short note for the patient.
A cup of tea, a good book and a quiet evening by the fire.
Numbers, letters and symbols: 0 1 2 3 4 5 6 7 8 9, a b c, x y z, + - * / = .
"""


def sample_prompts() -> list[str]:
    """A few prompts in the tokenizer's domain (tests, benchmarks)."""
    return [
        "The quick brown fox",
        "Root mean square normalisation divides",
        "Once upon a time there was",
        "What is the capital of France?",
        "The server answers requests",
        "Every morning the baker",
        "A good test compares the result",
        "Birds sang in the trees,",
    ]


def norm_calls_per_forward(arch: str, num_layers: int = LAYERS) -> dict[str, int]:
    """vllm.ir op calls one forward pass of the model makes (vLLM's Llama and
    Qwen3 code): layer 0's input_layernorm has no residual yet (rms_norm);
    the post-attention norms, later input norms and the final norm fuse the
    residual add. Qwen3 adds q_norm and k_norm (rms_norm) in every layer."""
    rms = 1
    fused = 2 * num_layers  # post_attention x L, input x (L-1), final x 1
    if arch == "qwen3":
        rms += 2 * num_layers
    elif arch != "llama":
        raise ValueError(f"unknown arch {arch!r} (known: {', '.join(ARCHS)})")
    return {"rms_norm": rms, "fused_add_rms_norm": fused}


def default_model_dir(arch: str = "llama", seed: int = 0) -> Path:
    return default_cache_dir() / f"tiny-{arch}-seed{seed}"


def _params(arch: str, seed: int) -> dict[str, Any]:
    return {"generator_version": GENERATOR_VERSION, "arch": arch, "seed": seed}


def _config(arch: str) -> dict[str, Any]:
    common: dict[str, Any] = {
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "vocab_size": VOCAB,
        "max_position_embeddings": MAX_POSITIONS,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "attention_bias": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "initializer_range": 0.02,
        "use_cache": True,
    }
    if arch == "llama":
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "rms_norm_eps": 1e-5,
            "rope_theta": 10000.0,
            "mlp_bias": False,
            **common,
        }
    if arch == "qwen3":
        return {
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0,
            "use_sliding_window": False,
            "sliding_window": None,
            "max_window_layers": LAYERS,
            **common,
        }
    raise ValueError(f"unknown arch {arch!r} (known: {', '.join(ARCHS)})")


def _printable_token_ids(tok: Any) -> list[int]:
    """Ids of tokens that decode to printable ASCII (no specials, no bytes of
    multi-byte characters, no control characters)."""
    ids = []
    for i in range(len(SPECIAL_TOKENS), tok.get_vocab_size()):
        s = tok.decode([i])
        if s and s.isprintable() and s.isascii():
            ids.append(i)
    return ids


def _weights(arch: str, seed: int, printable_ids: list[int]) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(seed)

    def randn(*shape: int, std: float) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * std).to(torch.bfloat16)

    def norm_weight(n: int) -> torch.Tensor:
        return (1.0 + 0.2 * torch.randn(n, generator=g)).to(torch.bfloat16)

    w: dict[str, torch.Tensor] = {
        "model.embed_tokens.weight": randn(VOCAB, HIDDEN, std=1.0)
    }
    q_out, kv_out = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w[p + "self_attn.q_proj.weight"] = randn(q_out, HIDDEN, std=HIDDEN**-0.5)
        w[p + "self_attn.k_proj.weight"] = randn(kv_out, HIDDEN, std=HIDDEN**-0.5)
        w[p + "self_attn.v_proj.weight"] = randn(kv_out, HIDDEN, std=HIDDEN**-0.5)
        w[p + "self_attn.o_proj.weight"] = randn(HIDDEN, q_out, std=q_out**-0.5)
        if arch == "qwen3":
            w[p + "self_attn.q_norm.weight"] = norm_weight(HEAD_DIM)
            w[p + "self_attn.k_norm.weight"] = norm_weight(HEAD_DIM)
        w[p + "mlp.gate_proj.weight"] = randn(INTERMEDIATE, HIDDEN, std=HIDDEN**-0.5)
        w[p + "mlp.up_proj.weight"] = randn(INTERMEDIATE, HIDDEN, std=HIDDEN**-0.5)
        w[p + "mlp.down_proj.weight"] = randn(
            HIDDEN, INTERMEDIATE, std=INTERMEDIATE**-0.5
        )
        w[p + "input_layernorm.weight"] = norm_weight(HIDDEN)
        w[p + "post_attention_layernorm.weight"] = norm_weight(HIDDEN)
    w["model.norm.weight"] = norm_weight(HIDDEN)
    # Normalised hidden states have RMS ~1: logit std ~ 0.25 * sqrt(256) = 4.
    # Only printable tokens get a row; the others (specials, control bytes,
    # pieces of UTF-8 characters) keep logit 0, below the typical maximum of
    # ~3 std, so the text a user sees is readable gibberish. EOS gets a
    # weaker row so generations sometimes end on their own.
    lm_head = torch.zeros(VOCAB, HIDDEN)
    rows = torch.randn(VOCAB, HIDDEN, generator=g) * 0.25
    idx = torch.tensor(printable_ids, dtype=torch.long)
    lm_head[idx] = rows[idx]
    lm_head[EOS_ID] = rows[EOS_ID] * 0.5
    w["lm_head.weight"] = lm_head.to(torch.bfloat16)
    return w


def _train_tokenizer() -> Any:
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Repeating the corpus changes no ranking but makes pair counts robust.
    lines = [ln for ln in CORPUS.splitlines() if ln.strip()]
    tok.train_from_iterator(lines * 4, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", BOS_ID)]
    )
    for i, t in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(t) == i, (t, tok.token_to_id(t))
    return tok


def _tokenizer_config() -> dict[str, Any]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "model_max_length": MAX_POSITIONS,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }


def _is_ours(out: Path, params: dict[str, Any]) -> bool | None:
    """True: out holds this model; False: another tiny model of ours (safe to
    replace); None: out does not exist or is empty."""
    stamp = out / STAMP
    if stamp.is_file():
        try:
            return bool(json.loads(stamp.read_text()) == params)
        except (OSError, ValueError):
            return False
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(
            f"{out} exists and is not a vllm-myops tiny model; choose another directory"
        )
    return None


def make_tiny_model(
    out_dir: str | os.PathLike[str], arch: str = "llama", seed: int = 0
) -> Path:
    """Generates (or reuses) a tiny random model in out_dir; returns its path."""
    from safetensors.torch import save_file

    out = Path(out_dir).expanduser().resolve()
    params = _params(arch, seed)
    if _is_ours(out, params):
        return out
    config = _config(arch)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        tok = _train_tokenizer()
        tok.save(str(tmp / "tokenizer.json"))
        weights = _weights(arch, seed, _printable_token_ids(tok))
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "tokenizer_config.json").write_text(
            json.dumps(_tokenizer_config(), indent=2) + "\n"
        )
        (tmp / "special_tokens_map.json").write_text(
            json.dumps({"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"})
            + "\n"
        )
        (tmp / STAMP).write_text(json.dumps(params) + "\n")
        # Publish atomically; a concurrent generator of the same model wins
        # the race harmlessly (identical content).
        if _is_ours(out, params):
            return out
        if out.exists():
            shutil.rmtree(out)
        try:
            os.rename(tmp, out)
        except OSError:
            if not _is_ours(out, params):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        description="Generate a tiny random model (no downloads)."
    )
    ap.add_argument("out_dir", nargs="?", help="default: the vllm-myops cache dir")
    ap.add_argument("--arch", choices=ARCHS, default="llama")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    out = args.out_dir or default_model_dir(args.arch, args.seed)
    print(make_tiny_model(out, args.arch, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
